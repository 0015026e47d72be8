"""Warm engines end to end: the agent's warm pool starts the real Claude Code CLI in each ready
sandbox, and a new session adopts it rather than starting one; the engine then takes the
session's own permission mode (it was started with the default, bypassPermissions), so a
session that asked for "default" gets its tool approvals, and the file appears only once
approved. Real processes, the real bundled CLI in the local sandbox, the offline model."""

from __future__ import annotations

import asyncio
import json

import pytest

from astrabox.agents.v1 import agent_pb2
from astrabox.client import AstraBoxClient
from astrabox.memory.v1 import memory_service_pb2 as memory_pb2
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


REVIEWER = agent_pb2.AgentSpec(
    system_prompt=agent_pb2.SystemPrompt(append="You review code."),
    skills=[
        agent_pb2.Skill(
            name="checklist",
            files=[
                agent_pb2.SkillFile(path="SKILL.md", content=b"---\nname: checklist\ndescription: c\n---\nCheck.\n")
            ],
        )
    ],
)


async def agent_pool_ready(stack: Stack, count: int) -> None:
    """Until the agent has logged `count` sandboxes made ready with an agent version's engine."""
    async with asyncio.timeout(TIMEOUT):
        while sum("pool_sandbox_ready" in line and _agent_engine(line) for line in stack.agent._lines) < count:
            await asyncio.sleep(0.05)


def _agent_engine(line: str) -> bool:
    return "agent_engine=True" in line or '"agent_engine": true' in line


async def test_a_later_session_of_an_agent_version_adopts_an_engine_started_for_it_and_another_projects_never(
    stacks: StartStack,
) -> None:
    stack = stacks(args=("--warm-pool", "3"))
    await pool_ready(stack, 3)
    async with AstraBoxClient.connect(stack.address) as client:
        await client.agents.apply("reviewer", REVIEWER)
        first = await new_session(client, agent="reviewer")
        assert phases(await all_events(client, first.session_id))[-2:] == ["engine_connected", "ready"]
        await agent_pool_ready(stack, 1)

        # Another project with the same definition under the same name: its own engine, always.
        team = await client.admin.create_project("team-b")
        key = await client.admin.create_api_key("b-dev", role="developer", project_id=team.project_id)
        async with AstraBoxClient.connect(stack.address, api_key=key.secret) as other_project:
            await other_project.agents.apply("reviewer", REVIEWER)
            theirs = await new_session(other_project, agent="reviewer")
            assert phases(await all_events(other_project, theirs.session_id))[-2:] == ["engine_connected", "ready"]

        second = await new_session(client, agent="reviewer")
        events = await all_events(client, second.session_id)
        assert phases(events)[-3:] == ["sandbox_claimed", "engine_adopted", "ready"]
        sent = await client.send_message(second.session_id, "Please create hello.txt")
        done = await until(client, second.session_id, sent.seq, turn_end(sent.turn_id))
        assert done[-1].WhichOneof("payload") == "turn_completed"
        init = next(
            json.loads(e.engine_message.payload_json)
            for e in done
            if e.WhichOneof("payload") == "engine_message" and e.engine_message.type_name == "SystemMessage"
        )
        assert "checklist" in init["data"]["skills"]
        assert (stack.host_workspace(events) / "hello.txt").exists()


async def test_a_session_with_memory_adopts_an_engine_started_for_its_agent_and_reads_its_memory(
    stacks: StartStack,
) -> None:
    stack = stacks(args=("--warm-pool", "2"))
    await pool_ready(stack, 2)
    async with AstraBoxClient.connect(stack.address) as client:
        await client.memory.create("team-notes")
        await client.memory.write("team-notes", "facts.md", "the build needs make 4.3\n")
        remembers = agent_pb2.AgentSpec()
        remembers.CopyFrom(REVIEWER)
        remembers.memory.add(store="team-notes", mode=memory_pb2.MEMORY_MODE_READ_WRITE)
        await client.agents.apply("remembers", remembers)
        first = await new_session(client, agent="remembers")
        assert phases(await all_events(client, first.session_id))[-2:] == ["engine_connected", "ready"]
        await agent_pool_ready(stack, 1)

        second = await new_session(client, agent="remembers")
        assert phases(await all_events(client, second.session_id))[-3:] == [
            "sandbox_claimed",
            "engine_adopted",
            "ready",
        ]
        sent = await client.send_message(second.session_id, "run: cat /home/agent/memory/team-notes/facts.md")
        done = await until(client, second.session_id, sent.seq, turn_end(sent.turn_id))
        assert done[-1].WhichOneof("payload") == "turn_completed"
        assert any(
            "the build needs make 4.3" in e.engine_message.payload_json for e in done if e.HasField("engine_message")
        )
