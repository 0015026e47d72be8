"""The web API driven by curl alone, as the README shows it: JSON bodies, the Connect protocol's
streaming for the watch and the upload, against a real stack (control plane, agent, the real
Claude Code CLI in a sandbox, the offline model). The API key travels in a header file (`-H @file`),
never on curl's command line."""

from __future__ import annotations

import base64
import io
import json
import queue
import shutil
import struct
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.stack import StartStack

pytestmark = pytest.mark.e2e

KERNEL = "astrabox.sessionkernel.v1.SessionKernelService"
TIMEOUT = 180


@pytest.fixture
def curl() -> str:
    found = shutil.which("curl")
    if found is None:
        pytest.skip("curl is not installed (apt-get install curl)")
    return found


class Curl:
    """curl against one web API, with the key in a private header file."""

    def __init__(self, curl: str, base: str, headers: Path) -> None:
        self._curl = curl
        self._base = base
        self._headers = headers

    def command(self, method: str, content_type: str, data: str) -> list[str]:
        return [
            self._curl,
            "--silent",
            "--show-error",
            "--no-buffer",
            "--header",
            f"@{self._headers}",
            "--header",
            f"Content-Type: {content_type}",
            "--data-binary",
            data,
            f"{self._base}/{method}",
        ]

    def call(self, method: str, body: dict[str, Any], expect_status: int = 200) -> Any:
        result = subprocess.run(
            [*self.command(method, "application/json", json.dumps(body)), "--write-out", "\n%{http_code}"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=True,
        )
        text, _, status = result.stdout.rpartition("\n")
        assert int(status) == expect_status, f"{method}: {status} {text}"
        return json.loads(text)


def stream_envelopes(body: bytes) -> list[tuple[int, Any]]:
    """(flags, JSON) of each envelope of a Connect streaming answer."""
    found, at = [], 0
    while at < len(body):
        flags, length = struct.unpack(">BI", body[at : at + 5])
        found.append((flags, json.loads(body[at + 5 : at + 5 + length])))
        at += 5 + length
    return found


def envelope(message: dict[str, Any]) -> bytes:
    data = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(data)) + data


class Watch:
    """`curl` holding WatchSessionEvents open; its envelopes parsed by a thread as they arrive."""

    def __init__(self, api: Curl, session_id: str, body_file: Path) -> None:
        body_file.write_bytes(envelope({"sessionId": session_id}))
        self._process = subprocess.Popen(
            api.command(f"{KERNEL}/WatchSessionEvents", "application/connect+json", f"@{body_file}"),
            stdout=subprocess.PIPE,
        )
        self.events: queue.Queue[Any] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        while header := self._process.stdout.read(5):
            flags, length = struct.unpack(">BI", header)
            message = json.loads(self._process.stdout.read(length))
            self.events.put(message if flags == 0 else {"end": message})

    def until(self, kind: str) -> Iterator[Any]:
        """Events up to and including the first of `kind`."""
        while True:
            message = self.events.get(timeout=TIMEOUT)
            assert "end" not in message, message
            yield message["event"]
            if message["event"]["kind"] == kind:
                return

    def close(self) -> None:
        self._process.terminate()
        self._process.wait(timeout=30)


def web_url(stack: Any) -> str:
    return stack.controlplane.wait_for_line(r"web API and console on (http://\S+)").group(1)


def key_header_file(tmp_path: Path, key: str) -> Path:
    headers = tmp_path / "headers"
    headers.touch(mode=0o600)
    headers.write_text(f"Authorization: Bearer {key}\n")
    return headers


def test_curl_creates_a_session_watches_answers_and_lists_the_workspace(
    stacks: StartStack, api_key: str, curl: str, tmp_path: Path
) -> None:
    stack = stacks(controlplane_args=("--web-listen", "127.0.0.1:0"))
    api = Curl(curl, web_url(stack), key_header_file(tmp_path, api_key))

    session = api.call(f"{KERNEL}/CreateSession", {"requestId": "curl-create", "labels": {"via": "curl"}})["session"]
    watch = Watch(api, session["sessionId"], tmp_path / "watch-body")
    try:
        seen = list(watch.until("EVENT_KIND_RUNTIME_READY"))
        accepted = api.call(
            f"{KERNEL}/SendMessage",
            {"sessionId": session["sessionId"], "clientMessageId": "curl-m1", "text": "ask: Which colour? Red|Blue"},
        )
        asked = list(watch.until("EVENT_KIND_INTERACTION_REQUESTED"))
        interaction = asked[-1]["interactionRequested"]["interaction"]
        [question] = interaction["questions"]
        assert question["options"] == ["Red", "Blue"]
        api.call(
            f"{KERNEL}/RespondToInteraction",
            {
                "sessionId": session["sessionId"],
                "interactionId": interaction["interactionId"],
                "requestId": "curl-answer",
                "answers": {"answers": {question["question"]: "Blue"}},
            },
        )
        finished = list(watch.until("EVENT_KIND_TURN_COMPLETED"))
    finally:
        watch.close()
    events = seen + asked + finished
    assert [int(e["seq"]) for e in events] == list(range(1, len(events) + 1))  # nothing missing or twice
    assert finished[-1]["turnId"] == accepted["turnId"]
    assert finished[-1]["turnCompleted"]["result"] == "You chose: Blue."

    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        content = b"uploaded by curl\n"
        member = tarfile.TarInfo("notes/from-curl.txt")
        member.size = len(content)
        tar.addfile(member, io.BytesIO(content))
    data = archive.getvalue()
    chunks = [data[i : i + 4096] for i in range(0, len(data), 4096)]  # several envelopes: a client stream
    upload = tmp_path / "upload-body"
    upload.write_bytes(
        envelope({"sessionId": session["sessionId"], "chunk": base64.b64encode(chunks[0]).decode()})
        + b"".join(envelope({"chunk": base64.b64encode(chunk).decode()}) for chunk in chunks[1:])
    )
    result = subprocess.run(
        api.command(f"{KERNEL}/UploadWorkspaceArchive", "application/connect+json", f"@{upload}"),
        capture_output=True,
        timeout=TIMEOUT,
        check=True,
    )
    flags, length = struct.unpack(">BI", result.stdout[:5])
    assert flags == 0, result.stdout
    assert int(json.loads(result.stdout[5 : 5 + length])["entries"]) >= 1
    assert json.loads(result.stdout[10 + length :]) == {}  # the end of the stream, no error

    listing = api.call(f"{KERNEL}/ListWorkspace", {"sessionId": session["sessionId"], "path": "notes"})
    assert [entry["name"] for entry in listing["entries"]] == ["from-curl.txt"]

    # A terminal, half-duplex as HTTP/1.1 has it: keystrokes in the body, output and exit code back.
    keys = base64.b64encode(b"cat notes/from-curl.txt; exit 3\n").decode()
    terminal = tmp_path / "terminal-body"
    terminal.write_bytes(
        envelope({"sessionId": session["sessionId"], "size": {"rows": 10, "columns": 40}, "input": keys})
    )
    result = subprocess.run(
        api.command(f"{KERNEL}/OpenTerminal", "application/connect+json", f"@{terminal}"),
        capture_output=True,
        timeout=TIMEOUT,
        check=True,
    )
    *pieces, (end_flags, end) = stream_envelopes(result.stdout)
    assert (end_flags, end) == (2, {}), result.stdout[-500:]
    output = b"".join(base64.b64decode(piece["output"]) for _, piece in pieces if "output" in piece)
    assert b"uploaded by curl" in output and pieces[-1][1] == {"exitCode": 3}


def test_curl_without_a_key_or_with_a_forged_origin_is_refused(stacks: StartStack, curl: str, tmp_path: Path) -> None:
    stack = stacks(controlplane_args=("--web-listen", "127.0.0.1:0"))
    base = web_url(stack)
    empty = tmp_path / "no-headers"
    empty.write_text("")
    anonymous = Curl(curl, base, empty)
    error = anonymous.call(f"{KERNEL}/ListSessions", {}, expect_status=401)
    assert error["code"] == "unauthenticated"
    forged = tmp_path / "forged"
    forged.write_text("Origin: https://evil.example\n")
    error = Curl(curl, base, forged).call(f"{KERNEL}/ListSessions", {}, expect_status=403)
    assert error["code"] == "permission_denied"
