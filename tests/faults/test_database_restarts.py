"""PostgreSQL restarted (fast and immediate, as a crash) under a serving control plane.

Every call answers what it answers with the database up, or UNAVAILABLE with the reason
DATABASE_UNAVAILABLE (CREDENTIALS_UNVERIFIABLE for a credential not yet verified): never UNKNOWN or
INTERNAL, never the database's address. Watch streams end with UNAVAILABLE and the client's watch
resumes from where it was, so a watcher across the restarts sees every event once, in order; the
client's idempotent calls retry within their deadline. Everything serves again once PostgreSQL is back.

The control plane runs in this process (`serve`) on a PostgreSQL of the test's own
(`RestartablePostgres`); events are appended by "another replica": an `OutputCommitter` on a pool of
its own, resending what did not commit as the agents' relay does.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import asyncpg
import grpc
import pytest_asyncio

from astrabox.admin.v1 import admin_service_pb2 as admin_pb
from astrabox.admin.v1 import admin_service_pb2_grpc as admin_grpc
from astrabox.client import AstraBoxClient, Backoff
from astrabox.errors import AstraBoxError
from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as pb
from astrabox.sessionkernel.v1 import session_kernel_service_pb2_grpc as pb_grpc
from controlplane.agents import AgentHello, Agents
from controlplane.database import create_pool
from controlplane.identity import keys
from controlplane.journal import NOTIFY_CHANNEL, Journal
from controlplane.live import LiveTail
from controlplane.outputs import OutputCommitter
from controlplane.server import RunningControlPlane, serve
from controlplane.settings import ControlPlaneSettings
from controlplane.status import error_info
from controlplane.turns import Turns
from tests.controlplane.conftest import CLAUDE_CODE
from tests.support.restartable_postgres import RestartablePostgres

AGENT = "agent-1"
UNKNOWN_SESSION = "8c3e2a38-7f8b-4f7e-9d7b-9a0b6e0f0e0e"
RESTARTS = ("fast", "immediate", "fast")
FAST = Backoff(initial=0.05, maximum=0.5)
# What a driver raises while the database is away, to the test's own writer.
DATABASE_FAULTS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.exceptions.InternalClientError)


@pytest_asyncio.fixture
async def postgres() -> AsyncIterator[RestartablePostgres]:
    cluster = RestartablePostgres()
    try:
        await cluster.start()
        yield cluster
    finally:
        await cluster.close()


@pytest_asyncio.fixture
async def control_plane(postgres: RestartablePostgres, bootstrap_key_file: str) -> AsyncIterator[RunningControlPlane]:
    settings = ControlPlaneSettings(
        database_url=postgres.dsn,
        listen="127.0.0.1:0",
        bootstrap_key_file=bootstrap_key_file,
        lease_ttl=timedelta(hours=1),  # the agent on record stays placeable through the restarts
        credentials_ttl=timedelta(hours=1),  # a verified key lets calls reach their handlers
        idle_stop_after=timedelta(0),
    )
    async with serve(settings) as running:
        yield running


class Replica:
    """What another replica does to the journal: an agent's outputs committed, each until it is."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.committer = OutputCommitter(Journal(pool, LiveTail()), Turns(Agents(pool, timedelta(hours=1))))
        self.output_seq = 0

    async def commit(self, session_id: str, **body: Any) -> None:
        self.output_seq += 1
        output = runner_pb2.Output(session_id=session_id, output_seq=self.output_seq, **body)
        while True:
            try:
                result = await asyncio.wait_for(self.committer.commit(AGENT, [output]), 30)
            except DATABASE_FAULTS:
                await asyncio.sleep(0.1)  # as the relay: the same output again, a no-op if it had committed
                continue
            assert not result.refused, result.refused
            return

    async def engine_message(self, session_id: str, n: int) -> None:
        message = runner_pb2.EngineMessage(type_name="AssistantMessage", payload_json=json.dumps({"n": n}))
        await self.commit(session_id, engine_message=message)


@pytest_asyncio.fixture
async def replica(postgres: RestartablePostgres, control_plane: RunningControlPlane) -> AsyncIterator[Replica]:
    pool = await create_pool(postgres.dsn, min_size=1, max_size=2)
    try:
        await Agents(pool, timedelta(hours=1)).register(
            AgentHello(AGENT, "test", drivers=["local"], engines=[CLAUDE_CODE], capacity=1000, sessions={})
        )
        yield Replica(pool)
    finally:
        await pool.close()


async def ready_session(client: AstraBoxClient, replica: Replica) -> str:
    session = await client.create_session()
    await replica.commit(session.session_id, runtime_started=runner_pb2.RuntimeStarted(sandbox_id="sb", driver="local"))
    return session.session_id


@dataclass(frozen=True)
class Outcome:
    call: str
    code: grpc.StatusCode
    reason: str
    text: str  # the status message and the ErrorInfo's metadata


async def outcome_of(call: str, attempt: Callable[[], Awaitable[Any]]) -> Outcome:
    try:
        await asyncio.wait_for(attempt(), 30)
    except grpc.aio.AioRpcError as error:
        info = error_info(error)
        metadata = " ".join(f"{k}={v}" for k, v in (info.metadata if info else {}).items())
        return Outcome(call, error.code(), info.reason if info else "", f"{error.details()} {metadata}")
    except TimeoutError:
        return Outcome(call, grpc.StatusCode.DEADLINE_EXCEEDED, "", "no answer in 30 s")
    return Outcome(call, grpc.StatusCode.OK, "", "")


async def test_calls_across_database_restarts_answer_unavailable_with_a_reason_never_the_address(
    postgres: RestartablePostgres, control_plane: RunningControlPlane, replica: Replica, api_key: str
) -> None:
    async with AstraBoxClient.connect(control_plane.address, api_key=api_key) as client:
        session_id = await ready_session(client, replica)
    bearer = (("authorization", f"Bearer {api_key}"),)
    channel = grpc.aio.insecure_channel(control_plane.address)
    kernel, admin = pb_grpc.SessionKernelServiceStub(channel), admin_grpc.AdminServiceStub(channel)

    async def watch() -> None:  # a stream: runs until the database goes away
        async for _ in kernel.WatchSessionEvents(pb.WatchSessionEventsRequest(session_id=session_id), metadata=bearer):
            pass

    def never_seen_key() -> tuple[tuple[str, str], ...]:  # a key that must be looked up: not in any cache
        return (("authorization", f"Bearer {keys.new_key().secret}"),)

    # Each call, and what it answers with the database up.
    calls: dict[str, tuple[Callable[[], Awaitable[Any]], grpc.StatusCode, str]] = {
        "GetSession": (
            lambda: kernel.GetSession(pb.GetSessionRequest(session_id=session_id), metadata=bearer),
            grpc.StatusCode.OK,
            "",
        ),
        "GetSession(unknown)": (
            lambda: kernel.GetSession(pb.GetSessionRequest(session_id=UNKNOWN_SESSION), metadata=bearer),
            grpc.StatusCode.NOT_FOUND,
            "SESSION_NOT_FOUND",
        ),
        "ListSessions": (
            lambda: kernel.ListSessions(pb.ListSessionsRequest(), metadata=bearer),
            grpc.StatusCode.OK,
            "",
        ),
        "ListSessionEvents": (
            lambda: kernel.ListSessionEvents(pb.ListSessionEventsRequest(session_id=session_id), metadata=bearer),
            grpc.StatusCode.OK,
            "",
        ),
        "SendMessage": (
            lambda: kernel.SendMessage(
                pb.SendMessageRequest(session_id=session_id, client_message_id=str(uuid.uuid4()), text="hi"),
                metadata=bearer,
            ),
            grpc.StatusCode.OK,
            "",
        ),
        "WhoAmI": (lambda: admin.WhoAmI(admin_pb.WhoAmIRequest(), metadata=bearer), grpc.StatusCode.OK, ""),
        "GetQuotas": (lambda: admin.GetQuotas(admin_pb.GetQuotasRequest(), metadata=bearer), grpc.StatusCode.OK, ""),
        "GetSession(new key)": (
            lambda: kernel.GetSession(pb.GetSessionRequest(session_id=session_id), metadata=never_seen_key()),
            grpc.StatusCode.UNAUTHENTICATED,
            "CREDENTIALS_INVALID",
        ),
        "WatchSessionEvents": (watch, grpc.StatusCode.OK, ""),
    }
    seen: list[Outcome] = []
    restarting = True

    async def hammer(name: str) -> None:
        while restarting:
            seen.append(await outcome_of(name, calls[name][0]))
            await asyncio.sleep(0.02)

    hammers = [asyncio.create_task(hammer(name)) for name in calls if name != "WatchSessionEvents"]
    watcher = asyncio.create_task(hammer("WatchSessionEvents"))
    try:
        for mode in RESTARTS:
            await asyncio.sleep(1)
            await postgres.restart(mode)
        await asyncio.sleep(1)
    finally:
        restarting = False
        await asyncio.gather(*hammers)
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)

    database_down = {(grpc.StatusCode.UNAVAILABLE, "DATABASE_UNAVAILABLE")}
    allowed = {
        name: {(code, reason)} | database_down | {(grpc.StatusCode.ABORTED, "DATABASE_CONFLICT")}
        for name, (_, code, reason) in calls.items()
    }
    allowed["GetSession(new key)"] |= {(grpc.StatusCode.UNAVAILABLE, "CREDENTIALS_UNVERIFIABLE")}
    unexpected = {
        (o.call, o.code.name, o.reason, o.text[:200]) for o in seen if (o.code, o.reason) not in allowed[o.call]
    }
    assert unexpected == set()
    answers = {(o.call, o.code, o.reason) for o in seen}
    # The outage reached the handlers and the credential check. (A watch may or may not read the
    # journal while the database is down, its live tail reconnecting in between: what it answers is
    # checked above, that it met the outage is not.)
    assert ("GetSession", grpc.StatusCode.UNAVAILABLE, "DATABASE_UNAVAILABLE") in answers
    assert ("GetSession(new key)", grpc.StatusCode.UNAVAILABLE, "CREDENTIALS_UNVERIFIABLE") in answers
    # Nothing about where the database is.
    where = (f"{postgres.port}", "127.0.0.1", str(postgres.data_dir), ".s.PGSQL")
    leaks = [o for o in seen if any(part in o.text for part in where)]
    assert leaks == []

    # Once PostgreSQL is back, every call answers as it did before.
    for name, (attempt, code, reason) in calls.items():
        if name == "WatchSessionEvents":
            continue
        async with asyncio.timeout(30):
            while (answer := await outcome_of(name, attempt)).code != code:
                await asyncio.sleep(0.2)
        assert (answer.code, answer.reason) == (code, reason)
    await channel.close()


async def test_a_watcher_across_database_restarts_sees_every_event_once_in_order(
    postgres: RestartablePostgres, control_plane: RunningControlPlane, replica: Replica, api_key: str
) -> None:
    async with AstraBoxClient.connect(control_plane.address, api_key=api_key, reconnect=FAST) as client:
        session_id = await ready_session(client, replica)
        delivered: list[Any] = []
        appended = 0
        appending = True

        async def watch() -> None:
            async for event in client.watch(session_id):
                delivered.append(event)

        async def append() -> None:
            nonlocal appended
            while appending:
                appended += 1
                await replica.engine_message(session_id, appended)
                await asyncio.sleep(0.02)

        watcher = asyncio.create_task(watch())
        appender = asyncio.create_task(append())
        try:
            for mode in RESTARTS:
                await asyncio.sleep(1)
                await postgres.restart(mode)
            await asyncio.sleep(1)
            appending = False
            await appender
            last_seq = await replica.pool.fetchval("SELECT last_seq FROM sessions WHERE session_id = $1", session_id)
            async with asyncio.timeout(60):
                while (not delivered or delivered[-1].seq < last_seq) and not watcher.done():
                    await asyncio.sleep(0.1)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, appender, return_exceptions=True)
            if watcher.done() and not watcher.cancelled() and watcher.exception() is not None:
                raise watcher.exception()  # type: ignore[misc]

    assert [e.seq for e in delivered] == list(range(1, last_seq + 1))
    numbered = [json.loads(e.engine_message.payload_json)["n"] for e in delivered if e.HasField("engine_message")]
    assert numbered == list(range(1, appended + 1))


async def test_idempotent_calls_wait_out_a_database_restart_within_their_deadline(
    postgres: RestartablePostgres, control_plane: RunningControlPlane, replica: Replica, api_key: str
) -> None:
    async with AstraBoxClient.connect(control_plane.address, api_key=api_key, reconnect=FAST, timeout=30) as client:
        session_id = await ready_session(client, replica)
        refused: AstraBoxError | None = None
        await postgres.stop("immediate")
        try:
            reading = asyncio.create_task(client.get_session(session_id))
            sending = asyncio.create_task(client.send_message(session_id, "hello", client_message_id="m-1"))
            # Not idempotent (a second project, or "it exists"): not retried, the caller decides.
            try:
                await client.admin.create_project("team")
            except AstraBoxError as error:
                refused = error
            await asyncio.sleep(1.5)
        finally:
            await postgres.start()
        session = await reading
        accepted = await sending
    assert session.session_id == session_id
    assert refused is not None and (refused.code, refused.reason) == (
        grpc.StatusCode.UNAVAILABLE,
        "DATABASE_UNAVAILABLE",
    )
    turns = await replica.pool.fetchval("SELECT count(*) FROM turns WHERE session_id = $1", session_id)
    assert accepted.turn_id and turns == 1

    # Bounded: a call whose deadline passes while the database is away says why it failed.
    async with AstraBoxClient.connect(control_plane.address, api_key=api_key, reconnect=FAST, timeout=2) as client:
        gave_up: AstraBoxError | None = None
        await postgres.stop("fast")
        try:
            try:
                await client.get_session(session_id)
            except AstraBoxError as error:
                gave_up = error
        finally:
            await postgres.start()
    assert gave_up is not None and (gave_up.code, gave_up.reason) == (
        grpc.StatusCode.UNAVAILABLE,
        "DATABASE_UNAVAILABLE",
    )


async def test_the_live_tail_listens_again_after_each_restart_and_wakes_its_watchers(
    postgres: RestartablePostgres,
) -> None:
    live = LiveTail()
    follower = asyncio.create_task(live.follow_postgres(postgres.dsn, NOTIFY_CHANNEL))
    try:
        with live.subscribe("session-1") as subscription:
            await asyncio.wait_for(subscription.wait(60), 30)  # listening
            for mode in RESTARTS:
                await postgres.restart(mode)
                # Listening again, it wakes every watcher: any journal may have grown meanwhile.
                await asyncio.wait_for(subscription.wait(60), 30)
            conn = await asyncpg.connect(postgres.dsn)
            try:
                await conn.execute("SELECT pg_notify($1, 'session-1|7')", NOTIFY_CHANNEL)
            finally:
                await conn.close()
            await asyncio.wait_for(subscription.wait(60), 30)  # another replica's commit
        assert not follower.done()
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)
