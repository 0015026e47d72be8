"""Heartbeats first: a lease renewed from its heartbeats on a connection of its own, and held by its
live stream so that a renewal that comes late cannot let it lapse; a replica that goes away lets
go of what it held."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import grpc

from astrabox.client import AstraBoxClient
from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane.agents import AgentHello, Agents
from controlplane.journal import EventKind
from controlplane.kernel import CreateSession
from controlplane.leases import LeaseKeeper, LeaseStoreUnavailable
from controlplane.server import serve
from controlplane.settings import ControlPlaneSettings
from dataplane_agent.engines.claude_code import MANIFEST as AGENT_CLAUDE_CODE
from dataplane_agent.relay.client import engine_manifest_proto
from serverkit import versions
from tests.controlplane.conftest import CLAUDE_CODE
from tests.support import admission

HELLO = AgentHello("agent-1", "i1", ["local"], [CLAUDE_CODE], 4, {})


async def lost(plane, session_id: str) -> bool:
    return any(e.kind is EventKind.RUNTIME_LOST for e in await plane.journal.read(session_id, 0, 1000))


async def session_on_a_short_lease(plane) -> tuple[Agents, int, str]:
    """A session with a runtime on agent-1, whose lease (300 ms) nobody renews."""
    agents = Agents(plane.pool, timedelta(milliseconds=300))
    lease = await agents.register(HELLO)
    request = CreateSession(request_id=secrets.token_hex(4), project_id=plane.project_id)
    session = await plane.kernel.create_session(request)
    await plane.runtime_started(session.session_id)
    return agents, lease.generation, session.session_id


async def test_a_renewal_is_fenced_by_generation_and_dated_from_when_its_heartbeat_was_heard(plane, database_url):
    agents = Agents(plane.pool, timedelta(seconds=1))
    keeper = LeaseKeeper(database_url, timedelta(seconds=30))
    try:
        old = await agents.register(HELLO)
        new = await agents.register(HELLO)
        assert await keeper.renew("agent-1", old.generation, time.monotonic()) is None
        # Heard 10 s ago: the lease runs 30 s from then, not from the renewal.
        renewed = await keeper.renew("agent-1", new.generation, time.monotonic() - 10)
        assert renewed is not None and renewed.generation == new.generation
        left = await plane.pool.fetchval("SELECT extract(epoch FROM $1 - now())::float", renewed.expires_at)
        assert 0 < left <= 20.0
        # A renewal for an older heartbeat never shortens the lease.
        again = await keeper.renew("agent-1", new.generation, time.monotonic() - 25)
        assert again is not None and again.expires_at == renewed.expires_at
    finally:
        await keeper.close()


async def test_a_lease_held_by_a_live_stream_does_not_lapse_however_late_its_renewal(plane, database_url):
    _, generation, session_id = await session_on_a_short_lease(plane)
    keeper = LeaseKeeper(database_url, timedelta(milliseconds=300))
    try:
        async with keeper.hold("agent-1", generation):
            await asyncio.sleep(0.5)  # its expiry has passed; its renewal is late
            assert await plane.sweeper.sweep() == 0
            assert not await lost(plane, session_id)
        # The stream ended: the lease lapses at once.
        assert await plane.sweeper.sweep() == 1
        assert await lost(plane, session_id)
    finally:
        await keeper.close()


async def test_a_hold_is_for_its_generation_only(plane, database_url):
    _, generation, session_id = await session_on_a_short_lease(plane)
    keeper = LeaseKeeper(database_url, timedelta(milliseconds=300))
    try:
        async with keeper.hold("agent-1", generation):
            # Revoked (controlplane.identity.admin ends the lease with a new generation): a stream of
            # the old one holds nothing.
            await plane.pool.execute(
                "UPDATE agents SET generation = generation + 1, lease_expires_at = now() WHERE agent_id = 'agent-1'"
            )
            assert await plane.sweeper.sweep() == 1
            assert await lost(plane, session_id)
    finally:
        await keeper.close()


async def test_a_replica_that_loses_its_lease_connection_lets_go_then_holds_again(plane, database_url):
    _, generation, session_id = await session_on_a_short_lease(plane)
    keeper = LeaseKeeper(database_url, timedelta(milliseconds=300))
    try:
        async with keeper.hold("agent-1", generation):
            await asyncio.sleep(0.5)
            # As PostgreSQL ends the connection of a replica that died or was cut off.
            await plane.pool.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'astrabox-leases' AND datname = current_database()"
            )
            await asyncio.sleep(0.2)
            # Nothing holds the lease: a sweep now (on any replica) would find it lapsed.
            assert await plane.pool.fetchval("SELECT agent_lease_held('agent-1', $1)", generation) is False
            # The replica, still alive, opens another connection at its next renewal (or the one after,
            # when the loss shows only once the old connection is used) and takes its holds again.
            renewed = None
            for _ in range(2):
                with contextlib.suppress(LeaseStoreUnavailable):
                    renewed = await keeper.renew("agent-1", generation, time.monotonic())
                    break
            assert renewed is not None
            assert await plane.pool.fetchval("SELECT agent_lease_held('agent-1', $1)", generation) is True
            await asyncio.sleep(0.5)
            assert await plane.sweeper.sweep() == 0
            assert not await lost(plane, session_id)
    finally:
        await keeper.close()


class _Agent:
    """A Connect stream as an agent holds it, its messages sent when the test says."""

    def __init__(self, address: str) -> None:
        self._channel = grpc.aio.insecure_channel(address)
        self._outgoing: asyncio.Queue[runner_pb2.ConnectRequest] = asyncio.Queue()
        hello = runner_pb2.Hello(
            agent_id="agent-1",
            agent_credential=secrets.token_urlsafe(24),
            enrollment_token=admission.TOKEN,
            instance_id="test",
            drivers=["local"],
            engines=["claude_code"],
            engine_manifests=[engine_manifest_proto(AGENT_CLAUDE_CODE)],
            capacity=4,
            agent_version=versions.VERSION,
        )
        self.send(runner_pb2.ConnectRequest(hello=hello))
        self.call = self._channel.stream_stream(
            "/astrabox.runner.v1.RunnerService/Connect",
            request_serializer=runner_pb2.ConnectRequest.SerializeToString,
            response_deserializer=runner_pb2.ConnectResponse.FromString,
        )(self._requests())

    def send(self, request: runner_pb2.ConnectRequest) -> None:
        self._outgoing.put_nowait(request)

    async def _requests(self) -> AsyncIterator[runner_pb2.ConnectRequest]:
        while True:
            yield await self._outgoing.get()

    async def next(self, kind: str) -> runner_pb2.ConnectResponse:
        async with asyncio.timeout(30):
            while (message := await self.call.read()).WhichOneof("message") != kind:
                pass
        return message

    async def close(self) -> None:
        self.call.cancel()
        await self._channel.close()


async def test_heartbeats_renew_the_lease_while_an_output_batch_waits_for_its_commit(database_url, bootstrap_key_file):
    settings = ControlPlaneSettings(
        database_url=database_url,
        listen="127.0.0.1:0",
        bootstrap_key_file=bootstrap_key_file,
        lease_ttl=timedelta(seconds=1),
        heartbeat_interval=timedelta(milliseconds=200),
        sweep_interval=timedelta(milliseconds=200),
        **admission.AUTOMATIC,
    )
    async with serve(settings) as running, AstraBoxClient.connect(running.address) as client:
        agent = _Agent(running.address)
        try:
            await agent.next("welcome")
            session_id = (await client.create_session()).session_id
            start = (await agent.next("command")).command
            started = runner_pb2.Output(
                session_id=session_id, output_seq=1, runtime_started=runner_pb2.RuntimeStarted(sandbox_id="sb")
            )
            agent.send(runner_pb2.ConnectRequest(output_batch=runner_pb2.OutputBatch(outputs=[started])))
            agent.send(runner_pb2.ConnectRequest(command_ack=runner_pb2.CommandAck(command_seq=start.command_seq)))
            await client.wait_for_state(session_id, ["READY"])

            blocker = await asyncpg.connect(database_url)
            try:
                # The session's row is locked: the next output batch's commit waits for it.
                async with blocker.transaction():
                    await blocker.execute("SELECT 1 FROM sessions WHERE session_id = $1 FOR UPDATE", session_id)
                    message = runner_pb2.EngineMessage(type_name="AssistantMessage", payload_json="{}")
                    output = runner_pb2.Output(session_id=session_id, output_seq=2, engine_message=message)
                    agent.send(runner_pb2.ConnectRequest(output_batch=runner_pb2.OutputBatch(outputs=[output])))
                    acks = []
                    for _ in range(15):  # three leases' worth of heartbeats
                        beat = runner_pb2.Heartbeat()
                        beat.send_time.GetCurrentTime()
                        agent.send(runner_pb2.ConnectRequest(heartbeat=beat))
                        acks.append((await agent.next("heartbeat_ack")).heartbeat_ack)
                        await asyncio.sleep(0.2)
                    # Every heartbeat was answered while the batch waited, each with a later expiry.
                    expiries = [a.lease.expire_time.ToNanoseconds() for a in acks]
                    assert expiries == sorted(expiries) and expiries[0] < expiries[-1]
                # The batch went through once the lock was gone.
                assert (await agent.next("output_ack")).output_ack.committed[0].output_seq == 2
            finally:
                await blocker.close()
            session = await client.get_session(session_id)
            events = [e.WhichOneof("payload") async for e in client.iter_events(session_id)]
            assert session.runtime_available and "runtime_lost" not in events, events
        finally:
            await agent.close()
