"""The agent's end of `RunnerService.Connect`: one stream to the control plane, redialled forever.

Per stream: Hello (every held session with its newest output_seq, each engine's
manifest) → Welcome
(lease, committed cursor per session) → then concurrently
- send every stored output after the committed cursors, ≤ `batch_size` and
  ≤ `max_batch_bytes` per OutputBatch, with at most `window` outputs unacknowledged (the outbox on
  disk is the buffer; what was just committed comes from memory, within its bound: relay/committed.py);
- trim the outbox with every committed cursor; on a negative acknowledgement
  resend the session from its committed cursor;
- hand commands to the applier and send its CommandAcks;
- send Heartbeat every `heartbeat_interval_ms`, written ahead of any output,
  ack or reply still queued (one gRPC write at a time: it can still wait for
  the write under way).
A stream that fails, ends, or stays silent for three heartbeat intervals is
torn down and redialled with capped exponential backoff and jitter.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import grpc
import structlog

from astrabox.backoff import Backoff
from astrabox.environments.v1 import environment_pb2 as env_pb
from astrabox.runner.v1 import runner_service_pb2 as pb
from astrabox.runner.v1 import runner_service_pb2_grpc as pb_grpc
from dataplane_agent.engines import EngineManifest
from dataplane_agent.errors import RelayError, StreamRejected
from dataplane_agent.relay.deltas import LiveDeltas
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.state import AgentState
from serverkit import versions
from serverkit.waits import keep_cancellation

log = structlog.get_logger(__name__)


class CommandSink(Protocol):
    """Where commands go (implemented by `commands.CommandApplier`)."""

    def submit(self, command: pb.Command, reply: Callable[[pb.CommandAck], None]) -> None: ...


@dataclass(frozen=True, slots=True)
class RelayConfig:
    """Who the agent is and how it talks to the control plane."""

    target: str
    agent_id: str
    enrollment_token: str
    instance_id: str
    # The agent's own credential (`relay.credential`); empty: none (an agent before credentials).
    credential: str = field(default="", repr=False)
    # A join token that admits the agent at once (AdminService.CreateJoinToken); empty: none.
    join_token: str = field(default="", repr=False)
    drivers: tuple[str, ...] = ()
    # How its sandboxes are isolated (`sandboxes.isolation.offered`): placement reads it.
    isolation: str = ""
    # The manifest of each engine this agent runs, declared in its Hello.
    engines: tuple[EngineManifest, ...] = ()
    capacity: int = 0
    # TLS to the control plane, verified with these PEM root certificates; None: plaintext.
    root_certificates: bytes | None = None
    batch_size: int = 64
    # Bytes of outputs per OutputBatch; one larger output travels alone.
    max_batch_bytes: int = 3 * 1024 * 1024
    # The largest gRPC message the agent sends or accepts (a transcript snapshot can be large).
    max_message_bytes: int = 64 * 1024 * 1024
    window: int = 512
    # Seconds.
    connect_timeout: float = 10.0
    write_timeout: float = 30.0
    heartbeat_interval: float = 10.0  # until Welcome says otherwise
    # Between redials (reset once a stream was welcomed); also the longest pause of a refused session.
    backoff: Backoff = Backoff(initial=0.2, maximum=15.0)


@dataclass(eq=False)
class _Stream:
    """What one Connect stream knows; dropped with the stream."""

    call: grpc.aio.StreamStreamCall
    opened_at: float = field(default_factory=time.monotonic)
    out: asyncio.Queue[pb.ConnectRequest] = field(default_factory=asyncio.Queue)
    committed: dict[str, int] = field(default_factory=dict)
    sent: dict[str, int] = field(default_factory=dict)
    heartbeat_interval: float = 10.0
    # Sessions refused again and again without progress: since when, and paused until when.
    refused_since: dict[str, float] = field(default_factory=dict)
    paused_until: dict[str, float] = field(default_factory=dict)

    def unacknowledged(self) -> int:
        return sum(max(0, seq - self.committed.get(sid, 0)) for sid, seq in self.sent.items())

    def send_after(self) -> dict[str, int]:
        keys = self.sent.keys() | self.committed.keys()
        return {sid: max(self.sent.get(sid, 0), self.committed.get(sid, 0)) for sid in keys}

    # A heartbeat is due: written before anything queued (the lease must not wait behind outputs).
    heartbeat_due: bool = False
    # Set when there is something to write.
    writable: asyncio.Event = field(default_factory=asyncio.Event)
    # Live deltas, written only when nothing else waits (relay/deltas.py).
    deltas: LiveDeltas | None = None

    def send(self, message: pb.ConnectRequest) -> None:
        # Unbounded by type, bounded in practice: outputs by the window, acks by commands received.
        self.out.put_nowait(message)
        self.writable.set()

    def heartbeat(self) -> None:
        self.heartbeat_due = True
        self.writable.set()

    async def next_to_write(self) -> pb.ConnectRequest:
        """A due heartbeat (stamped now, as it goes out), else the oldest queued message."""
        while True:
            if self.heartbeat_due:
                self.heartbeat_due = False
                beat = pb.Heartbeat()
                beat.send_time.GetCurrentTime()
                return pb.ConnectRequest(heartbeat=beat)
            if not self.out.empty():
                return self.out.get_nowait()
            batch = self.deltas.take() if self.deltas is not None else None
            if batch is not None:
                return pb.ConnectRequest(deltas=batch)
            self.writable.clear()
            await self.writable.wait()


class WorkspaceSink(Protocol):
    def submit(self, request: pb.WorkspaceRequest, reply: Callable[[pb.WorkspaceReply], Awaitable[None]]) -> None: ...


# Outgoing messages queued before a workspace reply waits for the writer.
WORKSPACE_QUEUE_LIMIT = 64

# Told of every accepted Welcome, with the monotonic time just before its Hello was sent.
WelcomeListener = Callable[[pb.Welcome, float], None]


class RelayClient:
    """Keeps one Connect stream to the control plane and moves outputs, commands and acks over it."""

    def __init__(
        self,
        config: RelayConfig,
        *,
        state: AgentState,
        outbox: Outbox,
        commands: CommandSink,
        on_welcome: WelcomeListener | None = None,
        workspace: WorkspaceSink | None = None,
        deltas: LiveDeltas | None = None,
    ) -> None:
        self._config = config
        self._state = state
        self._outbox = outbox
        self._commands = commands
        self._on_welcome = on_welcome
        self._workspace = workspace
        self._deltas = deltas
        self._stream: _Stream | None = None
        self._wake = asyncio.Event()
        outbox.on_append(self._wake.set)
        self.streams_opened = 0

    async def run(self) -> None:
        """Connect, and reconnect after every failure, until cancelled."""
        failures = 0
        while True:
            welcomed_before = self.streams_opened
            try:
                await self._run_stream()
            except Exception as exc:
                keep_cancellation(exc)  # a stream failing as the relay is stopped: stop all the same
                log.warning("relay_stream_failed", target=self._config.target, error=_describe(exc))
            else:
                log.warning("relay_stream_ended", target=self._config.target)
            failures = 1 if self.streams_opened > welcomed_before else failures + 1
            await asyncio.sleep(self._config.backoff.delay(failures - 1))

    @property
    def connected(self) -> bool:
        """Whether a stream to the control plane is open (its Welcome received): the agent's health."""
        return self._stream is not None

    def stream_status(self) -> tuple[float, int] | None:
        """The open stream's age in seconds and its outputs sent but not acknowledged (the metrics)."""
        stream = self._stream
        return None if stream is None else (time.monotonic() - stream.opened_at, stream.unacknowledged())

    def _reply(self, ack: pb.CommandAck) -> None:
        stream = self._stream
        if stream is None:
            # Unacknowledged: the control plane redelivers it and it is acknowledged again.
            log.info("command_ack_deferred", command_id=ack.command_id)
            return
        stream.send(pb.ConnectRequest(command_ack=ack))

    def send_progress(self, progress: env_pb.BuildProgress) -> None:
        """A layer build's step, on the current stream; dropped when there is none (progress only)."""
        stream = self._stream
        if stream is not None:
            stream.send(pb.ConnectRequest(build_progress=progress))

    async def _workspace_reply(self, reply: pb.WorkspaceReply) -> None:
        stream = self._stream
        if stream is None:
            raise RelayError("the stream to the control plane is gone; the client's call fails")
        # Large downloads are paced by the stream's writer, not buffered without bound.
        while stream.out.qsize() > WORKSPACE_QUEUE_LIMIT:
            await asyncio.sleep(0.005)
            if self._stream is not stream:
                raise RelayError("the stream to the control plane is gone; the client's call fails")
        stream.send(pb.ConnectRequest(workspace_reply=reply))

    # -- one stream ----------------------------------------------------------

    async def _run_stream(self) -> None:
        cfg = self._config
        options = [
            ("grpc.max_send_message_length", cfg.max_message_bytes),
            ("grpc.max_receive_message_length", cfg.max_message_bytes),
        ]
        if cfg.root_certificates is None:
            channel = grpc.aio.insecure_channel(cfg.target, options=options)
        else:
            tls = grpc.ssl_channel_credentials(root_certificates=cfg.root_certificates)
            channel = grpc.aio.secure_channel(cfg.target, tls, options=options)
        async with channel:
            # The generated gRPC stub carries no annotations.
            call = pb_grpc.RunnerServiceStub(channel).Connect()  # type: ignore[no-untyped-call]
            try:
                stream = await self._handshake(call)
                self._stream = stream
                if self._deltas is not None:
                    stream.deltas = self._deltas
                    self._deltas.open(stream.writable.set)
                self._wake.set()
                async with asyncio.TaskGroup() as tasks:
                    tasks.create_task(self._receive(stream))
                    tasks.create_task(self._write(stream))
                    tasks.create_task(self._send_outputs(stream))
                    tasks.create_task(self._heartbeat(stream))
                    # Each runs until the stream fails; the body waits rather than leaving the group
                    # to its exit: on 3.11 a group cancelling its task from its exit leaves the
                    # task's cancellation count raised, and `run` would take a failure for a stop.
                    await asyncio.Event().wait()
            finally:
                self._stream = None
                if self._deltas is not None:
                    self._deltas.close()
                call.cancel()

    async def _handshake(self, call: grpc.aio.StreamStreamCall) -> _Stream:
        cfg = self._config
        hello_at = time.monotonic()
        hello = pb.Hello(
            agent_id=cfg.agent_id,
            enrollment_token=cfg.enrollment_token,
            agent_credential=cfg.credential,
            drivers=cfg.drivers,
            engines=[manifest.kind for manifest in cfg.engines],
            capacity=cfg.capacity,
            sessions=await self._held_cursors(),
            instance_id=cfg.instance_id,
            engine_manifests=[engine_manifest_proto(m) for m in cfg.engines],
            agent_version=versions.VERSION,
            join_token=cfg.join_token,
            isolation=cfg.isolation,
        )
        async with asyncio.timeout(cfg.connect_timeout):
            try:
                await call.write(pb.ConnectRequest(hello=hello))
            except asyncio.InvalidStateError:
                # The call already failed (no server, refused); its status says why.
                raise RelayError(f"{(await call.code()).name}: {await call.details()}") from None
            first = await call.read()
        if first is grpc.aio.EOF or first.WhichOneof("message") != "welcome":
            raise StreamRejected("the control plane did not answer Hello with Welcome")
        welcome = first.welcome
        previous = await self._state.lease_generation()
        if welcome.lease.generation < previous:
            log.warning("lease_generation_went_back", generation=welcome.lease.generation, previous=previous)
        await self._state.set_lease_generation(welcome.lease.generation)
        stream = _Stream(call=call)
        if welcome.heartbeat_interval_ms > 0:
            stream.heartbeat_interval = welcome.heartbeat_interval_ms / 1000
        else:
            stream.heartbeat_interval = cfg.heartbeat_interval
        stream.committed.update((cursor.session_id, cursor.output_seq) for cursor in welcome.committed)
        await self._outbox.ack_many(stream.committed)
        for cursor in welcome.committed:
            first_pending = await self._outbox.first_pending_seq(cursor.session_id)
            if first_pending is not None and first_pending > cursor.output_seq + 1:
                log.error(
                    "outbox_gap",
                    session_id=cursor.session_id,
                    committed=cursor.output_seq,
                    first_pending=first_pending,
                )
        self.streams_opened += 1
        if self._on_welcome is not None:
            self._on_welcome(welcome, hello_at)
        log.info(
            "relay_connected",
            target=cfg.target,
            lease_generation=welcome.lease.generation,
            sessions=len(welcome.committed),
        )
        return stream

    async def _held_cursors(self) -> list[pb.SessionCursor]:
        session_ids = {r.session_id for r in await self._state.sessions()}
        session_ids |= {c.session_id for c in await self._outbox.cursors()}
        return [
            pb.SessionCursor(session_id=sid, output_seq=await self._outbox.last_seq(sid)) for sid in sorted(session_ids)
        ]

    async def _receive(self, stream: _Stream) -> None:
        while True:
            # Any message is a sign of life, and the control plane answers every Heartbeat: a stream
            # silent for three heartbeat intervals (plus slack) is dead even if TCP has not noticed.
            async with asyncio.timeout(3 * stream.heartbeat_interval + 5.0):
                message = await stream.call.read()
            if message is grpc.aio.EOF:
                raise RelayError("the control plane ended the stream")
            kind = message.WhichOneof("message")
            if kind == "output_ack":
                await self._on_output_ack(stream, message.output_ack)
            elif kind == "command":
                self._commands.submit(message.command, self._reply)
            elif kind == "workspace_request":
                if self._workspace is None:
                    log.warning("workspace_request_unsupported")
                else:
                    self._workspace.submit(message.workspace_request, self._workspace_reply)
            elif kind == "heartbeat_ack":
                if message.heartbeat_ack.lease.generation:
                    await self._state.raise_lease_generation(message.heartbeat_ack.lease.generation)
            else:
                log.warning("relay_unexpected_message", kind=kind)

    async def _on_output_ack(self, stream: _Stream, ack: pb.OutputAck) -> None:
        advanced: dict[str, int] = {}
        for cursor in ack.committed:
            if cursor.output_seq > stream.committed.get(cursor.session_id, 0):
                stream.committed[cursor.session_id] = cursor.output_seq
                stream.refused_since.pop(cursor.session_id, None)
                advanced[cursor.session_id] = cursor.output_seq
        await self._outbox.ack_many(advanced)
        if ack.HasField("error"):
            sessions = [ack.error_session_id] if ack.error_session_id else list(stream.sent)
            now = time.monotonic()
            for sid in sessions:
                stream.sent[sid] = stream.committed.get(sid, 0)
                # Resend at once the first time; when refusals continue without progress, wait as
                # long as the session has been stuck (capped), so a lasting gap cannot spin.
                since = stream.refused_since.setdefault(sid, now)
                stream.paused_until[sid] = now + min(self._config.backoff.maximum, now - since)
                log.warning(
                    "output_refused",
                    session_id=sid,
                    code=ack.error.code,
                    message=ack.error.message,
                    resend_after=stream.committed.get(sid, 0),
                )
        self._wake.set()

    async def _send_outputs(self, stream: _Stream) -> None:
        cfg = self._config
        while True:
            self._wake.clear()
            now = time.monotonic()
            paused = {sid for sid, until in stream.paused_until.items() if until > now}
            in_flight = stream.unacknowledged()
            room = cfg.window - in_flight
            # While outputs are in flight, wait until a whole batch fits: sending
            # whatever each acknowledgement frees shrinks batches to one output
            # and makes every output pay a whole commit.
            if room >= cfg.batch_size or (in_flight == 0 and room > 0):
                outputs = await self._outbox.pending(
                    stream.send_after(), min(cfg.batch_size, room), skip=paused, max_bytes=cfg.max_batch_bytes
                )
                if outputs:
                    for output in outputs:
                        stream.sent[output.session_id] = output.output_seq
                    stream.send(pb.ConnectRequest(output_batch=pb.OutputBatch(outputs=outputs)))
                    continue
            # Wait for an append, an acknowledgement, or the end of a pause.
            wait = min((stream.paused_until[sid] - now for sid in paused), default=None)
            try:
                async with asyncio.timeout(wait):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def _write(self, stream: _Stream) -> None:
        while True:
            message = await stream.next_to_write()
            async with asyncio.timeout(self._config.write_timeout):
                await stream.call.write(message)

    async def _heartbeat(self, stream: _Stream) -> None:
        while True:
            await asyncio.sleep(stream.heartbeat_interval)
            stream.heartbeat()


def engine_manifest_proto(manifest: EngineManifest) -> pb.EngineManifest:
    """An engine's manifest as Hello declares it."""
    return pb.EngineManifest(
        kind=manifest.kind,
        permission_modes=list(manifest.permission_modes),
        default_permission_mode=manifest.default_permission_mode,
        supports_interactions=manifest.supports_interactions,
        supports_background_tasks=manifest.supports_background_tasks,
        supports_server_info=manifest.supports_server_info,
        tools=list(manifest.tools),
    )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"
