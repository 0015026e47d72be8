"""Warm engines end to end: the agent's warm pool starts the real Claude Code CLI in each ready
sandbox, and a new session adopts it rather than starting one; the engine then takes the
session's own permission mode (it was started with the default, bypassPermissions), so a
session that asked for "default" gets its tool approvals, and the file appears only once
approved. Real processes, the real bundled CLI in the local sandbox, the offline model."""

from __future__ import annotations

import asyncio

import pytest

from astrabox.client import AstraBoxClient
from tests.e2e.test_conversation_end_to_end import TIMEOUT, all_events, kind, new_session, turn_end, until
from tests.support.stack import Stack, StartStack

pytestmark = pytest.mark.e2e


@pytest.fixture
def pooled_stack(stacks: StartStack) -> Stack:
    return stacks(args=("--warm-pool", "1"))


def phases(events) -> list[str]:
    return [e.startup_phase.phase for e in events if e.WhichOneof("payload") == "startup_phase"]


async def pool_ready(stack: Stack, count: int) -> None:
    """Until the agent has logged `count` sandboxes (each with its engine) made ready."""
    async with asyncio.timeout(TIMEOUT):
        while sum("pool_sandbox_ready" in line for line in stack.agent._lines) < count:
            await asyncio.sleep(0.05)


async def test_a_session_adopts_the_pools_running_cli_and_gets_its_own_permission_mode(pooled_stack: Stack) -> None:
    await pool_ready(pooled_stack, 1)
    async with AstraBoxClient.connect(pooled_stack.address) as client:
        session = await new_session(client, permission_mode="default")
        sid = session.session_id
        events = await all_events(client, sid)
        assert phases(events)[-3:] == ["sandbox_claimed", "engine_adopted", "ready"]
        workspace = pooled_stack.host_workspace(events)
        assert workspace.name == "workspace" and sid in str(workspace)

        sent = await client.send_message(sid, "run: touch adopted.txt")
        asked = await until(client, sid, sent.seq, kind("interaction_requested"))
        assert asked[-1].interaction_requested.interaction.tool_name == "Bash"
        assert not (workspace / "adopted.txt").exists()
        await client.respond_to_interaction(sid, asked[-1].interaction_requested.interaction.interaction_id, allow=True)
        done = await until(client, sid, asked[-1].seq, turn_end(sent.turn_id))
        assert done[-1].WhichOneof("payload") == "turn_completed"
        assert (workspace / "adopted.txt").exists()

        # The pool refills (with a new engine) and the next session, in the default mode, adopts it
        # too and runs its tool without asking.
        await pool_ready(pooled_stack, 2)
        other = await new_session(client)
        other_events = await all_events(client, other.session_id)
        assert phases(other_events)[-3:] == ["sandbox_claimed", "engine_adopted", "ready"]
        sent = await client.send_message(other.session_id, "run: touch quietly.txt")
        done = await until(client, other.session_id, sent.seq, turn_end(sent.turn_id))
        assert done[-1].WhichOneof("payload") == "turn_completed"
        assert not any(e.WhichOneof("payload") == "interaction_requested" for e in done)
        assert (pooled_stack.host_workspace(other_events) / "quietly.txt").exists() and not (
            workspace / "quietly.txt"
        ).exists()
