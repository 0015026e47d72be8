"""Workspace files and commands: requests a client waits on, carried to the
session's agent over its Connect stream and answered piece by piece.

They are not journaled and not durable. The agent's stream may be attached to
any control-plane replica: when it is not attached here, the request is
forwarded to the replica that recorded it (`controlplane.forwarding`). An
agent attached nowhere reachable is AGENT_NOT_CONNECTED, a retryable
UNAVAILABLE, an agent silent on a request for longer than its reply timeout is
AGENT_SILENT (DEADLINE_EXCEEDED), and a stream that breaks fails the call. A client that stops
reading cancels the request on the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import grpc
from google.rpc import error_details_pb2

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane import validation
from controlplane.errors import (
    AgentNotConnected,
    InvalidArgument,
    KernelError,
    QuotaExceeded,
    RuntimeNotAvailable,
    WorkspaceFailed,
)
from controlplane.kernel import SessionKernel
from controlplane.quotas import Quotas
from controlplane.session import SessionRecord
from serverkit.waits import beside, bounded, stop

Send = Callable[[runner_pb2.ConnectResponse], Awaitable[None]]

# How long the rest of a refused upload is read before the refusal is sent (see `drain`).
DRAIN_TIMEOUT_S = 30.0
_REPLIES_BUFFERED = 64


@dataclass(frozen=True, slots=True)
class WorkspaceTimeouts:
    """How long a workspace request waits, in seconds (the control plane's --workspace-* settings)."""

    # The agent may stay silent on a request this long: a command printing nothing for longer fails.
    reply: float = 660.0
    # A reply may wait this long for a slow client before the request is dropped.
    delivery: float = 30.0


@dataclass(frozen=True, slots=True)
class CommandOutput:
    stdout: bytes = b""
    stderr: bytes = b""
    exit_code: int | None = None


# A terminal opened without saying otherwise.
DEFAULT_TERM = "xterm-256color"
DEFAULT_ROWS, DEFAULT_COLUMNS = 24, 80


@dataclass(frozen=True, slots=True)
class TerminalStart:
    """What the first message of OpenTerminal asks for (0 and empty: the defaults)."""

    session_id: str
    command: str = ""
    term: str = ""
    rows: int = 0
    columns: int = 0


class Replicas(Protocol):
    """The other control-plane replicas, as far as workspace requests go."""

    async def record(self, agent_id: str, generation: int) -> None:
        """Note that this replica holds the stream of the agent's lease `generation`."""

    def forward(
        self, agent_id: str, session_id: str, requests: AsyncIterator[runner_pb2.WorkspaceRequest]
    ) -> AsyncGenerator[runner_pb2.WorkspaceReply, None]:
        """Exchange `requests` through the replica holding the agent's stream."""


class WorkspaceRouter:
    """Knows the agent streams on this replica and the requests waiting on them;
    hands requests for agents attached elsewhere to `replicas`."""

    def __init__(self, replicas: Replicas | None = None, timeouts: WorkspaceTimeouts = WorkspaceTimeouts()) -> None:
        self._replicas = replicas
        self._timeouts = timeouts
        self._streams: dict[str, Send] = {}
        self._pending: dict[str, asyncio.Queue[runner_pb2.WorkspaceReply]] = {}

    @contextlib.asynccontextmanager
    async def attach(self, agent_id: str, generation: int, send: Send) -> AsyncIterator[None]:
        """While the context is open, requests for `agent_id` go through `send`."""
        self._streams[agent_id] = send
        try:
            if self._replicas is not None:
                await self._replicas.record(agent_id, generation)
            yield
        finally:
            if self._streams.get(agent_id) is send:
                del self._streams[agent_id]

    async def deliver(self, reply: runner_pb2.WorkspaceReply) -> None:
        """Hand an agent's reply to the request waiting for it (if it still waits)."""
        queue = self._pending.get(reply.request_id)
        if queue is None:
            return
        try:
            await bounded(queue.put(reply), self._timeouts.delivery)
        except TimeoutError:
            self._pending.pop(reply.request_id, None)  # the client stopped reading; the request is dropped

    async def exchange(
        self, agent_id: str, session_id: str, requests: AsyncIterator[runner_pb2.WorkspaceRequest]
    ) -> AsyncGenerator[runner_pb2.WorkspaceReply, None]:
        """Send `requests` (one, or an upload's chunks) and yield the replies up to the last,
        through the agent's stream here or through the replica that holds it."""
        if agent_id in self._streams or self._replicas is None:
            replies = self.exchange_here(agent_id, session_id, requests)
        else:
            replies = self._replicas.forward(agent_id, session_id, requests)
        async with contextlib.aclosing(replies):
            async for reply in replies:
                yield reply

    async def exchange_here(
        self, agent_id: str, session_id: str, requests: AsyncIterator[runner_pb2.WorkspaceRequest]
    ) -> AsyncGenerator[runner_pb2.WorkspaceReply, None]:
        """`exchange` through the agent's stream on this replica only."""
        send = self._streams.get(agent_id)
        if send is None:
            raise AgentNotConnected(
                f"the agent {agent_id} running session {session_id} is not connected to this control plane; retry",
                {"agent_id": agent_id},
            )
        request_id = str(uuid.uuid4())
        queue: asyncio.Queue[runner_pb2.WorkspaceReply] = asyncio.Queue(_REPLIES_BUFFERED)
        self._pending[request_id] = queue
        finished = False

        async def send_all() -> None:
            async for request in requests:
                request.request_id, request.session_id = request_id, session_id
                await send(runner_pb2.ConnectResponse(workspace_request=request))

        # Requests go on while replies come back (a terminal's keystrokes and its output); one
        # the client's side refuses (an upload over its quota) fails the exchange.
        sending = asyncio.create_task(send_all(), name=f"workspace-send-{request_id}")
        try:
            while True:
                try:
                    reply = await beside(queue.get(), sending, self._timeouts.reply)
                except TimeoutError:
                    raise _silent(agent_id, self._timeouts.reply) from None
                if reply.WhichOneof("body") == "error":
                    finished = True
                    raise _failure(reply)
                yield reply
                if reply.last:
                    finished = True
                    return
        finally:
            await stop(sending)
            self._pending.pop(request_id, None)
            if not finished and self._streams.get(agent_id) is send:
                cancel = runner_pb2.WorkspaceRequest(
                    request_id=request_id, session_id=session_id, cancel=runner_pb2.CancelWorkspaceRequest()
                )
                with contextlib.suppress(Exception):
                    await send(runner_pb2.ConnectResponse(workspace_request=cancel))


def _silent(agent_id: str, seconds: float) -> WorkspaceFailed:
    return WorkspaceFailed(
        grpc.StatusCode.DEADLINE_EXCEEDED,
        "AGENT_SILENT",
        f"the agent {agent_id} said nothing on this request for {seconds:g} s and it was cancelled; a command "
        "that prints nothing for longer needs the control plane's --workspace-reply-timeout raised",
    )


def _failure(reply: runner_pb2.WorkspaceReply) -> WorkspaceFailed:
    reason = "INTERNAL"
    for detail in reply.error.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            reason = info.reason
    code = next((c for c in grpc.StatusCode if c.value[0] == reply.error.code), grpc.StatusCode.INTERNAL)
    return WorkspaceFailed(code, reason, reply.error.message)


async def drain(messages: AsyncIterator[object]) -> None:
    """Read and drop what a client still streams after its call was refused, so that it learns why.

    gRPC fails a client's write into a stream the server has already closed with INTERNAL ("Internal
    error from Core"), which hides the refusal's code and reason: a client sending a large archive to
    a bad path would see that rather than INVALID_ARGUMENT. Bounded in time: a client that keeps
    sending gets the refusal after DRAIN_TIMEOUT_S anyway."""
    with contextlib.suppress(Exception):  # a broken stream or the timeout: the refusal follows regardless
        async with asyncio.timeout(DRAIN_TIMEOUT_S):
            while True:
                try:
                    await anext(messages)
                except StopAsyncIteration:
                    return
                except KernelError:
                    pass  # a message refused at the edge (`controlplane.edge`): dropped like the rest


async def _one(request: runner_pb2.WorkspaceRequest) -> AsyncIterator[runner_pb2.WorkspaceRequest]:
    yield request


class WorkspaceFiles:
    """The client-facing operations on a session's workspace, within the project's quotas."""

    def __init__(self, kernel: SessionKernel, router: WorkspaceRouter, quotas: Quotas) -> None:
        self._kernel = kernel
        self._router = router
        self._quotas = quotas

    async def _running(self, session_id: str) -> SessionRecord:
        session = await self._kernel.get_session(session_id)
        if not session.runtime_available or not session.agent_id:
            raise RuntimeNotAvailable(
                f"session {session.session_id} has no sandbox right now ({session.state.value}); "
                "send it a message to bring it back",
                {"session_id": session.session_id},
            )
        return session

    async def _agent_of(self, session_id: str) -> tuple[str, str]:
        session = await self._running(session_id)
        return session.agent_id, session.session_id

    async def list(self, session_id: str, path: str) -> runner_pb2.DirectoryListing:
        listing = runner_pb2.ListDirectory(path=validation.workspace_path(path))
        request = runner_pb2.WorkspaceRequest(list_directory=listing)
        agent_id, session_id = await self._agent_of(session_id)
        async for reply in self._router.exchange(agent_id, session_id, _one(request)):
            return reply.listing
        raise AssertionError("the agent answered nothing")

    async def download(self, session_id: str, path: str) -> AsyncIterator[bytes]:
        reading = runner_pb2.ReadArchive(path=validation.workspace_path(path))
        request = runner_pb2.WorkspaceRequest(read_archive=reading)
        agent_id, session_id = await self._agent_of(session_id)
        async for reply in self._router.exchange(agent_id, session_id, _one(request)):
            if reply.archive_chunk:
                yield reply.archive_chunk

    async def run(self, session_id: str, command: str, timeout_ms: int) -> AsyncIterator[CommandOutput]:
        if not command.strip():
            raise InvalidArgument("command", "command must not be empty")
        if timeout_ms < 0:
            raise InvalidArgument("timeout_ms", "timeout_ms must not be negative")
        session = await self._running(session_id)
        assert session.project_id is not None
        request = runner_pb2.WorkspaceRequest(
            exec_command=runner_pb2.ExecCommand(command=command, timeout_ms=timeout_ms)
        )
        async with self._quotas.running_command(session.project_id, session.session_id):
            replies = self._router.exchange(session.agent_id, session.session_id, _one(request))
            async with contextlib.aclosing(replies):
                async for reply in replies:
                    body = reply.WhichOneof("body")
                    if body == "exit_code":
                        yield CommandOutput(exit_code=reply.exit_code)
                    elif body in ("stdout", "stderr"):
                        yield CommandOutput(**{body: getattr(reply, body)})

    async def terminal(
        self, first: TerminalStart, inputs: AsyncIterator[runner_pb2.TerminalInput]
    ) -> AsyncIterator[CommandOutput]:
        """A program on a terminal in the session's sandbox: its output (as stdout) and then its exit
        code, while `inputs` (keystrokes, sizes) go to it. Counts as a running command."""
        session = await self._running(first.session_id)
        assert session.project_id is not None
        opening = runner_pb2.OpenTerminal(
            command=first.command,
            term=first.term or DEFAULT_TERM,
            rows=first.rows or DEFAULT_ROWS,
            columns=first.columns or DEFAULT_COLUMNS,
        )

        async def requests() -> AsyncIterator[runner_pb2.WorkspaceRequest]:
            yield runner_pb2.WorkspaceRequest(open_terminal=opening)
            async for given in inputs:
                if given.data or (given.rows and given.columns):
                    yield runner_pb2.WorkspaceRequest(terminal_input=given)

        async with self._quotas.running_command(session.project_id, session.session_id):
            replies = self._router.exchange(session.agent_id, session.session_id, requests())
            async with contextlib.aclosing(replies):
                async for reply in replies:
                    body = reply.WhichOneof("body")
                    if body == "exit_code":
                        yield CommandOutput(exit_code=reply.exit_code)
                    elif body == "stdout":
                        yield CommandOutput(stdout=reply.stdout)

    async def upload(self, first: tuple[str, str], chunks: AsyncIterator[bytes]) -> runner_pb2.ArchiveWritten:
        """Unpack the archive in `chunks` into `first` = (session_id, path)."""
        session_id, path = validation.session_id(first[0]), validation.workspace_path(first[1])
        session = await self._running(session_id)
        assert session.project_id is not None
        agent_id, session_id = session.agent_id, session.session_id
        # The project's quota, never above validation.MAX_UPLOAD_BYTES (its bound).
        limit = await self._quotas.upload_bytes(session.project_id)

        async def requests() -> AsyncIterator[runner_pb2.WorkspaceRequest]:
            total, target = 0, path
            async for chunk in chunks:  # each at most validation.MAX_CHUNK_BYTES (checked at the edge)
                total += len(chunk)
                if total > limit:  # this chunk never reaches the agent, which unpacks nothing before the last
                    raise QuotaExceeded(
                        "upload_bytes",
                        limit,
                        total,
                        f"the upload is larger than the project's quota of {limit} bytes (over {total} so far)",
                    )
                yield runner_pb2.WorkspaceRequest(write_archive=runner_pb2.WriteArchive(path=target, chunk=chunk))
                target = ""
            yield runner_pb2.WorkspaceRequest(write_archive=runner_pb2.WriteArchive(path=target, last=True))

        async for reply in self._router.exchange(agent_id, session_id, requests()):
            return reply.written
        raise AssertionError("the agent answered nothing")
