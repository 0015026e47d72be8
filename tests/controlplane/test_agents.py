"""Agent leases: a lapsed lease makes its sessions' runtimes unavailable and
settles their running turn; a reconnecting agent that still holds them makes
them available again."""

from __future__ import annotations

from datetime import timedelta

from controlplane.agent_definitions.definitions import AgentDefinitions
from controlplane.agents import AgentHello, Agents
from controlplane.conversation import SendMessage
from controlplane.journal import EventKind
from controlplane.kernel import CreateSession, SessionKernel
from controlplane.page_tokens import PageTokens
from controlplane.session import SessionState
from controlplane.turns import Turns
from tests.controlplane.conftest import CLAUDE_CODE


async def test_lapsed_lease_loses_the_runtime_and_fails_the_running_turn(plane):
    agents = Agents(plane.pool, timedelta(seconds=30))
    tokens = PageTokens(b"key")
    definitions = AgentDefinitions(plane.pool, agents, tokens)
    kernel = SessionKernel(plane.pool, plane.journal, agents, Turns(agents), plane.live, tokens, definitions)
    hello = AgentHello("agent-1", "i1", ["local"], [CLAUDE_CODE], 4, {})
    await agents.register(hello)
    session = await kernel.create_session(CreateSession(request_id="lease", project_id=plane.project_id))
    await plane.runtime_started(session.session_id)
    accepted = await plane.conversation.send_message(SendMessage(session.session_id, "m1", "hi"))
    assert (await kernel.get_session(session.session_id)).runtime_available

    assert await plane.sweeper.sweep() == 0  # the lease is still live
    await plane.pool.execute("UPDATE agents SET lease_expires_at = now() - interval '1 s'")  # it lapses
    assert await plane.sweeper.sweep() == 1
    after = await kernel.get_session(session.session_id)
    assert not after.runtime_available
    assert after.state is SessionState.READY and "lease lapsed" in after.failure_reason
    kinds = [(e.kind, e.turn_id) for e in await plane.journal.read(session.session_id, 0, 100)]
    assert kinds[-2:] == [(EventKind.RUNTIME_LOST, ""), (EventKind.TURN_FAILED, accepted.turn_id)]
    assert await agents.pick_for("claude_code", plane.project_id) is None  # nowhere to place new sessions

    lease = await agents.register(hello)
    assert lease.generation == 2
    await agents.mark_held_runtimes("agent-1", [session.session_id])
    assert (await kernel.get_session(session.session_id)).runtime_available
