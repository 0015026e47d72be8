"""Commands across stream cuts and lease changes, with real processes: a control plane, agents
whose Runner streams go through a cutting proxy, the offline model.

Before, a command waiting on the agent behind a slower command of its session (a sandbox still
starting) when the stream was replaced was refused as "stale lease", that refusal acknowledged,
and its resent copy dropped as "already in progress": a message stuck RUNNING for good, a
deleted session's sandbox left behind. And an agent partitioned for longer than its lease while
a question was pending kept the turn parked: no later message was ever answered.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from astrabox.client import AstraBoxClient
from astrabox.sessionkernel.v1.events_pb2 import SessionEvent
from tests.support.cutting_proxy import CuttingProxy
from tests.support.processes import Process, start_agent, start_controlplane

pytestmark = pytest.mark.e2e

LEASE_TTL_S = 3
DELIVERY_DEADLINE_S = 60
CONTROLPLANE_ARGS = (
    f"--lease-ttl={LEASE_TTL_S}",
    "--heartbeat-interval=1",
    "--sweep-interval=0.5",
    f"--delivery-deadline={DELIVERY_DEADLINE_S}",
)


@dataclass
class Agent:
    agent_id: str
    state: Path
    proxy: CuttingProxy
    process: Process

    def has_sandbox_of(self, session_id: str) -> bool:
        """Whether this agent keeps a sandbox whose binding names the session."""
        sandboxes = self.state / "sandboxes"
        return any(session_id in p.read_text() for p in sandboxes.glob("*/run/binding.json")) or any(
            p.name == f"local-{session_id}" for p in sandboxes.glob("*")
        )


@dataclass
class Fleet:
    address: str
    controlplane: Process
    agents: dict[str, Agent] = field(default_factory=dict)


@pytest.fixture
def fleet(database_url: str, tmp_path: Path) -> Iterator[Fleet]:
    controlplane, address = start_controlplane(database_url, tmp_path, args=CONTROLPLANE_ARGS)
    fleet = Fleet(address, controlplane)
    try:
        for name in ("agent-a", "agent-b"):
            proxy = CuttingProxy(address)
            proxy.start()
            logs = tmp_path / name
            logs.mkdir()
            process = start_agent(proxy.address, tmp_path / f"{name}-state", logs, agent_id=name)
            fleet.agents[name] = Agent(name, tmp_path / f"{name}-state", proxy, process)
        yield fleet
    finally:
        for agent in fleet.agents.values():
            agent.process.stop()
            agent.proxy.close()
        controlplane.stop()


async def events_of(client: AstraBoxClient, session_id: str) -> list[SessionEvent]:
    return [e async for e in client.iter_events(session_id)]


def kind(event: SessionEvent) -> str:
    return event.WhichOneof("payload") or ""


async def settled(client: AstraBoxClient, session_id: str, turn_id: str, timeout: float) -> list[str]:
    """Wait until the turn has ended; the kinds of the events that ended it."""
    ends = ("turn_completed", "turn_failed", "turn_interrupted")
    async with asyncio.timeout(timeout):
        while True:
            found = [kind(e) for e in await events_of(client, session_id) if e.turn_id == turn_id and kind(e) in ends]
            if found:
                return found
            await asyncio.sleep(0.25)


async def wait_until(predicate, timeout: float, interval: float = 0.2) -> None:
    async with asyncio.timeout(timeout):
        while not await predicate():
            await asyncio.sleep(interval)


async def test_a_message_sent_as_its_session_moves_to_an_agent_whose_stream_is_cut_is_answered_once(
    fleet: Fleet,
) -> None:
    async with AstraBoxClient.connect(fleet.address) as client:
        session = await client.create_session(request_id="moving")
        sid = session.session_id
        await client.wait_for_state(sid, ["READY"], timeout=120)
        rounds = 20
        for n in range(rounds):
            holder = fleet.agents[(await client.get_session(sid)).agent_id]
            other = next(a for a in fleet.agents.values() if a is not holder)
            holder.proxy.stall()  # a partition longer than the lease: the session's runtime is lost
            await wait_until(lambda: _runtime_lost(client, sid), timeout=LEASE_TTL_S * 10)
            turn = (await client.send_message(sid, f"run: echo round {n}")).turn_id  # placed on `other`
            await asyncio.sleep(0.3)  # StartRuntime and DeliverInput reach it; the input waits behind the start
            other.proxy.cut()
            holder.proxy.resume()
            began = time.monotonic()
            ends = await settled(client, sid, turn, timeout=DELIVERY_DEADLINE_S + 60)
            events = await events_of(client, sid)
            answers = [e for e in events if e.turn_id == turn and kind(e) == "turn_completed"]
            assert len(ends) == 1, (n, ends)
            if ends == ["turn_completed"]:
                assert f"round {n}" in answers[0].turn_completed.result, answers[0]
            else:  # failed with a reason, never silently
                [failed] = [e for e in events if e.turn_id == turn and kind(e) == "turn_failed"]
                assert failed.turn_failed.reason, failed
            assert time.monotonic() - began < DELIVERY_DEADLINE_S + 60
            await client.wait_for_state(sid, ["READY"], timeout=60)
        completed = [e for e in await events_of(client, sid) if kind(e) == "turn_completed"]
        assert len(completed) >= rounds - 2  # nearly every round is answered, none twice
        assert len({e.turn_id for e in completed}) == len(completed)


async def _runtime_lost(client: AstraBoxClient, session_id: str) -> bool:
    return not (await client.get_session(session_id)).runtime_available


async def _runtime_back(client: AstraBoxClient, session_id: str) -> bool:
    return (await client.get_session(session_id)).runtime_available


async def test_a_session_deleted_while_its_sandbox_starts_across_a_reconnect_leaves_no_sandbox(fleet: Fleet) -> None:
    fleet.agents["agent-b"].process.stop()  # one agent: it takes every session
    agent = fleet.agents["agent-a"]
    async with AstraBoxClient.connect(fleet.address) as client:
        for n in range(5):
            session = await client.create_session(request_id=f"short-lived-{n}")
            sid = session.session_id
            await asyncio.sleep(0.2)  # the start is under way on the agent
            await client.delete_session(sid)
            await asyncio.sleep(0.2)  # the destruction waits behind the start
            agent.proxy.cut()
            await wait_until(lambda sid=sid: _gone(agent, sid), timeout=60)


async def _gone(agent: Agent, session_id: str) -> bool:
    return not agent.has_sandbox_of(session_id)


async def test_a_partition_longer_than_the_lease_with_a_question_pending_does_not_wedge_the_session(
    fleet: Fleet,
) -> None:
    fleet.agents["agent-b"].process.stop()
    agent = fleet.agents["agent-a"]
    async with AstraBoxClient.connect(fleet.address) as client:
        session = await client.create_session(request_id="asked", permission_mode="default")
        sid = session.session_id
        await client.wait_for_state(sid, ["READY"], timeout=120)
        asked = (await client.send_message(sid, "ask: Which colour? red|blue")).turn_id
        await client.wait_for_state(sid, ["WAITING_FOR_INPUT"], timeout=120)
        agent.proxy.stall()
        await wait_until(lambda: _runtime_lost(client, sid), timeout=LEASE_TTL_S * 10)
        assert await settled(client, sid, asked, timeout=10) == ["turn_failed"]
        agent.proxy.resume()
        # The agent comes back (its stream, ended while silent, is dialled again) still holding the
        # session's runtime, which is then available again.
        await wait_until(lambda: _runtime_back(client, sid), timeout=120)
        answered = (await client.send_message(sid, "run: echo after the partition")).turn_id
        assert await settled(client, sid, answered, timeout=120) == ["turn_completed"]
        events = await events_of(client, sid)
        [done] = [e for e in events if e.turn_id == answered and kind(e) == "turn_completed"]
        assert "after the partition" in done.turn_completed.result
        requested = {
            e.interaction_requested.interaction.interaction_id for e in events if kind(e) == "interaction_requested"
        }
        closed = {e.interaction_closed.interaction_id for e in events if kind(e) == "interaction_closed"}
        answered_ids = {e.interaction_answered.interaction_id for e in events if kind(e) == "interaction_answered"}
        assert requested <= closed | answered_ids  # no question is left open
