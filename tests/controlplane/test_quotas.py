"""Quotas per project: each one, exceeded, answers RESOURCE_EXHAUSTED QUOTA_EXCEEDED and loses
nothing; the rate limit and the command limit say when to retry; another project is unaffected;
only an operator admin sets them; and they hold across two replicas on one database."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from google.rpc import error_details_pb2, status_pb2

from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as pb
from controlplane import quotas, store
from controlplane.api import SessionKernelServicer
from controlplane.conversation import Answer, SendMessage
from controlplane.errors import QuotaExceeded
from controlplane.kernel import CreateSession
from controlplane.quotas import Quotas
from controlplane.server import RunningControlPlane, serve
from controlplane.settings import ControlPlaneSettings
from controlplane.status import to_status
from controlplane.workspace import WorkspaceFiles, WorkspaceRouter, WorkspaceTimeouts
from tests.controlplane.test_authorization import counts


def settings(database_url: str, bootstrap_key_file: str) -> ControlPlaneSettings:
    return ControlPlaneSettings(
        database_url=database_url,
        listen="127.0.0.1:0",
        bootstrap_key_file=bootstrap_key_file,
        lease_ttl=timedelta(minutes=10),
        idle_stop_after=timedelta(0),
    )


@pytest_asyncio.fixture
async def running(plane, database_url: str, bootstrap_key_file: str) -> AsyncIterator[RunningControlPlane]:
    """A control plane on the `plane`'s database, with an agent on record (not attached)."""
    await plane.connect_agent(capacity=1000)
    async with serve(settings(database_url, bootstrap_key_file)) as control_plane:
        yield control_plane


async def team(address: str, name: str = "team", **limits: int) -> tuple[str, str, str]:
    """A new project with `limits` set by the operator: (project id, developer key, admin key)."""
    async with AstraBoxClient.connect(address) as operator:
        project = await operator.admin.create_project(name)
        await operator.admin.set_quotas(project.project_id, **limits)
        developer = await operator.admin.create_api_key("dev", role="developer", project_id=project.project_id)
        admin = await operator.admin.create_api_key("admin", role="admin", project_id=project.project_id)
    return project.project_id, developer.secret, admin.secret


async def refused(call) -> AstraBoxError:
    with pytest.raises(AstraBoxError) as error:
        await call
    assert (error.value.code, error.value.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED")
    return error.value


async def test_live_sessions_over_the_quota_are_refused_and_a_retry_still_answers(plane, running) -> None:
    _, developer, _ = await team(running.address, live_sessions=2)
    async with AstraBoxClient.connect(running.address, api_key=developer) as client:
        first = await client.create_session(request_id="one")
        await client.create_session(request_id="two")
        before = await counts(running.pool)
        error = await refused(client.create_session(request_id="three"))
        assert error.metadata == {"quota": "live_sessions", "limit": "2", "used": "2"}
        assert error.retry_delay is None  # waiting does not help: archiving one does
        assert await counts(running.pool) == before  # no session, event or agent command half-made
        # A retry of a create that succeeded answers its session, over the quota or not.
        assert (await client.create_session(request_id="one")).session_id == first.session_id
        # The operator's project is not limited by another project's quota.
        async with AstraBoxClient.connect(running.address) as operator:
            for i in range(3):
                await operator.create_session(request_id=f"default-{i}")
        await client.archive_session(first.session_id)
        assert (await client.create_session(request_id="three")).session_id
        usage = (await client.admin.get_quotas()).usage
        assert usage.live_sessions == 2 and usage.sessions_per_minute == 3


async def test_the_rate_limit_says_when_to_retry(plane, running) -> None:
    _, developer, _ = await team(running.address, sessions_per_minute=2)
    async with AstraBoxClient.connect(running.address, api_key=developer) as client:
        first = await client.create_session(request_id="one")
        await client.create_session(request_id="two")
        await client.delete_session(first.session_id)  # a deleted session still counts in the minute
        before = await counts(running.pool)
        error = await refused(client.create_session(request_id="three"))
        assert error.metadata["quota"] == "sessions_per_minute" and error.metadata["used"] == "2"
        assert error.retry_delay is not None and timedelta(seconds=50) < error.retry_delay <= timedelta(seconds=60)
        assert await counts(running.pool) == before
    # Once the oldest leaves the window, a create passes (the clock moved by a minute).
    await running.pool.execute("UPDATE sessions SET created_at = created_at - interval '61 seconds'")
    async with AstraBoxClient.connect(running.address, api_key=developer) as client:
        assert (await client.create_session(request_id="three")).session_id


async def test_a_message_over_the_quota_is_refused_and_the_earlier_ones_stay(plane, running) -> None:
    _, developer, _ = await team(running.address, message_bytes=16)
    async with AstraBoxClient.connect(running.address, api_key=developer) as client:
        session = await client.create_session(request_id="talk")
        await plane.runtime_started(session.session_id)
        accepted = await client.send_message(session.session_id, "é" * 8, client_message_id="m1")  # 16 bytes
        before = await counts(running.pool)
        error = await refused(client.send_message(session.session_id, "é" * 8 + "!", client_message_id="m2"))
        assert error.metadata == {"quota": "message_bytes", "limit": "16", "used": "17"}
        assert await counts(running.pool) == before
        # The accepted message, retried, is still the same turn.
        again = await client.send_message(session.session_id, "é" * 8, client_message_id="m1")
        assert again.turn_id == accepted.turn_id
        kinds = [e.WhichOneof("payload") for e in (await client.list_events(session.session_id)).events]
        assert kinds.count("user_message_accepted") == 1


async def test_only_an_operator_admin_sets_quotas_and_a_project_reads_its_own(plane, running) -> None:
    project_id, developer, admin = await team(running.address, live_sessions=5)
    async with AstraBoxClient.connect(running.address, api_key=admin) as client:
        with pytest.raises(AstraBoxError) as denied:
            await client.admin.set_quotas(live_sessions=1000)
        assert (denied.value.code, denied.value.reason) == (grpc.StatusCode.PERMISSION_DENIED, "ROLE_INSUFFICIENT")
    async with AstraBoxClient.connect(running.address, api_key=developer) as client:
        own = await client.admin.get_quotas()
        assert own.project_id == project_id
        assert own.configured.live_sessions == 5 and not own.configured.HasField("sessions_per_minute")
        assert (own.effective.live_sessions, own.effective.sessions_per_minute) == (5, 60)
        assert own.effective.message_bytes == 256 * 1024 and own.effective.concurrent_commands == 16
        with pytest.raises(AstraBoxError) as hidden:
            await client.admin.get_quotas(str(uuid.uuid4()))
        assert hidden.value.reason == "PROJECT_NOT_FOUND"
    async with AstraBoxClient.connect(running.address) as operator:
        with pytest.raises(AstraBoxError) as bound:
            await operator.admin.set_quotas(project_id, message_bytes=256 * 1024 + 1)
        assert bound.value.reason == "INVALID_ARGUMENT"
        reset = await operator.admin.set_quotas(project_id, concurrent_commands=0)
        assert not reset.configured.HasField("live_sessions") and reset.effective.live_sessions == 100
        assert reset.effective.concurrent_commands == 0
        records = (await operator.admin.list_audit_records()).records
        assert [r.code for r in records if r.method == "SetQuotas"][:1] == ["OK"]


async def test_two_replicas_racing_never_pass_the_live_sessions_quota(
    plane, database_url: str, bootstrap_key_file: str
) -> None:
    await plane.connect_agent(capacity=1000)
    async with (
        serve(settings(database_url, bootstrap_key_file)) as a,
        serve(settings(database_url, bootstrap_key_file)) as b,
    ):
        project_id, developer, _ = await team(a.address, live_sessions=3)
        async with (
            AstraBoxClient.connect(a.address, api_key=developer) as on_a,
            AstraBoxClient.connect(b.address, api_key=developer) as on_b,
        ):
            outcomes = await asyncio.gather(
                *((on_a if i % 2 else on_b).create_session(request_id=f"race-{i}") for i in range(12)),
                return_exceptions=True,
            )
        made = [o for o in outcomes if not isinstance(o, BaseException)]
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(made) == 3
        assert all(isinstance(f, AstraBoxError) and f.reason == "QUOTA_EXCEEDED" for f in failed), failed
        assert await store.sessions.count_live(a.pool, uuid.UUID(project_id)) == 3


class FakeAgent:
    """An agent's stream as the router sees it: an upload is answered once its last chunk came; a
    command runs until it is cancelled."""

    def __init__(self, router: WorkspaceRouter) -> None:
        self.router = router
        self.requests: list[runner_pb2.WorkspaceRequest] = []
        self.commands = 0
        self.started = asyncio.Event()

    async def send(self, response: runner_pb2.ConnectResponse) -> None:
        request = response.workspace_request
        self.requests.append(request)
        op = request.WhichOneof("op")
        if op == "write_archive" and request.write_archive.last:
            size = sum(len(r.write_archive.chunk) for r in self.requests if r.request_id == request.request_id)
            written = runner_pb2.ArchiveWritten(entries=1, bytes=size)
            await self.router.deliver(
                runner_pb2.WorkspaceReply(request_id=request.request_id, last=True, written=written)
            )
        elif op == "exec_command":
            self.commands += 1
            self.started.set()


class Aborted(Exception):
    pass


class Context:
    status: grpc.Status | None = None

    async def abort_with_status(self, status: grpc.Status) -> None:
        self.status = status
        raise Aborted


@contextlib.asynccontextmanager
async def attached(
    plane, timeouts: WorkspaceTimeouts | None = None
) -> AsyncIterator[tuple[SessionKernelServicer, FakeAgent, str]]:
    await plane.connect_agent()
    session = await plane.kernel.create_session(
        CreateSession(request_id=f"ws-{uuid.uuid4()}", project_id=plane.project_id)
    )
    await plane.runtime_started(session.session_id)
    router = WorkspaceRouter(timeouts=timeouts or WorkspaceTimeouts())
    agent = FakeAgent(router)
    servicer = SessionKernelServicer(
        plane.kernel, plane.conversation, WorkspaceFiles(plane.kernel, router, Quotas(plane.pool))
    )
    async with router.attach("agent-1", 1, agent.send):
        yield servicer, agent, session.session_id


def retry_delay(error: QuotaExceeded) -> timedelta | None:
    """The RetryInfo delay of the status `error` maps to."""
    status = to_status(error)
    assert status.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    [details] = [value for key, value in status.trailing_metadata if key == "grpc-status-details-bin"]
    for detail in status_pb2.Status.FromString(details).details:
        retry = error_details_pb2.RetryInfo()
        if detail.Unpack(retry):
            return retry.retry_delay.ToTimedelta()
    return None


def quota_of(context: Context) -> str:
    assert context.status is not None and context.status.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    return context.status.details


async def test_an_upload_over_the_quota_stops_before_the_agent_gets_the_excess(plane) -> None:
    await quotas.put(plane.pool, plane.project_id, {"upload_bytes": 1000}, "test")
    async with attached(plane) as (servicer, agent, session_id):

        async def upload(sizes: list[int]) -> AsyncIterator[pb.UploadWorkspaceArchiveRequest]:
            yield pb.UploadWorkspaceArchiveRequest(session_id=session_id, path="in", chunk=b"x" * sizes[0])
            for size in sizes[1:]:
                yield pb.UploadWorkspaceArchiveRequest(chunk=b"y" * size)

        written = await servicer.UploadWorkspaceArchive(upload([500, 500]), Context())  # type: ignore[arg-type]
        assert written.bytes == 1000
        agent.requests.clear()
        context = Context()
        with pytest.raises(Aborted):
            await servicer.UploadWorkspaceArchive(upload([600, 300, 200, 100]), context)  # type: ignore[arg-type]
        assert "quota of 1000 bytes" in quota_of(context)
        sent = [r for r in agent.requests if r.WhichOneof("op") == "write_archive"]
        assert sum(len(r.write_archive.chunk) for r in sent) == 900 and not any(r.write_archive.last for r in sent)
        assert agent.requests[-1].WhichOneof("op") == "cancel"  # the agent drops what it spooled


async def run(servicer: SessionKernelServicer, session_id: str, context: Context) -> list[pb.RunCommandResponse]:
    return [
        r async for r in servicer.RunCommand(pb.RunCommandRequest(session_id=session_id, command="sleep 9"), context)
    ]  # type: ignore[arg-type]


async def test_commands_over_the_quota_wait_for_one_to_end_on_any_replica(plane) -> None:
    await quotas.put(plane.pool, plane.project_id, {"concurrent_commands": 1}, "test")
    async with attached(plane) as (servicer, agent, session_id):
        first = asyncio.create_task(run(servicer, session_id, Context()))
        await asyncio.wait_for(agent.started.wait(), 10)
        context = Context()
        with pytest.raises(Aborted):
            await run(servicer, session_id, context)
        assert "runs 1 commands, its quota is 1" in quota_of(context)
        assert agent.commands == 1  # the refused one never reached the agent
        # Another replica (its own Quotas on the same database) counts the same lease.
        with pytest.raises(QuotaExceeded) as elsewhere:
            async with Quotas(plane.pool).running_command(plane.project_id, session_id):
                pass
        assert retry_delay(elsewhere.value) == quotas.COMMAND_RETRY_AFTER
        # The client goes away: its command's lease is released, and the next one runs.
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first
        assert await store.command_leases.count_held(plane.pool, plane.project_id) == 0
        agent.started.clear()
        second = asyncio.create_task(run(servicer, session_id, Context()))
        await asyncio.wait_for(agent.started.wait(), 10)
        assert agent.commands == 2
        second.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await second


async def test_a_lease_nobody_renews_lapses(plane) -> None:
    """A replica that dies holding a command's lease stops renewing it; it lapses after the TTL."""
    await plane.connect_agent()
    session = await plane.kernel.create_session(CreateSession(request_id="lapse", project_id=plane.project_id))
    await quotas.put(plane.pool, plane.project_id, {"concurrent_commands": 1}, "test")
    async with plane.pool.acquire() as conn:
        await store.command_leases.insert(
            conn, uuid.uuid4(), plane.project_id, session.session_id, timedelta(seconds=1)
        )
    with pytest.raises(QuotaExceeded):
        async with Quotas(plane.pool).running_command(plane.project_id, session.session_id):
            pass
    await asyncio.sleep(1.2)
    async with Quotas(plane.pool).running_command(plane.project_id, session.session_id):
        assert await store.command_leases.count_held(plane.pool, plane.project_id) == 1
    assert await store.command_leases.count_held(plane.pool, plane.project_id) == 0


async def astrabox(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("astrabox")),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_the_cli_sets_one_quota_and_keeps_the_others(plane, running) -> None:
    project_id, _, _ = await team(running.address, live_sessions=7)
    target = ("--target", running.address)
    code, out, err = await astrabox("quotas", *target, "set", "--project", project_id, "--concurrent-commands", "3")
    assert code == 0, err
    code, out, err = await astrabox("quotas", *target, "show", "--project", project_id)
    assert code == 0, err
    lines = {line.split()[0]: line.split()[1:] for line in out.splitlines()[2:]}
    assert lines["live_sessions"] == ["7", "7", "0"] and lines["concurrent_commands"] == ["3", "3", "0"]
    assert lines["sessions_per_minute"] == ["60", "default", "0"]
    code, out, err = await astrabox("quotas", *target, "set", "--project", project_id, "--live-sessions", "default")
    assert code == 0, err
    async with AstraBoxClient.connect(running.address) as operator:
        found = await operator.admin.get_quotas(project_id)
    assert not found.configured.HasField("live_sessions") and found.configured.concurrent_commands == 3


async def test_an_answer_over_the_message_quota_leaves_the_interaction_pending(plane) -> None:
    await plane.connect_agent()
    session = await plane.kernel.create_session(CreateSession(request_id="ask", project_id=plane.project_id))
    await plane.runtime_started(session.session_id)
    sid = session.session_id
    turn = await plane.conversation.send_message(SendMessage(sid, "m", "run: touch f"))
    await plane.report(
        sid,
        turn.turn_id,
        interaction_requested=runner_pb2.InteractionRequested(
            interaction_id="i-1", tool_name="Bash", input_json="{}", tool_use_id="tu-1"
        ),
    )
    await quotas.put(plane.pool, plane.project_id, {"message_bytes": 20}, "test")
    with pytest.raises(QuotaExceeded) as over:
        await plane.conversation.respond(sid, "i-1", "r-1", Answer("deny", message="n" * 21))
    assert over.value.metadata == {"quota": "message_bytes", "limit": "20", "used": "21"}
    assert (await plane.kernel.get_session(sid)).pending_interaction is not None
    await plane.conversation.respond(sid, "i-1", "r-1", Answer("deny", message="no"))  # the same id, now in bounds
    assert (await plane.kernel.get_session(sid)).pending_interaction is None
