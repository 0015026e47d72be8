"""Generated requests to SessionKernelService: mostly plausible field values, often hostile ones
(NUL characters, megabytes, unicode, control characters, forged page tokens), and bytes that are no
protobuf at all. Seeded, so a run sends the same requests every time.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from google.protobuf import timestamp_pb2
from google.protobuf.message import Message

from astrabox.environments.v1 import environment_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as pb

MB = 1024 * 1024
UNICODE = ["é", "漢字", "🦀", "\u202e", "\u0301", "\ufeff", "\U0010fffd", "ﷺ", "\u2028", "\U0001d518"]


@dataclass
class Values:
    """Generates field values: mostly plausible, often hostile; remembers the long ones."""

    rng: random.Random
    sessions: list[str]
    # The first 100 characters of every value longer than that.
    long_prefixes: set[str] = field(default_factory=set)

    def huge(self) -> str:
        size = self.rng.choice([70, 300, 5000, 70_000, 300_000, self.rng.randint(1, 3) * MB])
        value = self.rng.choice(["a", "\x00", "é", "🦀", "/", "x\x00"]) * size
        return self.remember(value[:size])

    def remember(self, value: str | bytes) -> str | bytes:
        if len(value) > 100:
            self.long_prefixes.add(value[:100].decode("latin-1") if isinstance(value, bytes) else value[:100])
        return value

    def hostile(self, huge: bool = True) -> str:
        """An empty, NUL, huge (or, not `huge`, merely long), unicode, control-character or odd value."""
        rng = self.rng
        kinds: list[Callable[[], str]] = [
            lambda: "",
            lambda: "a\x00b",
            self.huge if huge else lambda: self.remember("L" * 300),
            lambda: "".join(rng.choice(UNICODE) for _ in range(rng.randint(1, 40))),
            lambda: "".join(chr(rng.randint(1, 31)) for _ in range(rng.randint(1, 20))),
            lambda: " " * rng.randint(1, 5),
            lambda: "'; DROP TABLE sessions; --",
            lambda: "%s%n{0}\\u0000" * rng.randint(1, 3),
            lambda: "".join(chr(rng.randint(32, 0x2FFF)) for _ in range(rng.randint(1, 200))),
        ]
        return str(rng.choice(kinds)())

    def either(self, plausible: Callable[[], str], huge: bool = True) -> str:
        return plausible() if self.rng.random() < 0.5 else self.hostile(huge)

    def session_id(self) -> str:
        return self.either(lambda: self.rng.choice([*self.sessions, str(uuid.uuid4()), self.sessions[0].upper()]))

    def released(self) -> str:
        """The id of a session an archive or delete changes nothing of."""
        return self.either(lambda: self.rng.choice([str(uuid.uuid4()), self.sessions[2]]))

    def client_id(self) -> str:
        return self.either(lambda: f"id-{self.rng.randrange(50)}")

    def mode(self) -> str:
        return self.either(lambda: self.rng.choice(["default", "plan", "acceptEdits", "bypassPermissions", ""]))

    def path(self) -> str:
        choices = [
            "",
            "src",
            "a/b/c",
            "../etc",
            "a/../../x",
            "/abs",
            "x" * 256,
            "/".join(["d"] * 3000),
            "ok\x00no",
            "dir\\..\\up",
            "é/🦀",
        ]
        return self.either(lambda: self.remember(self.rng.choice(choices)))

    def text(self) -> str:
        return self.either(lambda: self.rng.choice(["hello", "line\nline", "  x  ", "é🦀"]))

    def token(self) -> str:
        choices = ["garbage", "eyJ0IjoxfQ", "eyJhZnRlciI6IDF9.AAAA", "a.b.c", "=" * 600, "...."]
        return self.either(lambda: self.rng.choice(choices))

    def small_int(self) -> int:
        return self.rng.choice([0, 1, 5, -1, 2**31 - 1, -(2**31), 499, 500, 501, 1000, 1001])

    def terminal_size(self) -> pb.TerminalSize:
        cells = [0, 1, 24, 80, 1000, 1001, 2**32 - 1]
        return pb.TerminalSize(rows=self.rng.choice(cells), columns=self.rng.choice(cells))

    def big_int(self) -> int:
        return self.rng.choice([0, 1, 3, -1, 2**63 - 1, -(2**63), 86_400_000, 86_400_001, 10**12])

    def labels(self) -> dict[str, str]:
        count = self.rng.choice([0, 1, 3, 64, 65, 200])
        return {
            self.either(lambda i=i: f"k{i}", huge=False) or f"e{i}": self.either(lambda: "v", huge=False)
            for i in range(count)
        }

    def answers(self) -> dict[str, str]:
        entries = {
            self.either(lambda i=i: f"q{i}", huge=False) or f"e{i}": self.either(lambda: "yes", huge=False)
            for i in range(self.rng.choice([0, 1, 3, 65]))
        }
        if self.rng.random() < 0.1:
            entries["big"] = self.huge()
        return entries

    def git_source(self) -> environment_pb2.GitSource:
        urls = ["http://127.0.0.1:8080/r.git", "ext::sh -c x", "file:///etc", "http://u:p@h/r", "https://", "ftp://h/r"]
        refs = ["", "main", "v1.0", "-oops", "a..b", "refs/heads/x", "a b", "0" * 40]
        dirs = ["", "src", "a/../..", "/abs", "./x//y", "\x00"]
        return environment_pb2.GitSource(
            url=self.either(lambda: self.rng.choice(urls)),
            ref=self.either(lambda: self.rng.choice(refs)),
            directory=self.either(lambda: self.rng.choice(dirs)),
        )

    def chunk(self) -> bytes:
        size = self.rng.choice([0, 10, 4096, MB, MB + 1, 2 * MB])
        return bytes(self.remember(b"\x00" * size))


def request_for(rpc: str, v: Values) -> Message:
    rng = v.rng
    if rpc == "CreateSession":
        return pb.CreateSessionRequest(
            request_id=v.client_id(),
            engine=v.either(lambda: rng.choice(["", "claude_code"])),
            permission_mode=v.mode(),
            model=v.either(lambda: rng.choice(["", "sonnet", "claude-opus-4-1[1m]"])),
            labels=v.labels(),
            environment=v.either(lambda: rng.choice(["", "py", "Py", str(uuid.uuid4())])),
            environment_version=rng.choice([0, 0, 1, 2**31 - 1, -1]),
            git_source=rng.choice([None, v.git_source()]),
        )
    if rpc == "GetSession":
        return pb.GetSessionRequest(session_id=v.session_id())
    if rpc == "ListSessions":
        return pb.ListSessionsRequest(
            page_size=v.small_int(),
            page_token=v.token(),
            states=rng.choice([[], [0], [2, 3], [7], [99], [-1], list(range(20))]),
            label_selector=v.either(lambda: rng.choice(["", "a=b", "a!=b,!c", "k", "a=b,", "=", "!", "a==b"])),
            created_after=rng.choice([None, timestamp_pb2.Timestamp(seconds=1), timestamp_pb2.Timestamp(nanos=-1)]),
            agent=rng.choice(["", "", "", "reviewer"]),
        )
    if rpc == "SendMessage":
        return pb.SendMessageRequest(
            session_id=v.session_id(), client_message_id=v.client_id(), text=v.text(), permission_mode=v.mode()
        )
    if rpc == "WatchSessionEvents":
        return pb.WatchSessionEventsRequest(
            session_id=v.session_id(), after_seq=v.big_int(), max_events_per_response=v.small_int()
        )
    if rpc == "ListSessionEvents":
        return pb.ListSessionEventsRequest(
            session_id=v.session_id(), after_seq=v.big_int(), page_size=v.small_int(), page_token=v.token()
        )
    if rpc == "InterruptTurn":
        return pb.InterruptTurnRequest(session_id=v.session_id(), request_id=v.client_id())
    if rpc == "RespondToInteraction":
        request = pb.RespondToInteractionRequest(
            session_id=v.session_id(), interaction_id=v.client_id(), request_id=v.client_id()
        )
        which = rng.randrange(5)
        if which == 0:
            request.allow.updated_input_json = v.either(lambda: rng.choice(["", "{}", '{"a": 1}', "[1]"]))
        elif which == 1:
            request.deny.message = v.text()
        elif which == 2:
            request.answers.answers.update(v.answers())
        elif which == 3:
            request.tool_result.content = v.text()
            request.tool_result.is_error = rng.random() < 0.5
        return request
    if rpc == "SetPermissionMode":
        return pb.SetPermissionModeRequest(
            session_id=v.session_id(), permission_mode=v.mode(), request_id=v.client_id()
        )
    # Only sessions that do not exist or are archived already, so the fixture's sessions live through the run.
    if rpc == "ArchiveSession":
        return pb.ArchiveSessionRequest(session_id=v.released(), request_id=v.client_id())
    if rpc == "DeleteSession":
        return pb.DeleteSessionRequest(session_id=v.released(), request_id=v.client_id())
    if rpc == "StopBackgroundTask":
        return pb.StopBackgroundTaskRequest(session_id=v.session_id(), task_id=v.client_id(), request_id=v.client_id())
    if rpc == "RevokeToolGrant":
        return pb.RevokeToolGrantRequest(session_id=v.session_id(), grant_id=v.client_id(), request_id=v.client_id())
    if rpc == "UploadWorkspaceArchive":
        return pb.UploadWorkspaceArchiveRequest(session_id=v.session_id(), path=v.path(), chunk=v.chunk())
    if rpc == "ListWorkspace":
        return pb.ListWorkspaceRequest(session_id=v.session_id(), path=v.path())
    if rpc == "DownloadWorkspaceArchive":
        return pb.DownloadWorkspaceArchiveRequest(session_id=v.session_id(), path=v.path())
    if rpc == "RunCommand":
        return pb.RunCommandRequest(session_id=v.session_id(), command=v.text(), timeout_ms=v.big_int())
    if rpc == "OpenTerminal":
        size = rng.choice([None, v.terminal_size()])
        return pb.OpenTerminalRequest(
            session_id=v.session_id(),
            command=v.either(lambda: rng.choice(["", "exit 3", "top"])),
            term=v.either(lambda: rng.choice(["", "xterm-256color", "dumb", "vt100 ", "x" * 65])),
            size=size,
            input=v.chunk(),
        )
    if rpc == "ForkSession":
        return pb.ForkSessionRequest(
            session_id=v.session_id(), request_id=v.client_id(), through_seq=v.big_int(), labels=v.labels()
        )
    raise AssertionError(f"no generator for {rpc}")


def refusable(message: Message) -> bool:
    """Whether any rule would refuse `message` (a NUL in a string, a value of more than 1 MiB):
    an answer told apart from the validation code's own, so that a call with such a value is known
    to be refused before it reaches a session, an agent or the database."""
    for _descriptor, value in message.ListFields():
        values = list(value.items()) if isinstance(value, Mapping) else [value]
        for item in values:
            for part in item if isinstance(item, tuple) else (item,):
                if isinstance(part, Message) and refusable(part):
                    return True
                if isinstance(part, str | bytes) and (len(part) > MB or (isinstance(part, str) and "\x00" in part)):
                    return True
    return False


def garbage(rng: random.Random, valid: bytes) -> bytes:
    """Bytes that are not a request: random, cut short, or a string field of bad UTF-8."""
    pick = rng.randrange(5)
    if pick == 0:
        return rng.randbytes(rng.choice([1, 7, 100, 70_000]))
    if pick == 1 and len(valid) > 1:
        return valid[: rng.randrange(1, len(valid))]
    if pick == 2:
        return b"\x0a\x03\xed\xa0\x80"  # field 1, a UTF-8 encoded surrogate
    if pick == 3:
        return b"\x12\x02\xc3\x28" + valid  # field 2, an invalid two-byte sequence
    return b"\xff" * rng.randint(1, 50)
