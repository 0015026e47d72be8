"""The relay endpoint: RunnerService.Connect, one bidirectional stream per agent.

On each stream these loops run together: the reader takes messages off the
stream as they come, noting heartbeats at once and queueing the rest in order
for the processor, which commits output batches and acknowledges them only
after the journal commit; the lease keeper renews the lease from each
heartbeat (`controlplane.leases`), so no output batch, command or client load
stands in front of it; the command pump sends queued commands in command_seq
order; and the writer owns the stream's write side. A slow database slows the
processor, its queue fills, the reader waits, and gRPC flow control then slows
the agent: nothing is dropped and nothing piles up in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import timedelta

import grpc
import structlog
from google.protobuf import timestamp_pb2

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from astrabox.runner.v1 import runner_service_pb2_grpc as runner_grpc
from controlplane.agents import AgentHello, Agents, Lease, agent_key
from controlplane.deltas import DeltaHub
from controlplane.engines import ManifestInvalid, declared_manifests
from controlplane.environments.builds import BuildProgressHub
from controlplane.errors import AgentVersionUnsupported, KernelError
from controlplane.identity.agent_admission import AgentAdmission
from controlplane.leases import LeaseKeeper, LeaseStoreUnavailable
from controlplane.live import LiveTail
from controlplane.metrics import ControlPlaneMetrics
from controlplane.outputs import OutputCommitter
from controlplane.status import rpc_status_for, to_status
from controlplane.verdicts import CommandVerdicts
from controlplane.workspace import WorkspaceRouter
from serverkit import tracing, versions
from serverkit.waits import bounded

log = structlog.get_logger(__name__)

MAX_AGENT_ID_CHARS = 128
HELLO_TIMEOUT_SECONDS = 10.0
COMMAND_POLL_SECONDS = 2.0
WRITE_QUEUE_SIZE = 256
# Messages read off a stream and not yet processed. Bounded: beyond it the reader waits and gRPC
# flow control holds the agent back.
INBOX_SIZE = 16
# The most outputs of queued batches committed in one transaction (`_AgentStream._process`).
MERGED_OUTPUTS = 1024


@dataclass(frozen=True, slots=True)
class RelaySettings:
    # Which agents may connect (their enrollment token and credential).
    admission: AgentAdmission
    heartbeat_interval: timedelta


def _lease_proto(lease: Lease) -> runner_pb2.Lease:
    expire = timestamp_pb2.Timestamp()
    expire.FromDatetime(lease.expires_at)
    return runner_pb2.Lease(generation=lease.generation, expire_time=expire)


class RunnerServicer(runner_grpc.RunnerServiceServicer):
    def __init__(
        self,
        agents: Agents,
        leases: LeaseKeeper,
        committer: OutputCommitter,
        verdicts: CommandVerdicts,
        live: LiveTail,
        settings: RelaySettings,
        router: WorkspaceRouter,
        deltas: DeltaHub | None = None,
        builds: BuildProgressHub | None = None,
        metrics: ControlPlaneMetrics | None = None,
    ) -> None:
        self._deltas = deltas or DeltaHub()
        self._builds = builds if builds is not None else BuildProgressHub()
        self._metrics = metrics or ControlPlaneMetrics()
        self._agents = agents
        self._leases = leases
        self._committer = committer
        self._verdicts = verdicts
        self._live = live
        self._settings = settings
        self._router = router

    async def Connect(
        self, request_iterator: AsyncIterator[runner_pb2.ConnectRequest], context: grpc.aio.ServicerContext
    ) -> None:
        hello = await self._read_hello(request_iterator, context)
        lease = await self._agents.register(hello)
        bound = log.bind(agent_id=hello.agent_id, generation=lease.generation)
        cursors = await self._agents.committed_cursors(hello.agent_id, hello.sessions)
        live = await self._agents.live_sessions(hello.agent_id)
        await self._agents.mark_held_runtimes(hello.agent_id, list(hello.sessions))
        await context.write(
            runner_pb2.ConnectResponse(
                welcome=runner_pb2.Welcome(
                    lease=_lease_proto(lease),
                    committed=[
                        runner_pb2.SessionCursor(session_id=s, output_seq=n) for s, n in sorted(cursors.items())
                    ],
                    heartbeat_interval_ms=int(self._settings.heartbeat_interval.total_seconds() * 1000),
                    live_sessions=runner_pb2.LiveSessions(session_ids=live),
                )
            )
        )
        bound.info("agent_connected", sessions=len(cursors), live_sessions=len(live), instance_id=hello.instance_id)
        stream = _AgentStream(
            hello.agent_id,
            lease,
            self._agents,
            self._leases,
            self._committer,
            self._verdicts,
            self._live,
            self._router,
            bound,
            self._deltas,
            self._builds,
            self._metrics,
        )
        self._metrics.relay_streams_opened.inc()
        self._metrics.agents_connected.inc()
        try:
            async with (
                self._leases.hold(hello.agent_id, lease.generation),
                self._router.attach(hello.agent_id, lease.generation, stream.send),
            ):
                await stream.run(request_iterator, context)
        finally:
            # The lease runs its course: an agent that reconnects within it
            # (a restart, a network blip) keeps its sessions' runtimes.
            self._metrics.agents_connected.dec()
            bound.info("agent_disconnected")

    async def _read_hello(
        self, request_iterator: AsyncIterator[runner_pb2.ConnectRequest], context: grpc.aio.ServicerContext
    ) -> AgentHello:
        try:
            first = await bounded(anext(request_iterator), HELLO_TIMEOUT_SECONDS)
        except (TimeoutError, StopAsyncIteration):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message on a Connect stream must be Hello")
        if first.WhichOneof("message") != "hello":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message on a Connect stream must be Hello")
        hello = first.hello
        if not hello.agent_id or len(hello.agent_id) > MAX_AGENT_ID_CHARS or not hello.agent_id.isprintable():
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"Hello.agent_id must be 1-{MAX_AGENT_ID_CHARS} printable characters"
            )
        try:
            admitted = await self._settings.admission.admit(
                hello.agent_id, hello.agent_credential, hello.enrollment_token, context.peer(), hello.join_token
            )
        except KernelError as refusal:
            await context.abort_with_status(to_status(refusal))
        # After admission: only an agent that proved itself learns which versions this control plane takes.
        if refused := versions.compatibility(hello.agent_version):
            log.warning("agent_version_refused", agent_id=hello.agent_id, agent_version=hello.agent_version[:40])
            await context.abort_with_status(to_status(AgentVersionUnsupported(refused, hello.agent_version)))
        try:
            manifests = declared_manifests(hello)
        except ManifestInvalid as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Hello.engine_manifests: {error}")
        if undeclared := sorted(set(hello.engines) - {m.kind for m in manifests}):
            log.warning("engines_without_manifest", agent_id=hello.agent_id, engines=undeclared)
        return AgentHello(
            agent_id=hello.agent_id,
            instance_id=hello.instance_id,
            drivers=list(hello.drivers),
            engines=manifests,
            capacity=hello.capacity or 1,
            sessions={c.session_id: c.output_seq for c in hello.sessions},
            version=hello.agent_version[:64],
            project_id=admitted.project_id,
            # Only the values agents say (Hello.isolation); anything else is not an isolation placement knows.
            isolation=hello.isolation if hello.isolation in ("gvisor", "container", "bubblewrap") else "",
        )


class _AgentStream:
    """The loops of one accepted Connect stream."""

    def __init__(
        self,
        agent_id: str,
        lease: Lease,
        agents: Agents,
        leases: LeaseKeeper,
        committer: OutputCommitter,
        verdicts: CommandVerdicts,
        live: LiveTail,
        router: WorkspaceRouter,
        log: structlog.BoundLogger,
        deltas: DeltaHub,
        builds: BuildProgressHub,
        metrics: ControlPlaneMetrics | None = None,
    ) -> None:
        self._builds = builds
        self._agent_id = agent_id
        self._deltas = deltas
        self._metrics = metrics or ControlPlaneMetrics()
        self._router = router
        self._lease = lease
        self._agents = agents
        self._leases = leases
        self._committer = committer
        self._verdicts = verdicts
        self._live = live
        self._log = log
        self._outgoing: asyncio.Queue[runner_pb2.ConnectResponse] = asyncio.Queue(WRITE_QUEUE_SIZE)
        self._inbox: asyncio.Queue[runner_pb2.ConnectRequest] = asyncio.Queue(INBOX_SIZE)
        # The newest heartbeat and when it was read (time.monotonic()); the Welcome counts as one.
        self._heard = asyncio.Event()
        self._heard_at = time.monotonic()
        self._heartbeat = runner_pb2.Heartbeat()
        # The reader is waiting for room in the inbox: the agent is sending, this replica is slow.
        self._held_back = False

    async def send(self, message: runner_pb2.ConnectResponse) -> None:
        await self._outgoing.put(message)

    async def run(
        self, request_iterator: AsyncIterator[runner_pb2.ConnectRequest], context: grpc.aio.ServicerContext
    ) -> None:
        tasks = [
            asyncio.create_task(self._read(request_iterator), name="relay-read"),
            asyncio.create_task(self._process(), name="relay-process"),
            asyncio.create_task(self._keep_lease(), name="relay-lease"),
            asyncio.create_task(self._pump_commands(), name="relay-commands"),
            asyncio.create_task(self._write(context), name="relay-write"),
        ]
        refusal: KernelError | None = None
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if not task.cancelled() and (error := task.exception()) is not None:
                    self._log.warning("relay_stream_failed", error=repr(error))
                    if isinstance(error, KernelError):  # e.g. a message that is no ConnectRequest
                        refusal = error
        finally:
            for task in tasks:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.gather(*tasks, return_exceptions=True)
        if refusal is not None:
            raise refusal  # the edge answers it with its status

    async def _write(self, context: grpc.aio.ServicerContext) -> None:
        while True:
            await context.write(await self._outgoing.get())

    async def _read(self, request_iterator: AsyncIterator[runner_pb2.ConnectRequest]) -> None:
        async for request in request_iterator:
            # Whatever the agent sends shows it alive: on a loaded loop its heartbeat may still be
            # queued behind outputs it sent earlier.
            self._heard_at = time.monotonic()
            kind = request.WhichOneof("message")
            if kind == "heartbeat":
                self._heartbeat = request.heartbeat
                self._heard.set()
                continue
            if kind == "deltas":
                # Live only: to this replica's watchers at once, never queued behind commits.
                self._deltas.publish(self._agent_id, request.deltas)
                continue
            if self._inbox.full():
                self._held_back = True
                try:
                    await self._inbox.put(request)
                finally:
                    self._held_back = False
            else:
                self._inbox.put_nowait(request)

    async def _process(self) -> None:
        following: runner_pb2.ConnectRequest | None = None
        while True:
            request, following = following or await self._inbox.get(), None
            kind = request.WhichOneof("message")
            if kind == "output_batch":
                # Batches that queued up while the last commit ran go in one transaction (an agent
                # that is behind sends many small ones); whatever came after them waits its turn.
                outputs = list(request.output_batch.outputs)
                while len(outputs) < MERGED_OUTPUTS and not self._inbox.empty():
                    following = self._inbox.get_nowait()
                    if following.WhichOneof("message") != "output_batch":
                        break
                    outputs.extend(following.output_batch.outputs)
                    following = None
                await self._on_outputs(outputs)
                # The watchers just handed this commit's events go first: otherwise they wait behind
                # the next batch's preparation (its span, its rows), which would not suspend till its
                # statement. Batches read meanwhile join the next commit.
                await asyncio.sleep(0)
            elif kind == "command_ack":
                ack = request.command_ack
                await self._verdicts.record(
                    self._agent_id,
                    ack.command_seq,
                    ack.error.message if ack.HasField("error") else "",
                    ack.destroy_verdict,
                )
            elif kind == "workspace_reply":
                # Waits (bounded) for a slow client: gRPC flow control then slows the agent.
                await self._router.deliver(request.workspace_reply)
            elif kind == "build_progress":
                self._builds.publish(self._agent_id, request.build_progress)
            else:
                self._log.warning("relay_unexpected_message", kind=kind)

    async def _keep_lease(self) -> None:
        """Renew the lease from each heartbeat as it is read (heartbeats read while a renewal is
        under way are answered together by the next), and from the agent's other messages when no
        heartbeat came for half a lease; end the stream when it has been silent for a whole lease,
        or a newer stream of the agent superseded it."""
        ttl = self._leases.ttl.total_seconds()
        renewed_from = self._heard_at
        while True:
            if not self._heard.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(ttl / 2):
                        await self._heard.wait()
            self._heard.clear()
            if self._held_back:
                self._heard_at = time.monotonic()  # it sends faster than this replica processes
            # Measured from the last message read, not from when this task woke: on a busy loop a
            # timeout and a heartbeat can come due together.
            silent_for = time.monotonic() - self._heard_at
            if silent_for >= ttl:
                self._log.warning("agent_silent", seconds=round(silent_for, 1))
                return
            if self._heard_at == renewed_from:
                continue
            heartbeat, heard_at = self._heartbeat, self._heard_at
            try:
                lease = await self._leases.renew(self._agent_id, self._lease.generation, heard_at)
            except LeaseStoreUnavailable as error:
                # The hold still shows the stream live; the next heartbeat tries again.
                self._log.warning("lease_not_renewed", error=str(error))
                continue
            if lease is None:
                self._log.info("agent_superseded")
                return
            self._lease, renewed_from = lease, heard_at
            ack = runner_pb2.HeartbeatAck(lease=_lease_proto(lease), heartbeat_send_time=heartbeat.send_time)
            with contextlib.suppress(asyncio.QueueFull):  # a writer that far behind tells the agent it lives
                self._outgoing.put_nowait(runner_pb2.ConnectResponse(heartbeat_ack=ack))

    async def _on_outputs(self, outputs: Sequence[runner_pb2.Output]) -> None:
        began = time.perf_counter()
        # One span per committed batch, in the trace of the turn its outputs came from.
        with tracing.joining("relay commit", (o.traceparent for o in outputs), {"astrabox.outputs": len(outputs)}):
            result = await self._committer.commit(self._agent_id, outputs)
        self._observe_commit(outputs, time.perf_counter() - began)
        committed = [runner_pb2.SessionCursor(session_id=s, output_seq=n) for s, n in sorted(result.committed.items())]
        await self._outgoing.put(runner_pb2.ConnectResponse(output_ack=runner_pb2.OutputAck(committed=committed)))
        for session_id, gap in result.refused.items():
            self._log.warning("output_gap", session_id=session_id, error=str(gap))
            await self._outgoing.put(
                runner_pb2.ConnectResponse(
                    output_ack=runner_pb2.OutputAck(
                        committed=[runner_pb2.SessionCursor(session_id=session_id, output_seq=gap.committed)],
                        error=rpc_status_for(grpc.StatusCode.OUT_OF_RANGE, str(gap)),
                        error_session_id=session_id,
                    )
                )
            )

    def _observe_commit(self, outputs: Sequence[runner_pb2.Output], seconds: float) -> None:
        self._metrics.journal_commit.observe(seconds)
        self._metrics.journal_batch.observe(len(outputs))
        now = time.time()
        for output in outputs:
            if output.HasField("produce_time"):
                self._metrics.ack_lag.observe(max(0.0, now - output.produce_time.ToNanoseconds() / 1e9))

    async def _pump_commands(self) -> None:
        sent_through = 0
        with self._live.subscribe(agent_key(self._agent_id)) as subscription:
            while True:
                queued = await self._agents.unacked(self._agent_id, sent_through)
                for item in queued:
                    command = runner_pb2.Command.FromString(item.body)
                    command.command_seq = item.command_seq
                    command.lease_generation = self._lease.generation
                    await self._outgoing.put(runner_pb2.ConnectResponse(command=command))
                    sent_through = item.command_seq
                if not queued:
                    await subscription.wait(COMMAND_POLL_SECONDS)
