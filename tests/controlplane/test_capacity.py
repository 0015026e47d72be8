"""Capacity counts live runtimes: an agent's slots are held by sessions creating, running a turn or
ready with their runtime up, and freed by archiving, deleting, a failed start, an idle stop and a lost
runtime. A full fleet answers RESOURCE_EXHAUSTED CAPACITY_EXHAUSTED; NO_AGENT_AVAILABLE only when no
live agent runs the engine. Placing again and restarting a stopped runtime take a slot too."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import grpc
import pytest

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as pb
from controlplane import quotas, store
from controlplane.agent_definitions.definitions import AgentDefinitions
from controlplane.agents import Agents
from controlplane.conversation import SendMessage
from controlplane.database import create_pool
from controlplane.errors import CapacityExhausted, QuotaExceeded
from controlplane.identity import store as identity_store
from controlplane.journal import EventKind, Journal
from controlplane.kernel import CreateSession, SessionKernel
from controlplane.live import LiveTail
from controlplane.page_tokens import PageTokens
from controlplane.session import SessionRecord, SessionState
from controlplane.turns import Turns
from tests.controlplane.conftest import Plane
from tests.controlplane.test_conversation import finish_turn
from tests.controlplane.test_session_kernel_service import api  # noqa: F401 - fixture


async def create(plane: Plane, request_id: str, project_id: uuid.UUID | None = None) -> SessionRecord:
    return await plane.kernel.create_session(CreateSession(request_id, project_id or plane.project_id))


async def refused(plane: Plane, request_id: str) -> CapacityExhausted:
    with pytest.raises(CapacityExhausted) as full:
        await create(plane, request_id)
    return full.value


async def ready(plane: Plane, request_id: str, agent_id: str = "agent-1") -> str:
    session = await create(plane, request_id)
    assert session.agent_id == agent_id
    await plane.report(
        session.session_id, agent_id=agent_id, runtime_started=runner_pb2.RuntimeStarted(sandbox_id="sb")
    )
    return session.session_id


async def stop_idle(plane: Plane, session_id: str, agent_id: str = "agent-1") -> None:
    """What the agent reports once it stopped an idle session's runtime."""
    await plane.report(
        session_id, agent_id=agent_id, runtime_stopped=runner_pb2.RuntimeStopped(reason="idle", sandbox_id="sb")
    )


async def turn_failures(plane: Plane, session_id: str) -> list[str]:
    return [
        e.payload["reason"] for e in await plane.journal.read(session_id, 0, 1000) if e.kind is EventKind.TURN_FAILED
    ]


async def deliveries(plane: Plane, session_id: str) -> list[str]:
    rows = await plane.pool.fetch("SELECT body FROM agent_commands WHERE session_id = $1", session_id)
    commands = [runner_pb2.Command.FromString(r["body"]) for r in rows]
    return [c.deliver_input.turn_id for c in commands if c.HasField("deliver_input")]


async def test_only_sessions_whose_runtime_is_live_hold_a_slot(plane) -> None:
    await plane.connect_agent(capacity=3)
    creating = await create(plane, "creating")
    idle = await ready(plane, "idle")
    busy = await ready(plane, "busy")
    await plane.conversation.send_message(SendMessage(busy, "m1", "hi"))
    full = await refused(plane, "fourth")
    assert full.metadata == {"agents": "1", "capacity": "3", "live": "3"}

    await plane.kernel.archive_session(creating.session_id, "")  # archived while it was creating
    failing = await create(plane, "fails-to-start")
    await refused(plane, "fourth")
    await plane.report(failing.session_id, runtime_start_failed=runner_pb2.RuntimeStartFailed(reason="no disk"))
    assert (await plane.kernel.get_session(failing.session_id)).state is SessionState.FAILED
    deleted = await create(plane, "deleted")
    await refused(plane, "fourth")
    await plane.kernel.delete_session(deleted.session_id, "")
    await create(plane, "after-delete")
    await refused(plane, "fourth")
    await stop_idle(plane, idle)
    await create(plane, "after-idle-stop")
    await refused(plane, "fourth")
    # A turn's end leaves its session ready with its runtime up: still a slot.
    [turn_id] = await deliveries(plane, busy)
    await finish_turn(plane, busy, turn_id)
    await refused(plane, "fourth")


async def test_a_full_fleet_answers_resource_exhausted_and_changes_nothing(api, plane) -> None:
    await plane.connect_agent("agent-1", capacity=1)
    await plane.connect_agent("agent-2", capacity=2)
    for i in range(3):
        await create(plane, f"s{i}")
    sessions = await plane.pool.fetchval("SELECT count(*) FROM sessions")
    commands = await plane.pool.fetchval("SELECT count(*) FROM agent_commands")

    _, code, details, info = await api.unary("CreateSession", pb.CreateSessionRequest(request_id="one-too-many"))
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert info.reason == "CAPACITY_EXHAUSTED" and info.domain == "astrabox.dev"
    assert dict(info.metadata) == {"agents": "2", "capacity": "3", "live": "3"}
    assert "is full (2 agents, 3 of 3 live runtimes)" in details
    assert "archive or delete sessions" in details and "--capacity" in details
    assert "start one with `astrabox agent`" not in details
    assert await plane.pool.fetchval("SELECT count(*) FROM sessions") == sessions
    assert await plane.pool.fetchval("SELECT count(*) FROM agent_commands") == commands

    # A retry of a create that was placed returns its session, however full the fleet is.
    _, code, _, _ = await api.unary("CreateSession", pb.CreateSessionRequest(request_id="s0"))
    assert code is grpc.StatusCode.OK


async def test_a_project_over_its_quota_hears_about_its_quota_before_the_fleet(plane) -> None:
    await plane.connect_agent("agent-1", capacity=1)
    await quotas.put(plane.pool, plane.project_id, {"live_sessions": 1}, "test")
    await create(plane, "s0")
    with pytest.raises(QuotaExceeded):
        await create(plane, "s1")


async def test_no_live_agent_is_still_no_agent_available(api, plane) -> None:
    await plane.connect_agent("agent-1", capacity=1)
    await create(plane, "s0")
    async with plane.pool.acquire() as conn:
        await store.agents.expire(conn, "agent-1")  # its lease ended: a full agent no longer counts

    _, code, details, info = await api.unary("CreateSession", pb.CreateSessionRequest(request_id="s1"))
    assert (code, info.reason) == (grpc.StatusCode.UNAVAILABLE, "NO_AGENT_AVAILABLE")
    assert "start one with `astrabox agent`" in details


async def test_a_stopped_session_restarts_on_its_agent_only_with_a_free_slot_there(plane) -> None:
    await plane.connect_agent("agent-1", capacity=1)
    stopped = await ready(plane, "stopped")
    await stop_idle(plane, stopped)
    other = await ready(plane, "other")  # the slot the stop freed
    await plane.connect_agent("agent-2", capacity=5)  # room elsewhere, but not where its files are

    refused_turn = await plane.conversation.send_message(SendMessage(stopped, "m1", "hello again"))
    [reason] = await turn_failures(plane, stopped)
    assert "stopped while idle" in reason and "agent-1" in reason and "is full (1 of 1 live runtimes)" in reason
    session = await plane.kernel.get_session(stopped)
    assert session.runtime_stopped and session.state is SessionState.READY and session.agent_id == "agent-1"
    assert refused_turn.turn_id not in await deliveries(plane, stopped)

    await plane.kernel.archive_session(other, "")
    accepted = await plane.conversation.send_message(SendMessage(stopped, "m2", "hello again"))
    assert await deliveries(plane, stopped) == [accepted.turn_id]
    session = await plane.kernel.get_session(stopped)
    assert session.state is SessionState.RUNNING and session.agent_id == "agent-1"
    # Restarting, it holds the slot: nothing else fits on agent-1 (agent-2 takes the next session).
    assert (await create(plane, "next")).agent_id == "agent-2"


async def test_a_session_placed_again_fails_its_turn_saying_whether_agents_are_full_or_gone(plane) -> None:
    await plane.connect_agent("agent-1", capacity=5)
    moving = await ready(plane, "moving")
    async with plane.pool.acquire() as conn:
        await store.agents.expire(conn, "agent-1")
    await plane.sweeper.sweep()
    assert not (await plane.kernel.get_session(moving)).runtime_available
    await plane.connect_agent("agent-2", capacity=1)
    await ready(plane, "occupant", agent_id="agent-2")

    await plane.conversation.send_message(SendMessage(moving, "m1", "where now?"))
    [full] = await turn_failures(plane, moving)
    assert "every connected data-plane agent that can run claude_code is full (1 agent, 1 of 1" in full

    async with plane.pool.acquire() as conn:
        await store.agents.expire(conn, "agent-2")
    await plane.conversation.send_message(SendMessage(moving, "m2", "anyone?"))
    [_, none] = await turn_failures(plane, moving)
    assert "no connected data-plane agent can run claude_code; start one with `astrabox agent`" in none
    assert "full" not in none


async def test_placements_racing_on_two_replicas_never_exceed_an_agents_capacity(plane, database_url) -> None:
    """Creates of different projects do not wait for each other's quota lock: only the agent's row
    keeps them from both taking its last slot."""
    await plane.connect_agent("agent-1", capacity=5)
    projects = [(await identity_store.insert_project(plane.pool, f"p{i}")).project_id for i in range(6)]
    other_pool = await create_pool(database_url, min_size=1, max_size=8)
    try:
        live = LiveTail()
        agents = Agents(other_pool, timedelta(seconds=30))
        tokens = PageTokens(b"key")
        definitions = AgentDefinitions(other_pool, agents, tokens)
        replica = SessionKernel(other_pool, Journal(other_pool, live), agents, Turns(agents), live, tokens, definitions)
        kernels = [plane.kernel, replica]
        outcomes = await asyncio.gather(
            *(
                kernels[i % 2].create_session(CreateSession(f"race-{i}", projects[i % len(projects)]))
                for i in range(24)
            ),
            return_exceptions=True,
        )
    finally:
        await other_pool.close()
    made = [o for o in outcomes if isinstance(o, SessionRecord)]
    failed = [o for o in outcomes if not isinstance(o, SessionRecord)]
    assert len(made) == 5
    assert all(isinstance(f, CapacityExhausted) for f in failed), failed
    with pytest.raises(CapacityExhausted):
        await create(plane, "after-the-race")


async def test_placement_counts_from_the_index_of_occupying_sessions(plane) -> None:
    """With thousands of released sessions on an agent, its count reads only the live ones (the
    migration's index predicate is the one placement counts with)."""
    await plane.connect_agent("agent-1", capacity=10)
    await plane.pool.execute(
        "INSERT INTO sessions (session_id, project_id, request_id, request_fingerprint, engine, permission_mode,"
        " model, labels, state, agent_id, created_at) SELECT gen_random_uuid(), $1, 'old-' || i, '', 'claude_code',"
        " 'default', '', '{}', 'archived', 'agent-1', now() - interval '1 day'"
        " FROM generate_series(1, 5000) AS i",
        plane.project_id,
    )
    await plane.pool.execute("ANALYZE sessions")
    plan = await plane.pool.fetch(
        "EXPLAIN SELECT count(*) FROM sessions s WHERE s.agent_id = 'agent-1' AND " + store.agents.OCCUPYING
    )
    assert "sessions_occupying" in "\n".join(r[0] for r in plan)
    assert (await create(plane, "new")).agent_id == "agent-1"
