"""No host reaches what it was not given (issue 27): a rogue agent holding the enrollment token
gets no session, credential or workspace request until an operator admits it, and a project that
keeps its credentials on its own hosts never has them placed on, or resolved by, a shared one.

Real control plane and PostgreSQL over gRPC; the agents are Connect streams as an agent holds
them (Hello, heartbeats), recording every message the control plane sends them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import secrets
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import grpc
import pytest
import pytest_asyncio

from astrabox.admin.v1 import admin_service_pb2 as admin_pb
from astrabox.admin.v1 import admin_service_pb2_grpc as admin_grpc
from astrabox.client import AstraBoxClient
from astrabox.environments.v1 import environment_pb2 as epb
from astrabox.errors import AstraBoxError
from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from astrabox.runner.v1 import runner_service_pb2_grpc as runner_grpc
from controlplane.credential_store.resolve import AGENT_CREDENTIAL_METADATA, AGENT_ID_METADATA
from controlplane.server import RunningControlPlane, serve
from controlplane.settings import ControlPlaneSettings
from controlplane.status import error_info
from dataplane_agent.engines.claude_code import MANIFEST
from dataplane_agent.relay.client import engine_manifest_proto
from serverkit import versions
from tests.support import auth

TOKEN = "enrol-" + "t" * 26
SECRET = "ghp_the-projects-own-secret"
BOUND = epb.EnvironmentSpec(credentials=[epb.CredentialBinding(credential="git", hosts=["git.test"])])


class Agent:
    """One agent's Connect stream: Hello, then a heartbeat every 0.1 s; every message received is
    kept in `received`, and how the stream ended in `ended`."""

    def __init__(
        self, address: str, agent_id: str, *, capacity: int = 1, token: str = TOKEN, join_token: str = ""
    ) -> None:
        self.agent_id = agent_id
        self.credential = secrets.token_urlsafe(32)
        self.received: list[runner_pb2.ConnectResponse] = []
        self.ended: tuple[grpc.StatusCode, str] | None = None
        self._address = address
        self._capacity = capacity
        self._token = token
        self._join_token = join_token
        self._task: asyncio.Task[None] | None = None
        self._welcomed = asyncio.Event()
        self._done = asyncio.Event()

    async def connect(self) -> bool:
        """Dial once; True when welcomed, False when refused (`ended` says why)."""
        self._welcomed.clear()
        self._done.clear()
        self._task = asyncio.create_task(self._run())
        waiting = [asyncio.create_task(self._welcomed.wait()), asyncio.create_task(self._done.wait())]
        async with asyncio.timeout(30):
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        for task in waiting:
            task.cancel()
        return self._welcomed.is_set()

    async def _run(self) -> None:
        hello = runner_pb2.Hello(
            agent_id=self.agent_id,
            agent_credential=self.credential,
            enrollment_token=self._token,
            join_token=self._join_token,
            instance_id=secrets.token_hex(4),
            drivers=["local"],
            engines=[MANIFEST.kind],
            engine_manifests=[engine_manifest_proto(MANIFEST)],
            capacity=self._capacity,
            agent_version=versions.VERSION,
        )

        replies: asyncio.Queue[runner_pb2.ConnectRequest] = asyncio.Queue()

        async def requests() -> AsyncIterator[runner_pb2.ConnectRequest]:
            yield runner_pb2.ConnectRequest(hello=hello)
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.1):
                        yield await replies.get()
                        continue
                yield runner_pb2.ConnectRequest(heartbeat=runner_pb2.Heartbeat())

        try:
            async with grpc.aio.insecure_channel(self._address) as channel:
                async for message in runner_grpc.RunnerServiceStub(channel).Connect(requests()):
                    self.received.append(message)
                    if message.WhichOneof("message") == "welcome":
                        self._welcomed.set()
                    elif message.WhichOneof("message") == "command":
                        for reply in _applied(message.command):
                            replies.put_nowait(reply)
        except grpc.aio.AioRpcError as error:
            info = error_info(error)
            self.ended = (error.code(), info.reason if info else "")
        finally:
            self._done.set()

    def work(self) -> list[str]:
        """What it was given: every message but Welcome and heartbeat answers, by kind."""
        kinds = [m.WhichOneof("message") for m in self.received]
        return [k for k in kinds if k not in ("welcome", "heartbeat_ack")]  # type: ignore[misc]

    def started(self) -> set[str]:
        return {m.command.session_id for m in self.received if m.WhichOneof("message") == "command"}

    async def resolve(self, session_id: str) -> runner_pb2.ResolveCredentialsResponse:
        async with grpc.aio.insecure_channel(self._address) as channel:
            return await runner_grpc.RunnerServiceStub(channel).ResolveCredentials(
                runner_pb2.ResolveCredentialsRequest(session_id=session_id),
                metadata=((AGENT_ID_METADATA, self.agent_id), (AGENT_CREDENTIAL_METADATA, self.credential)),
            )

    async def refused_resolving(self, session_id: str) -> tuple[grpc.StatusCode, str]:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await self.resolve(session_id)
        assert SECRET not in str(refused.value)
        info = error_info(refused.value)
        return refused.value.code(), info.reason if info else ""

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def _applied(command: runner_pb2.Command) -> list[runner_pb2.ConnectRequest]:
    """What an agent answers a command with: its acknowledgement, and for a start its runtime up."""
    ack = runner_pb2.ConnectRequest(
        command_ack=runner_pb2.CommandAck(command_seq=command.command_seq, command_id=command.command_id)
    )
    if command.WhichOneof("body") != "start_runtime":
        return [ack]
    started = runner_pb2.Output(
        session_id=command.session_id,
        output_seq=1,
        runtime_started=runner_pb2.RuntimeStarted(sandbox_id="sb", driver="local", workspace="/workspace"),
    )
    return [runner_pb2.ConnectRequest(output_batch=runner_pb2.OutputBatch(outputs=[started])), ack]


@pytest_asyncio.fixture
async def running(database_url: str, bootstrap_key_file: str) -> AsyncIterator[RunningControlPlane]:
    settings = ControlPlaneSettings(
        database_url=database_url,
        listen="127.0.0.1:0",
        bootstrap_key_file=bootstrap_key_file,
        enrollment_token=TOKEN,
        lease_ttl=timedelta(minutes=5),
        credential_key=base64.b64encode(b"K" * 32).decode(),
        credentials_ttl=timedelta(0),
    )
    async with serve(settings) as control_plane:
        yield control_plane


@contextlib.asynccontextmanager
async def agents(*made: Agent) -> AsyncIterator[None]:
    try:
        yield
    finally:
        for agent in made:
            await agent.close()


async def placed_on(running: RunningControlPlane, session_id: str) -> str:
    found: str = await running.pool.fetchval(
        "SELECT agent_id FROM sessions WHERE session_id = $1", uuid.UUID(session_id)
    )
    return found


async def test_a_rogue_agent_with_the_enrollment_token_gets_nothing_until_it_is_admitted(
    running: RunningControlPlane,
) -> None:
    async with AstraBoxClient.connect(running.address) as operator:
        await operator.credentials.put("git", SECRET)
        await operator.environments.create("bound", BOUND)
        joining = await operator.admin.create_join_token()
        real = Agent(running.address, "real-agent", capacity=2, token="", join_token=joining.token)
        rogue = Agent(running.address, "rogue-agent", capacity=8)
        async with agents(real, rogue):
            assert await real.connect()
            # The rogue connects while the real agent is idle, with more room than it: refused.
            assert not await rogue.connect()
            assert rogue.ended == (grpc.StatusCode.PERMISSION_DENIED, "AGENT_PENDING_ADMISSION")
            first = await operator.create_session(environment="bound")
            second = await operator.create_session()
            for session in (first, second):
                assert await placed_on(running, session.session_id) == "real-agent"
                # No credential: not even for a session it names, nor one it could guess.
                assert await rogue.refused_resolving(session.session_id) == (
                    grpc.StatusCode.PERMISSION_DENIED,
                    "AGENT_PENDING_ADMISSION",
                )
            [bound] = (await real.resolve(first.session_id)).credentials
            assert bound.secret == SECRET
            # No workspace request reaches it: a listing goes to the session's own agent.
            await operator.wait_for_state(first.session_id, ["READY"], timeout=30)
            listing = asyncio.create_task(operator.list_workspace(first.session_id, ""))
            async with asyncio.timeout(30):
                while "workspace_request" not in real.work():
                    await asyncio.sleep(0.05)
            listing.cancel()
            assert rogue.work() == [] and rogue.received == []
            assert await running.pool.fetchval("SELECT count(*) FROM agents WHERE agent_id = 'rogue-agent'") == 0

            # Admitted, it gets work: the real agent is full, the next session goes to it.
            await operator.admin.admit_agent("rogue-agent")
            assert await rogue.connect()
            third = await operator.create_session()
            assert await placed_on(running, third.session_id) == "rogue-agent"
            async with asyncio.timeout(30):
                while third.session_id not in rogue.started():
                    await asyncio.sleep(0.05)
            assert rogue.started() == {third.session_id}
            assert first.session_id in real.started() and second.session_id in real.started()


async def test_a_project_that_keeps_credentials_on_its_own_hosts_never_falls_back_to_the_shared_pool(
    running: RunningControlPlane,
) -> None:
    async with AstraBoxClient.connect(running.address) as operator:
        project = await operator.admin.create_project("secure")
        key = await operator.admin.create_api_key("dev", role="admin", project_id=project.project_id)
        shared_token = await operator.admin.create_join_token()
        own_token = await operator.admin.create_join_token(project_id=project.project_id)
    shared = Agent(running.address, "shared-agent", capacity=10, join_token=shared_token.token)
    own = Agent(running.address, "own-agent", capacity=1, join_token=own_token.token)
    async with agents(shared, own), AstraBoxClient.connect(running.address, api_key=key.secret) as secure:
        assert await shared.connect() and await own.connect()
        await secure.credentials.put("git", SECRET)
        await secure.environments.create("bound", BOUND)
        # Before the policy: a credential session may go to the shared pool once its own host is full.
        on_own = await secure.create_session(environment="bound")
        before = await secure.create_session(environment="bound")
        assert await placed_on(running, on_own.session_id) == "own-agent"
        assert await placed_on(running, before.session_id) == "shared-agent"
        assert (await shared.resolve(before.session_id)).credentials[0].secret == SECRET

        changed = await secure.admin.set_credential_hosts("dedicated")
        assert changed.credential_hosts == admin_pb.CREDENTIAL_HOSTS_DEDICATED
        # The shared host it was placed on before is no longer given its credentials.
        assert await shared.refused_resolving(before.session_id) == (
            grpc.StatusCode.PERMISSION_DENIED,
            "CREDENTIALS_HOST_NOT_DEDICATED",
        )
        # Its own host full: a session binding credentials is refused, saying why; the shared pool
        # (with room) is never tried.
        sessions_before = await running.pool.fetchval("SELECT count(*) FROM sessions")
        with pytest.raises(AstraBoxError) as refused:
            await secure.create_session(environment="bound")
        assert refused.value.code is grpc.StatusCode.FAILED_PRECONDITION
        assert refused.value.reason == "DEDICATED_HOSTS_UNAVAILABLE"
        assert "dedicated hosts" in str(refused.value) and "astrabox hosts dedicate" in str(refused.value)
        assert await running.pool.fetchval("SELECT count(*) FROM sessions") == sessions_before
        # A session that binds none still may use the shared pool.
        plain = await secure.create_session()
        assert await placed_on(running, plain.session_id) == "shared-agent"
        # Its own host's session still gets its credentials there.
        assert (await own.resolve(on_own.session_id)).credentials[0].secret == SECRET
        # An unspecified value is refused.
        async with auth.channel(running.address, key.secret) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as bad:
                await admin_grpc.AdminServiceStub(channel).SetCredentialHosts(admin_pb.SetCredentialHostsRequest())
        assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        # Its own host gone, the next message of its credential session fails its turn, saying why,
        # rather than moving it to the shared pool.
        await secure.wait_for_state(on_own.session_id, ["READY"], timeout=30)
        async with AstraBoxClient.connect(running.address) as operator:
            await operator.admin.revoke_agent("own-agent")
        await own.close()
        async with asyncio.timeout(60):
            while await running.pool.fetchval(
                "SELECT runtime_available FROM sessions WHERE session_id = $1", uuid.UUID(on_own.session_id)
            ):
                await asyncio.sleep(0.1)
        await secure.send_message(on_own.session_id, "still here?")
        async with asyncio.timeout(30):
            while not (
                failed := [e for e in (await secure.list_events(on_own.session_id)).events if e.turn_failed.reason]
            ):
                await asyncio.sleep(0.1)
        assert "dedicated hosts" in failed[0].turn_failed.reason
        assert await placed_on(running, on_own.session_id) == "own-agent"
        assert on_own.session_id not in shared.started()
    assert shared.work().count("command") >= 2 and own.work().count("command") == 1
