"""Workspace requests across control-plane replicas.

An agent's Connect stream lands on one replica, a client's workspace call on
any. The replica that attaches a stream records its advertise address on the
agent's row; another replica forwards the call there over
RunnerService.ForwardWorkspace (`ReplicaLinks`, the client side), and that
replica serves it from its own agent streams only (`ForwardingServicer`), so a
forwarded call is never forwarded again.

Agents reach RunnerService too, so ForwardWorkspace demands the cluster secret
that only replicas read from PostgreSQL: an agent cannot use it to reach
another agent's sandbox. The secret never goes into logs or error messages.
"""

from __future__ import annotations

import asyncio
import hmac
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable

import asyncpg
import grpc
import structlog
from google.rpc import error_details_pb2

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from astrabox.runner.v1 import runner_service_pb2_grpc as runner_grpc
from controlplane import store
from controlplane.errors import AgentNotConnected, KernelError, SessionNotFound, WorkspaceFailed
from controlplane.identity import callers
from controlplane.settings import MAX_GRPC_MESSAGE_BYTES
from controlplane.status import error_info, to_status
from controlplane.workspace import WorkspaceRouter, WorkspaceTimeouts, drain
from serverkit.waits import beside, stop

log = structlog.get_logger(__name__)

SECRET_METADATA = "astrabox-cluster-secret"
# The caller a forwarded call is made for: its project (checked again where the call lands) and who.
PROJECT_METADATA = "astrabox-project-id"
CALLER_METADATA = "astrabox-caller"
# The far replica gives up on a silent agent after its reply timeout (replicas share their
# settings); a replica silent for this much longer is gone (a host that vanished sends no reset).
_SILENCE_BEYOND_REPLY_S = 30.0
# Archive chunks and command output come in messages of up to a few MiB.
# What a call ended by the connection (not by the far replica's code) reports.
_CONNECTION_LOST = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
# grpc_tools generates the stub without annotations: its type as used here.
_runner_stub: Callable[[grpc.aio.Channel], runner_grpc.RunnerServiceStub] = runner_grpc.RunnerServiceStub


async def read_cluster_secret(pool: asyncpg.Pool) -> str:
    """The secret every replica of this database shares (made by migration 0003)."""
    secret = await store.cluster_secret.read(pool)
    if not secret:
        raise RuntimeError("the database has no cluster secret; are its migrations applied?")
    return secret


class ReplicaLinks:
    """Records which replica holds an agent's stream and forwards requests there.

    Implements `controlplane.workspace.Replicas`; one channel per replica address."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        own_address: str,
        secret: str,
        credentials: grpc.ChannelCredentials | None = None,
        *,
        connect_timeout: float = 5.0,
        timeouts: WorkspaceTimeouts | None = None,
    ) -> None:
        self._pool = pool
        # How long a replica may take to accept a connection before the agent counts as unreachable.
        self._connect_timeout = connect_timeout
        self._silence = (timeouts or WorkspaceTimeouts()).reply + _SILENCE_BEYOND_REPLY_S
        # TLS to the other replicas when this one serves TLS; None: plaintext.
        self._credentials = credentials
        self._own_address = own_address
        self._metadata = ((SECRET_METADATA, secret),)
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def record(self, agent_id: str, generation: int) -> None:
        # Only the newest stream's replica: an older stream attaching late must not win.
        await store.agents.record_replica(self._pool, agent_id, generation, self._own_address)

    async def forward(
        self, agent_id: str, session_id: str, requests: AsyncIterator[runner_pb2.WorkspaceRequest]
    ) -> AsyncGenerator[runner_pb2.WorkspaceReply, None]:
        address = await store.agents.replica_address(self._pool, agent_id)
        if not address or address == self._own_address:
            raise AgentNotConnected(
                f"the agent {agent_id} running session {session_id} is not connected to the control plane; retry",
                {"agent_id": agent_id},
            )
        channel = await self._ready_channel(address, agent_id)
        caller = callers.current()
        metadata = (*self._metadata, (PROJECT_METADATA, str(caller.project_id)), (CALLER_METADATA, caller.who))
        call = _runner_stub(channel).ForwardWorkspace(metadata=metadata)
        # Requests go on while replies come back, as in `WorkspaceRouter.exchange_here`.
        sending = asyncio.create_task(_send(call, agent_id, session_id, requests, self._silence))
        try:
            while True:
                response = await beside(call.read(), sending, self._silence)
                if response is grpc.aio.EOF:
                    return
                yield response.reply
                if response.reply.last:
                    return
        except TimeoutError:
            raise _unreachable(agent_id, address) from None
        except grpc.aio.AioRpcError as error:
            info = error_info(error)
            if info is None and error.code() in _CONNECTION_LOST:
                await self._forget(address)  # a new channel next time, not gRPC's reconnect backoff
            raise _failure(error, info, agent_id, address) from error
        finally:
            await stop(sending)
            # A no-op once the call ended; otherwise (the caller went away, an upload
            # failed midway) the far replica cancels the request on the agent.
            call.cancel()

    async def close(self) -> None:
        for address in list(self._channels):
            await self._forget(address)

    async def _ready_channel(self, address: str, agent_id: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            options = [
                ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_BYTES),
            ]
            if self._credentials is None:
                channel = grpc.aio.insecure_channel(address, options=options)
            else:
                channel = grpc.aio.secure_channel(address, self._credentials, options=options)
            self._channels[address] = channel
        try:
            async with asyncio.timeout(self._connect_timeout):
                state = channel.get_state(try_to_connect=True)
                while state is not grpc.ChannelConnectivity.READY:
                    # A fresh channel fails fast; a failed one would wait out gRPC's reconnect backoff.
                    if state in (grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.SHUTDOWN):
                        raise ConnectionError
                    await channel.wait_for_state_change(state)
                    state = channel.get_state(try_to_connect=True)
        except (TimeoutError, ConnectionError):
            await self._forget(address)
            raise _unreachable(agent_id, address) from None
        return channel

    async def _forget(self, address: str) -> None:
        channel = self._channels.pop(address, None)
        if channel is not None:
            await channel.close()


async def _send(
    call: grpc.aio.StreamStreamCall,
    agent_id: str,
    session_id: str,
    requests: AsyncIterator[runner_pb2.WorkspaceRequest],
    silence: float,
) -> None:
    try:
        async for request in requests:
            async with asyncio.timeout(silence):
                await call.write(
                    runner_pb2.ForwardWorkspaceRequest(agent_id=agent_id, session_id=session_id, request=request)
                )
        await call.done_writing()
    except asyncio.InvalidStateError:
        pass  # the far replica already ended the call; reading it raises why


def _unreachable(agent_id: str, address: str) -> AgentNotConnected:
    log.info("replica_unreachable", agent_id=agent_id, replica=address)
    return AgentNotConnected(
        f"the control plane replica at {address} holding agent {agent_id} cannot be reached; retry",
        {"agent_id": agent_id},
    )


def _failure(
    error: grpc.aio.AioRpcError, info: error_details_pb2.ErrorInfo | None, agent_id: str, address: str
) -> KernelError:
    """The far replica's error as the domain error it was there: same code, reason and metadata."""
    if info is None:
        if error.code() in _CONNECTION_LOST:
            return _unreachable(agent_id, address)
        log.warning("replica_refused_forward", agent_id=agent_id, replica=address, code=error.code().name)
        return WorkspaceFailed(grpc.StatusCode.INTERNAL, "INTERNAL", f"the replica at {address} refused the request")
    if info.reason == AgentNotConnected.reason:
        return AgentNotConnected(error.details() or "", dict(info.metadata))
    failed = WorkspaceFailed(error.code(), info.reason, error.details() or "")
    failed.metadata = dict(info.metadata)
    return failed


class ForwardingServicer:
    """RunnerService.ForwardWorkspace: another replica's workspace request for an
    agent attached here, served through this replica's own streams only."""

    def __init__(self, router: WorkspaceRouter, secret: str, pool: asyncpg.Pool) -> None:
        self._router = router
        self._secret = secret.encode()
        self._pool = pool

    async def ForwardWorkspace(
        self, request_iterator: AsyncIterator[runner_pb2.ForwardWorkspaceRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[runner_pb2.ForwardWorkspaceResponse]:
        if not self._from_a_replica(context):
            log.warning("forward_refused", peer=context.peer())
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "ForwardWorkspace is for control plane replicas")
        first = await anext(request_iterator, None)
        if first is None or not first.agent_id or not first.session_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message names the agent and the session")
            return  # not reached: abort raises

        async def requests() -> AsyncIterator[runner_pb2.WorkspaceRequest]:
            yield first.request
            async for message in request_iterator:
                yield message.request

        try:
            await self._for_its_project(context, first.session_id)
            async for reply in self._router.exchange_here(first.agent_id, first.session_id, requests()):
                yield runner_pb2.ForwardWorkspaceResponse(reply=reply)
        except KernelError as error:
            await drain(request_iterator)
            await context.abort_with_status(to_status(error))

    async def _for_its_project(self, context: grpc.aio.ServicerContext, session_id: str) -> None:
        """The replica that took the call checked its caller; this one checks again that the session is
        the caller's project's (SessionNotFound otherwise, as there)."""
        metadata = dict(context.invocation_metadata() or ())
        try:
            project = uuid.UUID(str(metadata.get(PROJECT_METADATA, "")))
            session = uuid.UUID(session_id)
        except ValueError:
            raise SessionNotFound(session_id[:64]) from None
        if await store.sessions.project_of(self._pool, session) != project:
            log.warning("forward_for_another_project", session_id=str(session), caller=metadata.get(CALLER_METADATA))
            raise SessionNotFound(str(session))

    def _from_a_replica(self, context: grpc.aio.ServicerContext) -> bool:
        for key, value in context.invocation_metadata() or ():
            if key == SECRET_METADATA:
                given = value.encode() if isinstance(value, str) else value
                return hmac.compare_digest(given, self._secret)
        return False
