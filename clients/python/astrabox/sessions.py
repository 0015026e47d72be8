"""A handle on one session, and on the turns its messages open.

    async with AstraBoxClient.connect("127.0.0.1:7233") as client:
        session = await client.start_session()            # created and READY
        turn = await session.send("Create hello.txt")
        async for event in turn.events():                 # this turn's events, until it ends
            if isinstance(event.message, AssistantMessage) and event.message.text:
                print(event.message.text)
        result = await turn.result()                      # TurnResult: outcome, text, usage, cost
        print(await session.read_file("hello.txt"))

A `SessionHandle` holds only the session's id and the client: it is cheap to
make (`client.session(session_id)`), and every call goes to the server, so it
never shows stale state. Each method delegates to the `AstraBoxClient` method
of the same concept and raises what that raises (`AstraBoxError`).
"""

from __future__ import annotations

import enum
import io
import os
import posixpath
import tarfile
from collections.abc import AsyncGenerator, Collection, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, overload

import grpc

from astrabox.errors import AstraBoxError
from astrabox.events import Delta, Event
from astrabox.messages import ResultMessage, Usage
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as api
from astrabox.sessionkernel.v1 import session_pb2

if TYPE_CHECKING:
    from astrabox.client import AstraBoxClient, CommandResult

__all__ = ["SessionHandle", "Turn", "TurnOutcome", "TurnResult"]


class TurnOutcome(enum.Enum):
    """How a turn ended."""

    COMPLETED = "turn_completed"
    """The engine finished it with a result (which may itself report an error: see `TurnResult.is_error`)."""
    FAILED = "turn_failed"
    """It ended without a result (the runtime failed or was lost, a deadline passed, …)."""
    INTERRUPTED = "turn_interrupted"
    """It was interrupted."""


@dataclass(frozen=True, slots=True)
class TurnResult:
    """The end of a turn, and what the engine reported about it."""

    turn_id: str
    outcome: TurnOutcome
    text: str
    """The turn's final text when it completed; why it failed or stopped otherwise."""
    is_error: bool
    """True unless it completed and the engine reported success."""
    result: ResultMessage | None
    """The engine's result message (usage, cost, number of model calls), when it sent one."""
    events: tuple[Event, ...]
    """The turn's events, from its acceptance to its end (session-level events in between included)."""

    @property
    def usage(self) -> Usage | None:
        """The tokens the turn used, as the engine reported them."""
        return self.result.usage if self.result else None

    @property
    def total_cost_usd(self) -> float | None:
        """The turn's cost as the engine priced it."""
        return self.result.total_cost_usd if self.result else None


class Turn:
    """A message a session accepted, and the turn it opened (queued behind a running one, if need be)."""

    def __init__(self, session: SessionHandle, turn_id: str, seq: int) -> None:
        self.session = session
        """The session the turn belongs to."""
        self.turn_id = turn_id
        """The turn's id, as events name it."""
        self.seq = seq
        """The seq of the event that accepted the message."""

    def __repr__(self) -> str:
        return f"Turn(session_id={self.session.id!r}, turn_id={self.turn_id!r}, seq={self.seq})"

    async def events(self) -> AsyncGenerator[Event, None]:
        """The turn's events, live, from its acceptance up to and including the one that ends it.

        Session-level events in between (the runtime starting, say) are
        included; another turn's events are not. If the turn parks on an
        interaction, this waits until someone answers it (`SessionHandle.respond`)."""
        async with aclosing(self.session.watch(after_seq=self.seq - 1)) as watched:
            async for event in watched:
                if event.turn_id not in ("", self.turn_id):
                    continue
                yield event
                if event.turn_id == self.turn_id and event.ends_turn:
                    return

    async def result(self) -> TurnResult:
        """Waits for the turn to end and returns how it did (see `events` about interactions).

        Bound the wait with `asyncio.timeout` if it must be bounded."""
        async with aclosing(self.events()) as events_of_turn:
            events = [event async for event in events_of_turn]
        end = events[-1]
        outcome = TurnOutcome(end.kind)
        result = next(
            (e.message for e in reversed(events) if isinstance(e.message, ResultMessage) and e.turn_id == self.turn_id),
            None,
        )
        proto = end.proto
        if outcome is TurnOutcome.COMPLETED:
            text, is_error = proto.turn_completed.result, proto.turn_completed.is_error
        elif outcome is TurnOutcome.FAILED:
            text, is_error = proto.turn_failed.reason, True
        else:
            text, is_error = proto.turn_interrupted.reason, True
        return TurnResult(self.turn_id, outcome, text, is_error, result, tuple(events))


class SessionHandle:
    """One session, by id. Get one from `AstraBoxClient.session(id)` or `AstraBoxClient.start_session()`."""

    def __init__(self, client: AstraBoxClient, session_id: str) -> None:
        self._client = client
        self._id = session_id

    def __repr__(self) -> str:
        return f"SessionHandle({self._id!r})"

    @property
    def id(self) -> str:
        """The session's id."""
        return self._id

    @property
    def client(self) -> AstraBoxClient:
        """The client the handle calls through."""
        return self._client

    # The session

    async def get(self) -> session_pb2.Session:
        """The session as it is now (state, current turn, pending interaction, background tasks, …)."""
        return await self._client.get_session(self._id)

    async def wait_for_state(
        self, states: Collection[int | str] | int | str, timeout: float = 60.0
    ) -> session_pb2.Session:
        """Waits until the session is in one of `states` ("READY", …); see `AstraBoxClient.wait_for_state`."""
        return await self._client.wait_for_state(self._id, states, timeout)

    async def set_permission_mode(self, permission_mode: str) -> session_pb2.Session:
        """Changes the engine's permission mode ("default" asks before each tool) for the following turns."""
        return await self._client.set_permission_mode(self._id, permission_mode)

    async def stop_background_task(self, task_id: str) -> session_pb2.Session:
        """Asks the engine to stop one of the session's background tasks."""
        return await self._client.stop_background_task(self._id, task_id)

    async def archive(self) -> session_pb2.Session:
        """Releases the session's sandbox; its history stays readable."""
        return await self._client.archive_session(self._id)

    async def delete(self) -> session_pb2.Session:
        """Deletes the session and its sandbox."""
        return await self._client.delete_session(self._id)

    # Turns and events

    async def send(self, text: str, *, client_message_id: str | None = None, permission_mode: str = "") -> Turn:
        """Sends a user message and returns the turn it opened (queued if a turn is running).

        Idempotent on `client_message_id` (a new uuid4 by default)."""
        accepted = await self._client.send_message(
            self._id, text, client_message_id=client_message_id, permission_mode=permission_mode
        )
        return Turn(self, accepted.turn_id, accepted.seq)

    @overload
    def watch(self, after_seq: int = 0, *, deltas: Literal[False] = False) -> AsyncGenerator[Event, None]: ...

    @overload
    def watch(self, after_seq: int = 0, *, deltas: bool) -> AsyncGenerator[Event | Delta, None]: ...

    async def watch(self, after_seq: int = 0, *, deltas: bool = False) -> AsyncGenerator[Event | Delta, None]:
        """Every event after `after_seq`, stored then live, each exactly once, until the caller stops;
        with `deltas`, also the `Delta`s of messages being written. See `AstraBoxClient.watch` (it
        resumes by itself after a lost connection)."""
        async with aclosing(self._client.watch(self._id, after_seq=after_seq, deltas=deltas)) as watched:
            async for item in watched:
                yield item if isinstance(item, Delta) else Event.from_proto(item)

    async def events(self, after_seq: int = 0) -> AsyncGenerator[Event, None]:
        """Every event stored now after `after_seq`; then it ends."""
        async with aclosing(self._client.iter_events(self._id, after_seq=after_seq)) as stored:
            async for event in stored:
                yield Event.from_proto(event)

    async def respond(
        self,
        interaction_id: str | None = None,
        *,
        allow: bool = False,
        deny: str | None = None,
        answers: Mapping[str, str] | None = None,
        updated_input_json: str = "",
    ) -> session_pb2.Session:
        """Answers an interaction: exactly one of `allow=True`, `deny="why"` or `answers={question: answer}`.

        Without `interaction_id`, the one the session waits on now; with none
        pending that is `AstraBoxError` FAILED_PRECONDITION INTERACTION_NOT_PENDING."""
        if interaction_id is None:
            session = await self.get()
            if not session.HasField("pending_interaction"):
                raise AstraBoxError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"session {self._id} has no pending interaction",
                    reason="INTERACTION_NOT_PENDING",
                )
            interaction_id = session.pending_interaction.interaction_id
        return await self._client.respond_to_interaction(
            self._id, interaction_id, allow=allow, deny=deny, answers=answers, updated_input_json=updated_input_json
        )

    async def interrupt(self) -> session_pb2.Session:
        """Asks the running turn to stop; it ends as `turn_interrupted`."""
        return await self._client.interrupt_turn(self._id)

    # Workspace files and commands: paths are relative to the workspace, or absolute under /workspace

    async def upload_directory(
        self, local_dir: str | os.PathLike[str], path: str = ""
    ) -> api.UploadWorkspaceArchiveResponse:
        """Copies the contents of a local directory into the workspace directory `path`."""
        return await self._client.upload_directory(self._id, local_dir, path)

    async def upload_archive(self, archive: bytes, path: str = "") -> api.UploadWorkspaceArchiveResponse:
        """Unpacks a tar archive into the workspace directory `path`."""
        return await self._client.upload_archive(self._id, archive, path)

    async def write_file(self, path: str, data: bytes | str) -> None:
        """Writes one file of the workspace (its directories are made as needed); text is written as UTF-8."""
        directory, name = posixpath.split(path)
        if not name:
            raise ValueError(f"not a file path: {path!r}")
        content = data.encode() if isinstance(data, str) else data
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            entry = tarfile.TarInfo(name)
            entry.size, entry.mode = len(content), 0o644
            archive.addfile(entry, io.BytesIO(content))
        await self._client.upload_archive(self._id, buffer.getvalue(), directory)

    async def download_archive(self, path: str = "") -> bytes:
        """A tar archive of a file or directory of the workspace (all of it by default)."""
        return await self._client.download_archive(self._id, path)

    async def read_file(self, path: str) -> bytes:
        """The content of one file of the workspace. `IsADirectoryError` for a directory,
        `ValueError` for anything else that is not a regular file (a link, say)."""
        archive = await self._client.download_archive(self._id, path)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            members = tar.getmembers()
            if members and members[0].isdir():
                raise IsADirectoryError(f"{path!r} is a directory")
            if len(members) != 1 or not members[0].isfile():
                raise ValueError(f"{path!r} is not a regular file")
            extracted = tar.extractfile(members[0])
            assert extracted is not None  # a regular file's
            return extracted.read()

    async def list_files(self, path: str = "") -> list[api.WorkspaceEntry]:
        """The entries of a workspace directory (name, type, size, mode, time)."""
        return await self._client.list_workspace(self._id, path)

    async def run_command(self, command: str, timeout: float = 0) -> CommandResult:
        """Runs a shell command in the session's sandbox (in /workspace) and collects its output."""
        return await self._client.run_command(self._id, command, timeout)
