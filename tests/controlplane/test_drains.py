"""Cordons and drains on real PostgreSQL: a cordoned agent takes no new session; a drained one's idle
sessions move to another agent on their next message, its running turns finish first (until the
drain's deadline); with every agent cordoned the answer is FAILED_PRECONDITION AGENTS_CORDONED."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import grpc
import pytest

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane import store
from controlplane.conversation import SendMessage
from controlplane.drains import Drains
from controlplane.errors import AgentNotFound, AgentsCordoned, CapacityExhausted
from controlplane.journal import EventKind
from controlplane.session import SessionState
from controlplane.status import code_for
from tests.controlplane.conftest import Plane
from tests.controlplane.test_capacity import create, deliveries, ready, turn_failures
from tests.controlplane.test_conversation import finish_turn


def drains(plane: Plane) -> Drains:
    return Drains(plane.pool, plane.journal, plane.turns, plane.agents)


async def commands_for(plane: Plane, session_id: str, agent_id: str) -> list[str]:
    rows = await plane.pool.fetch(
        "SELECT body FROM agent_commands WHERE session_id = $1 AND agent_id = $2 ORDER BY command_seq",
        session_id,
        agent_id,
    )
    return [str(runner_pb2.Command.FromString(r["body"]).WhichOneof("body")) for r in rows]


async def test_a_cordoned_agent_takes_no_new_session_and_keeps_its_own(plane) -> None:
    await plane.connect_agent("agent-1", capacity=5)
    await plane.connect_agent("agent-2", capacity=1)
    kept = await ready(plane, "kept")  # agent-1: the most free slots
    await drains(plane).cordon("agent-1")
    assert (await create(plane, "new")).agent_id == "agent-2"

    # agent-2 full (and open), agent-1 cordoned: the fleet that may take sessions is full.
    with pytest.raises(CapacityExhausted):
        await create(plane, "nowhere")
    # Every agent cordoned: no lack of capacity but a decision, and the answer says what undoes it.
    await drains(plane).cordon("agent-2")
    with pytest.raises(AgentsCordoned) as refused:
        await create(plane, "nowhere-2")
    assert code_for(refused.value) is grpc.StatusCode.FAILED_PRECONDITION
    assert refused.value.reason == "AGENTS_CORDONED" and refused.value.metadata == {"cordoned": "2"}
    assert "astrabox hosts uncordon" in refused.value.message

    # Its own session still runs there, and a sweep moves nothing off an agent only cordoned.
    turn = await plane.conversation.send_message(SendMessage(kept, "m1", "still here?"))
    assert await deliveries(plane, kept) == [turn.turn_id]
    assert await drains(plane).sweep() == 0

    # Reconnecting does not lift a cordon; uncordoning does.
    await plane.connect_agent("agent-1", capacity=5)
    with pytest.raises(AgentsCordoned):
        await create(plane, "nowhere-3")
    await drains(plane).uncordon("agent-1")
    assert (await create(plane, "back")).agent_id == "agent-1"
    with pytest.raises(AgentNotFound):
        await drains(plane).cordon("no-such-agent")


async def test_a_drain_moves_idle_sessions_on_their_next_message_and_lets_turns_finish(plane) -> None:
    await plane.connect_agent("agent-1", capacity=5)
    idle = await ready(plane, "idle")
    busy = await ready(plane, "busy")
    busy_turn = await plane.conversation.send_message(SendMessage(busy, "b1", "a long job"))
    await plane.connect_agent("agent-2", capacity=5)

    hold = await drains(plane).cordon("agent-1", drain_for=timedelta(minutes=10))
    assert hold.drain_deadline is not None and hold.cordoned_at is not None
    # Idempotent: draining again keeps the first deadline.
    assert (await drains(plane).cordon("agent-1", drain_for=timedelta(days=1))).drain_deadline == hold.drain_deadline
    assert (await create(plane, "new")).agent_id == "agent-2"

    assert await plane.sweeper.sweep() >= 1
    moved = await plane.kernel.get_session(idle)
    assert not moved.runtime_available and moved.agent_id == "agent-1" and moved.state is SessionState.READY
    assert "destroy_runtime" in await commands_for(plane, idle, "agent-1")
    lost = [e for e in await plane.journal.read(idle, 0, 1000) if e.kind is EventKind.RUNTIME_LOST]
    assert "agent-1 is being drained" in lost[-1].payload["reason"]
    # The busy one's turn goes on where it is.
    still = await plane.kernel.get_session(busy)
    assert still.runtime_available and still.state is SessionState.RUNNING and still.agent_id == "agent-1"

    # The idle session's next message places it on agent-2, which resumes the conversation.
    turn = await plane.conversation.send_message(SendMessage(idle, "i1", "where am I?"))
    placed = await plane.kernel.get_session(idle)
    assert placed.agent_id == "agent-2"
    assert await commands_for(plane, idle, "agent-2") == ["start_runtime", "deliver_input"]
    assert await deliveries(plane, idle) == [turn.turn_id]

    # The busy session moves once its turn ends; a second sweep (another replica's) moves nothing twice.
    await finish_turn(plane, busy, busy_turn.turn_id)
    await asyncio.gather(plane.sweeper.sweep(), drains(plane).sweep())
    assert (await commands_for(plane, busy, "agent-1")).count("destroy_runtime") == 1
    assert not (await plane.kernel.get_session(busy)).runtime_available


async def test_past_its_deadline_a_drain_interrupts_running_turns_then_moves_them(plane) -> None:
    await plane.connect_agent("agent-1", capacity=5)
    busy = await ready(plane, "busy")
    turn = await plane.conversation.send_message(SendMessage(busy, "b1", "never ends"))
    await plane.connect_agent("agent-2", capacity=5)
    await drains(plane).cordon("agent-1", drain_for=timedelta(0))

    await plane.sweeper.sweep()
    assert "interrupt_turn" in await commands_for(plane, busy, "agent-1")
    events = await plane.journal.read(busy, 0, 1000)
    interrupted = [e for e in events if e.kind is EventKind.TURN_INTERRUPTED and e.turn_id == turn.turn_id]
    assert "drain's deadline passed" in interrupted[0].payload["reason"]
    await plane.sweeper.sweep()
    assert not (await plane.kernel.get_session(busy)).runtime_available
    await plane.conversation.send_message(SendMessage(busy, "b2", "again"))
    assert (await plane.kernel.get_session(busy)).agent_id == "agent-2"


async def test_the_last_agent_drained_fails_the_next_message_saying_so(plane) -> None:
    await plane.connect_agent("agent-1", capacity=5)
    idle = await ready(plane, "idle")
    await drains(plane).cordon("agent-1", drain_for=timedelta(minutes=1))
    await plane.sweeper.sweep()
    await plane.conversation.send_message(SendMessage(idle, "m1", "anyone?"))
    [reason] = await turn_failures(plane, idle)
    assert "cordoned or draining (1 agent)" in reason and "astrabox hosts uncordon" in reason


async def test_a_cordon_racing_placements_never_lets_one_through_after_it_commits(plane) -> None:
    await plane.connect_agent("agent-1", capacity=50)
    await plane.connect_agent("agent-2", capacity=50)

    async def place(i: int) -> str:
        try:
            return (await create(plane, f"race-{i}")).agent_id or ""
        except AgentsCordoned:
            return "refused"

    cordon = asyncio.create_task(drains(plane).cordon("agent-1"))
    placed = await asyncio.gather(*(place(i) for i in range(20)))
    hold = await cordon
    assert "refused" not in placed  # agent-2 was never cordoned
    # Every session on agent-1 was placed before the cordon committed.
    rows = await plane.pool.fetch("SELECT created_at FROM sessions WHERE agent_id = 'agent-1'")
    assert all(row["created_at"] <= hold.cordoned_at for row in rows)
    async with plane.pool.acquire() as conn:
        assert await store.agents.open_load(conn, "agent-1") is None


async def test_a_drained_agent_reconnecting_with_a_moved_session_does_not_take_it_back(plane) -> None:
    await plane.connect_agent("agent-1", capacity=5)
    idle = await ready(plane, "idle")
    await plane.connect_agent("agent-2", capacity=5)
    await drains(plane).cordon("agent-1", drain_for=timedelta(minutes=5))
    await plane.sweeper.sweep()
    # agent-1 restarts before it destroyed the runtime, and says it still holds it.
    await plane.connect_agent("agent-1", capacity=5)
    await plane.agents.mark_held_runtimes("agent-1", [idle])
    assert not (await plane.kernel.get_session(idle)).runtime_available
    await plane.conversation.send_message(SendMessage(idle, "m1", "hello"))
    assert (await plane.kernel.get_session(idle)).agent_id == "agent-2"
