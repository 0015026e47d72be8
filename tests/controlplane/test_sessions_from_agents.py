"""Sessions started from agent definitions: CreateSession pins a version, the session shows and
journals the configuration it runs with, every StartRuntime carries it, and its limits hold
(turn_timeout interrupts an over-long turn)."""

from __future__ import annotations

import grpc
import pytest_asyncio
from google.protobuf import duration_pb2, json_format

from astrabox.agents.v1 import agent_pb2 as apb
from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from astrabox.sessionkernel.v1 import session_pb2
from controlplane.agent_definitions.definitions import AgentDefinitions
from controlplane.forwarding import read_cluster_secret
from controlplane.journal import EventKind
from controlplane.page_tokens import PageTokens
from tests.controlplane.test_conversation import api as api
from tests.controlplane.test_conversation import commands, finish_turn, ok, refused, session_of


def reviewer(prompt: str = "You review code.", timeout_s: int = 0) -> apb.AgentSpec:
    spec = apb.AgentSpec(
        description="Reviews pull requests",
        permission_mode="default",
        system_prompt=apb.SystemPrompt(append=prompt),
        tools=apb.Tools(
            enabled=["Bash", "Read"],
            rules=[apb.ToolRule(tool="Read", policy=apb.TOOL_POLICY_ALLOW)],
            default_policy=apb.TOOL_POLICY_ASK,
        ),
        limits=apb.Limits(max_turns=7),
    )
    if timeout_s:
        spec.limits.turn_timeout.CopyFrom(duration_pb2.Duration(seconds=timeout_s))
    return spec


@pytest_asyncio.fixture
async def definitions(plane) -> AgentDefinitions:
    await plane.connect_agent()
    return AgentDefinitions(
        plane.pool, plane.agents, PageTokens.from_cluster_secret(await read_cluster_secret(plane.pool))
    )


def starts(cmds: list[runner_pb2.Command]) -> list[runner_pb2.StartRuntime]:
    return [c.start_runtime for c in cmds if c.HasField("start_runtime")]


async def test_a_session_pins_its_agents_version_shows_and_journals_its_configuration(api, plane, definitions):
    agent, _ = await definitions.create(plane.project_id, "a1", "reviewer", reviewer())
    session = (await ok(api, "CreateSession", request_id="s1", agent="reviewer")).session
    assert (session.agent.agent_id, session.agent.name, session.agent.version) == (agent.agent_id, "reviewer", 1)
    expected = reviewer()
    expected.engine = "claude_code"
    assert session.config == expected
    assert (session.engine, session.permission_mode) == ("claude_code", "default")
    [start] = starts(await commands(plane, session.session_id))
    assert start.config == expected and start.permission_mode == "default"
    [created] = [e for e in await plane.journal.read(session.session_id, 0, 10) if e.kind is EventKind.SESSION_CREATED]
    assert created.payload["agent"] == {"agent_id": agent.agent_id, "name": "reviewer", "version": 1}
    assert json_format.ParseDict(created.payload["config"], apb.AgentSpec()) == expected
    listed = (await ok(api, "ListSessionEvents", session_id=session.session_id)).events[0]
    assert listed.session_created.agent.version == 1 and listed.session_created.config == expected


async def test_the_callers_own_fields_override_the_agents(api, plane, definitions):
    await definitions.create(plane.project_id, "a1", "reviewer", reviewer())
    session = (
        await ok(api, "CreateSession", request_id="s1", agent="reviewer", model="claude-x", permission_mode="plan")
    ).session
    assert (session.model, session.permission_mode) == ("claude-x", "plan")
    assert (session.config.model, session.config.permission_mode) == ("claude-x", "plan")
    assert session.config.system_prompt.append == "You review code."


async def test_a_running_session_keeps_its_version_and_a_new_one_gets_the_newest(api, plane, definitions):
    await definitions.create(plane.project_id, "a1", "reviewer", reviewer("first"))
    old = (await ok(api, "CreateSession", request_id="s1", agent="reviewer")).session
    await definitions.update(plane.project_id, "reviewer", reviewer("second"))
    new = (await ok(api, "CreateSession", request_id="s2", agent="reviewer")).session
    pinned = (await ok(api, "CreateSession", request_id="s3", agent="reviewer", agent_version=1)).session
    assert (await session_of(api, old.session_id)).config.system_prompt.append == "first"
    assert (new.agent.version, new.config.system_prompt.append) == (2, "second")
    assert (pinned.agent.version, pinned.config.system_prompt.append) == (1, "first")
    # A retry of the first create returns the session it made, still on version 1.
    again = (await ok(api, "CreateSession", request_id="s1", agent="reviewer")).session
    assert (again.session_id, again.agent.version) == (old.session_id, 1)


async def test_an_unknown_or_archived_agent_starts_nothing(api, plane, definitions):
    await definitions.create(plane.project_id, "a1", "reviewer", reviewer())
    code, reason, details = await refused(api, "CreateSession", request_id="s1", agent="nobody")
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "AGENT_NOT_FOUND") and "nobody" in details
    code, reason, _ = await refused(api, "CreateSession", request_id="s2", agent="reviewer", agent_version=9)
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "AGENT_VERSION_NOT_FOUND")
    code, reason, _ = await refused(api, "CreateSession", request_id="s3", agent_version=1)
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    await definitions.archive(plane.project_id, "reviewer")
    code, reason, _ = await refused(api, "CreateSession", request_id="s4", agent="reviewer")
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "AGENT_ARCHIVED")
    assert await plane.pool.fetchval("SELECT count(*) FROM sessions") == 0


async def test_a_session_without_an_agent_shows_its_engine_defaults(api, plane, definitions):
    session = (await ok(api, "CreateSession", request_id="s1", model="m1")).session
    assert not session.HasField("agent")
    assert session.config == apb.AgentSpec(engine="claude_code", permission_mode=session.permission_mode, model="m1")


async def test_a_session_placed_again_starts_with_the_same_configuration(api, plane, definitions):
    await definitions.create(plane.project_id, "a1", "reviewer", reviewer())
    sid = (await ok(api, "CreateSession", request_id="s1", agent="reviewer")).session.session_id
    await plane.runtime_started(sid)
    await definitions.update(plane.project_id, "reviewer", reviewer("changed since"))
    await plane.pool.execute("UPDATE agents SET lease_expires_at = now() - interval '1 s'")
    await plane.sweeper.sweep()
    await plane.connect_agent("agent-2")
    await ok(api, "SendMessage", session_id=sid, client_message_id="m", text="hello")
    first, second = starts(await commands(plane, sid))
    assert second.config == first.config and second.config.system_prompt.append == "You review code."


async def test_a_turn_longer_than_the_agents_turn_timeout_is_interrupted(api, plane, definitions):
    await definitions.create(plane.project_id, "a1", "slow", reviewer(timeout_s=60))
    sid = (await ok(api, "CreateSession", request_id="s1", agent="slow")).session.session_id
    await plane.runtime_started(sid)
    turn = (await ok(api, "SendMessage", session_id=sid, client_message_id="m", text="sleep: 600")).turn_id
    await plane.report(sid, turn, input_consumed=runner_pb2.InputConsumed())
    await plane.sweeper.sweep()
    assert (await session_of(api, sid)).state == session_pb2.SESSION_STATE_RUNNING  # within its time
    await plane.pool.execute("UPDATE turns SET dispatched_at = dispatched_at - interval '61 s'")
    await plane.sweeper.sweep()
    session = await session_of(api, sid)
    assert session.state == session_pb2.SESSION_STATE_READY and not session.current_turn_id
    [ended] = [e for e in await plane.journal.read(sid, 0, 100) if e.kind is EventKind.TURN_INTERRUPTED]
    assert ended.turn_id == turn and "turn_timeout of 60 s" in ended.payload["reason"]
    let_go = [c.interrupt_turn for c in await commands(plane, sid) if c.HasField("interrupt_turn")]
    assert [(i.turn_id, "turn_timeout" in i.settled_reason) for i in let_go] == [(turn, True)]
    # The next message runs as usual.
    turn2 = (await ok(api, "SendMessage", session_id=sid, client_message_id="m2", text="hi")).turn_id
    await plane.report(sid, turn2, input_consumed=runner_pb2.InputConsumed())
    await finish_turn(plane, sid, turn2)
    completed = [e.turn_id for e in await plane.journal.read(sid, 0, 100) if e.kind is EventKind.TURN_COMPLETED]
    assert completed == [turn2]


async def test_sessions_are_listed_by_their_agent_by_name_or_id_archived_too(api, plane, definitions):
    reviewer_agent, _ = await definitions.create(plane.project_id, "a1", "reviewer", reviewer())
    await definitions.create(plane.project_id, "a2", "writer", reviewer("You write."))
    mine = [(await ok(api, "CreateSession", request_id=f"r{i}", agent="reviewer")).session.session_id for i in range(3)]
    await ok(api, "CreateSession", request_id="w", agent="writer")
    await ok(api, "CreateSession", request_id="none")

    async def listed(agent: str) -> list[str]:
        ids, token = [], ""
        while True:
            page = await ok(api, "ListSessions", agent=agent, page_size=2, page_token=token)
            ids += [s.session_id for s in page.sessions]
            if not (token := page.next_page_token):
                return ids

    assert await listed("reviewer") == mine[::-1]
    assert await listed(reviewer_agent.agent_id) == mine[::-1]
    await definitions.archive(plane.project_id, "reviewer")
    assert await listed("reviewer") == mine[::-1]
    # A page token binds its agent.
    token = (await ok(api, "ListSessions", agent="reviewer", page_size=1)).next_page_token
    code, reason, _ = await refused(api, "ListSessions", agent="writer", page_size=1, page_token=token)
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "PAGE_TOKEN_FILTERS_CHANGED")
