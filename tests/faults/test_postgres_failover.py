"""The PostgreSQL primary lost (and moved on purpose) under a running stack, on a real HA stack.

etcd and two Patroni nodes (`tests.support.patroni_cluster`): a primary and a synchronous standby.
Two control-plane replicas and an agent run as separate processes, the replicas given the
multi-host URL (`target_session_attrs=read-write`). Two sessions stream `steps: N` turns, a client
watching each on the replica the agent is not on; mid-burst the primary's Patroni and PostgreSQL
are SIGKILLed (a machine lost), or Patroni is asked to switch over. Patroni promotes the standby;
the replicas' pools, live tails and lease connections find the new primary on their own, the
agent's relay resends what was not acknowledged, and the journal and the watchers hold every step
the model produced exactly once, in order; the sessions then take new messages.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio

from astrabox.client import AstraBoxClient, Backoff
from astrabox.sessionkernel.v1 import events_pb2
from tests.support import patroni_cluster
from tests.support.patroni_cluster import PatroniCluster
from tests.support.processes import Process, start_agent, start_controlplane

pytestmark = pytest.mark.e2e

STEPS = 24
SESSIONS = 2
LEASE_TTL = 3 * patroni_cluster.TTL
STEP = re.compile(r"Step (\d+) of \d+\.")


@pytest_asyncio.fixture
async def cluster() -> AsyncIterator[PatroniCluster]:
    if (why := patroni_cluster.missing()) is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    cluster = PatroniCluster()
    try:
        await asyncio.to_thread(cluster.start)
        yield cluster
    finally:
        await asyncio.to_thread(cluster.stop)


@dataclass(frozen=True)
class Replicas:
    """Two control-plane replicas on the multi-host URL: the agent dials `a`, the watchers `b` (whose
    live tail hears `a`'s commits by NOTIFY, so it must LISTEN again on the new primary)."""

    a: str
    b: str


@pytest_asyncio.fixture
async def stack(cluster: PatroniCluster, tmp_path: Path, api_key: str) -> AsyncIterator[Replicas]:
    started: list[Process] = []
    try:
        # An agent's lease outlasts the failover (Patroni's TTL and a promotion): see README's
        # "PostgreSQL high availability".
        addresses = []
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            process, address = start_controlplane(cluster.dsn, tmp_path / name, args=("--lease-ttl", str(LEASE_TTL)))
            started.append(process)
            addresses.append(address)
        started.append(start_agent(addresses[0], tmp_path / "agent-state", tmp_path))
        yield Replicas(*addresses)
    finally:
        for process in reversed(started):
            process.stop()


async def burst_through(
    replicas: Replicas, move: Callable[[], object]
) -> tuple[list[list[events_pb2.SessionEvent]], list[str]]:
    """Start a `steps` turn on each session with a watcher on each; `move` the database once every
    watcher has seen a few steps; return what each watcher saw up to its turn's end, and the ids."""
    reconnect = Backoff(initial=0.1, maximum=1.0)
    async with (
        AstraBoxClient.connect(replicas.a, reconnect=reconnect, timeout=60) as client,
        AstraBoxClient.connect(replicas.b, reconnect=reconnect, timeout=60) as watching,
    ):
        ids = []
        for n in range(SESSIONS):
            session = await client.create_session(request_id=f"failover-{n}")
            await client.wait_for_state(session.session_id, ["READY"], timeout=120)
            ids.append(session.session_id)
        seen: list[list[events_pb2.SessionEvent]] = [[] for _ in ids]
        streaming = [asyncio.Event() for _ in ids]

        async def watch(index: int, turn_id: str) -> None:
            async for event in watching.watch(ids[index]):
                seen[index].append(event)
                if (
                    sum(bool(STEP.search(e.engine_message.payload_json)) for e in seen[index][-1:])
                    and sum(bool(STEP.search(e.engine_message.payload_json)) for e in seen[index]) >= 3
                ):
                    streaming[index].set()
                if event.turn_id == turn_id and event.WhichOneof("payload") in ("turn_completed", "turn_failed"):
                    return

        turns = [await client.send_message(session_id, f"steps: {STEPS}") for session_id in ids]
        watchers = [asyncio.create_task(watch(i, turn.turn_id)) for i, turn in enumerate(turns)]
        try:
            async with asyncio.timeout(600):
                for event in streaming:
                    await event.wait()
                await asyncio.to_thread(move)
                at_move = [sum(len(STEP.findall(e.engine_message.payload_json)) for e in events) for events in seen]
                await asyncio.gather(*watchers)
        finally:
            for watcher in watchers:
                watcher.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)

        # The database moved mid-burst: steps were still to come when the new primary served.
        assert min(at_move) < STEPS, at_move

        # The sessions take messages again, on the new primary.
        for session_id in ids:
            again = await client.send_message(session_id, "run: echo again")
            async with asyncio.timeout(180):
                async for event in client.watch(session_id, after_seq=seen[ids.index(session_id)][-1].seq):
                    if event.turn_id == again.turn_id and event.WhichOneof("payload") in (
                        "turn_completed",
                        "turn_failed",
                    ):
                        assert event.WhichOneof("payload") == "turn_completed", event.turn_failed.reason
                        break
    return seen, ids


async def assert_nothing_lost_or_duplicated(
    cluster: PatroniCluster, seen: list[list[events_pb2.SessionEvent]], ids: list[str]
) -> None:
    conn = await asyncpg.connect(cluster.dsn, timeout=30)
    try:
        for session_id, watched in zip(ids, seen, strict=True):
            rows = await conn.fetch("SELECT seq, payload FROM events WHERE session_id = $1 ORDER BY seq", session_id)
            # The journal: every seq once, no gap.
            assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
            # The watcher: every seq once, in order, the journal's events.
            assert [e.seq for e in watched] == list(range(1, len(watched) + 1))
            # What the model produced: each step once, in order, in the journal and at the watcher;
            # the turn completed (the agent was never restarted: nothing was given up).
            watched_steps = [int(m) for e in watched for m in STEP.findall(e.engine_message.payload_json)]
            assert watched_steps == list(range(1, STEPS + 1))
            assert watched[-1].WhichOneof("payload") == "turn_completed"
            journal_steps = [int(m) for r in rows[: len(watched)] for m in STEP.findall(str(r["payload"]))]
            assert journal_steps == watched_steps
    finally:
        await conn.close(timeout=10)


async def test_the_primary_lost_mid_burst_loses_and_duplicates_no_event(
    cluster: PatroniCluster, stack: Replicas
) -> None:
    crashed: list[str] = []

    def crash() -> None:
        crashed.append(cluster.crash_primary().name)
        cluster.wait_for(lambda: cluster.leader() not in (None, crashed[0]), 120, "Patroni to promote the standby")

    seen, ids = await burst_through(stack, crash)
    assert cluster.leader() != crashed[0]
    await assert_nothing_lost_or_duplicated(cluster, seen, ids)


async def test_a_switchover_mid_burst_loses_and_duplicates_no_event(cluster: PatroniCluster, stack: Replicas) -> None:
    before = cluster.leader()
    seen, ids = await burst_through(stack, cluster.switchover)
    assert cluster.leader() not in (None, before)
    await assert_nothing_lost_or_duplicated(cluster, seen, ids)
