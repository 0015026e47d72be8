"""Sub-agents end to end: agent files naming other agents as sub-agents, applied through AgentService,
sessions on the real bundled CLI in the local sandbox (separate processes, real PostgreSQL, the
offline model). The parent's model calls `mcp__subagents__<agent>`; the control plane runs the call
as a child session and answers the parent's call with the child's final text. Both journals are
complete and name each other; nesting deeper than `--subagent-max-depth` is refused; a child that
does not finish its turn gives the parent an error result; interrupting the parent interrupts the
child; a control-plane SIGKILL while the child runs does not lose the call."""

from __future__ import annotations

import json
import textwrap

import pytest

from astrabox import agent_files
from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from astrabox.render import render
from astrabox.sessionkernel.v1 import events_pb2, session_pb2
from tests.e2e.test_conversation_end_to_end import all_events, final_text, kind, new_session, turn_end, until

pytestmark = pytest.mark.e2e

AGENTS = textwrap.dedent(
    """\
    name: reviewer
    description: Reviews things
    system_prompt: {replace: "You are the reviewer."}
    ---
    name: lead
    description: Delegates
    subagents:
      - {agent: reviewer, description: Reviews what it is given}
    ---
    name: looper
    description: Calls itself
    subagents: [{agent: looper}]
    """
)


def call(agent: str, prompt: str) -> str:
    return f"tool: mcp__subagents__{agent} {json.dumps({'prompt': prompt})}"


async def _apply(client: AstraBoxClient) -> None:
    for agent in agent_files.parse(AGENTS):
        await client.agents.apply(agent.name, agent.spec)


def _one(events: list[events_pb2.SessionEvent], name: str) -> events_pb2.SessionEvent:
    [event] = [e for e in events if e.WhichOneof("payload") == name]
    return event


async def test_a_parent_calls_a_child_and_both_journals_are_complete_and_linked(client: AstraBoxClient, stack) -> None:
    await _apply(client)
    parent = await new_session(client, agent="lead")
    sent = await client.send_message(parent.session_id, call("reviewer", "report: setup"))
    events = await until(client, parent.session_id, sent.seq, turn_end(sent.turn_id))

    assert events[-1].WhichOneof("payload") == "turn_completed", events[-1]
    asked = _one(events, "interaction_requested").interaction_requested.interaction
    assert asked.kind == session_pb2.INTERACTION_KIND_SUBAGENT
    assert (asked.tool_name, json.loads(asked.input_json)) == ("reviewer", {"prompt": "report: setup"})
    started = _one(events, "subagent_started").subagent_started
    finished = _one(events, "subagent_finished").subagent_finished
    child_id = started.child_session_id
    assert (started.interaction_id, started.agent, started.agent_version) == (asked.interaction_id, "reviewer", 1)
    assert (finished.child_session_id, finished.is_error, finished.reason) == (child_id, False, "")
    answered = _one(events, "interaction_answered").interaction_answered
    assert answered.decision == "tool_result" and not answered.is_error
    assert answered.tool_result.startswith("System prompt: ") and "You are the reviewer." in answered.tool_result
    # The parent's model read the child's text as the tool's result.
    assert "mcp__subagents__reviewer returned: System prompt: " in final_text(events)
    assert "You are the reviewer." in final_text(events)

    child = await client.get_session(child_id)
    assert (child.parent.session_id, child.parent.interaction_id, child.parent.depth) == (
        parent.session_id,
        asked.interaction_id,
        1,
    )
    assert child.agent.name == "reviewer" and child.labels["astrabox.dev/parent-session"] == parent.session_id
    assert not (await client.get_session(parent.session_id)).HasField("parent")
    # The child's journal: its own session, its turn on the prompt, its text, its own usage.
    child_events = await all_events(client, child_id)
    assert _one(child_events, "user_message_accepted").user_message_accepted.text == "report: setup"
    assert final_text(child_events) == answered.tool_result
    assert child.usage.turns == 1
    # Its call answered, its runtime is stopped (files kept): its slot on the host is free again.
    await until(client, child_id, 0, kind("runtime_stopped"))
    assert (await client.get_session(child_id)).runtime_stopped
    listed = await client.list_sessions(label_selector=f"astrabox.dev/parent-session={parent.session_id}")
    assert [s.session_id for s in listed.sessions] == [child_id]

    # `session show`/watch render the call with the child's id, in words.
    lines = [line for e in await all_events(client, parent.session_id) for line in render(e)]
    assert any("sub-agent reviewer" in line and child_id in line for line in lines), lines
    assert any(f"sub-agent session {child_id} answered: System prompt" in line for line in lines), lines
    assert not [line for line in lines if "EVENT_KIND" in line]


async def test_nesting_deeper_than_the_limit_is_refused_with_an_error_result(stacks) -> None:
    stack = stacks(controlplane_args=("--subagent-max-depth", "1"))
    async with AstraBoxClient.connect(stack.address) as client:
        await _apply(client)
        parent = await new_session(client, agent="looper")
        # The child (depth 1) calls looper again: depth 2 is past the limit.
        sent = await client.send_message(parent.session_id, call("looper", call("looper", "report: setup")))
        events = await until(client, parent.session_id, sent.seq, turn_end(sent.turn_id))

        assert events[-1].WhichOneof("payload") == "turn_completed", events[-1]
        child_id = _one(events, "subagent_started").subagent_started.child_session_id
        child_events = await all_events(client, child_id)
        refused = _one(child_events, "subagent_finished").subagent_finished
        assert (refused.child_session_id, refused.is_error, refused.reason) == ("", True, "SUBAGENT_DEPTH_EXCEEDED")
        assert not [e for e in child_events if kind("subagent_started")(e)]  # no grandchild
        assert "nest at most 1 deep" in final_text(child_events)
        # The child's text (its refusal) is the parent's result.
        assert "nest at most 1 deep" in final_text(events)
        assert not _one(events, "subagent_finished").subagent_finished.is_error


async def test_a_child_whose_turn_is_interrupted_gives_the_parent_an_error_result(
    client: AstraBoxClient, stack
) -> None:
    await _apply(client)
    parent = await new_session(client, agent="lead")
    sent = await client.send_message(parent.session_id, call("reviewer", "sleep: 120"))
    started = await until(client, parent.session_id, sent.seq, kind("subagent_started"))
    child_id = started[-1].subagent_started.child_session_id
    await until(client, child_id, 0, lambda e: kind("engine_message")(e) and "Bash" in e.engine_message.payload_json)

    pending = (await client.get_session(parent.session_id)).pending_interaction
    assert pending.kind == session_pb2.INTERACTION_KIND_SUBAGENT
    with pytest.raises(AstraBoxError) as refused:  # only the child's end answers it
        await client.respond_to_interaction(parent.session_id, pending.interaction_id, tool_result="forged")
    assert refused.value.reason == "INVALID_ARGUMENT" and "sub-agent call" in str(refused.value)

    await client.interrupt_turn(child_id)
    events = await until(client, parent.session_id, sent.seq, turn_end(sent.turn_id))

    assert events[-1].WhichOneof("payload") == "turn_completed", events[-1]
    finished = _one(events, "subagent_finished").subagent_finished
    assert (finished.child_session_id, finished.is_error, finished.reason) == (child_id, True, "SUBAGENT_FAILED")
    assert _one(events, "interaction_answered").interaction_answered.is_error
    assert "The sub-agent's turn was interrupted" in final_text(events)
    assert "returned" not in final_text(events)  # the model read it as the tool's error


async def test_interrupting_the_parent_interrupts_its_running_child(client: AstraBoxClient, stack) -> None:
    await _apply(client)
    parent = await new_session(client, agent="lead")
    sent = await client.send_message(parent.session_id, call("reviewer", "sleep: 120"))
    started = await until(client, parent.session_id, sent.seq, kind("subagent_started"))
    child_id = started[-1].subagent_started.child_session_id
    await until(client, child_id, 0, lambda e: kind("engine_message")(e) and "Bash" in e.engine_message.payload_json)

    await client.interrupt_turn(parent.session_id)

    child_events = await until(client, child_id, 0, kind("turn_interrupted"))
    assert any(kind("interrupt_requested")(e) for e in child_events)
    events = await until(client, parent.session_id, sent.seq, kind("subagent_finished"))
    finished = events[-1].subagent_finished
    assert (finished.child_session_id, finished.is_error, finished.reason) == (child_id, True, "PARENT_CALL_CLOSED")


async def test_a_call_outlives_a_controlplane_sigkill_while_its_child_runs(client: AstraBoxClient, stack) -> None:
    await _apply(client)
    parent = await new_session(client, agent="lead")
    sent = await client.send_message(parent.session_id, call("reviewer", "sleep: 8"))
    started = await until(client, parent.session_id, sent.seq, kind("subagent_started"))
    child_id = started[-1].subagent_started.child_session_id

    stack.restart_controlplane()

    events = await until(client, parent.session_id, sent.seq, turn_end(sent.turn_id))
    assert events[-1].WhichOneof("payload") == "turn_completed", events[-1]
    finished = _one(events, "subagent_finished").subagent_finished
    assert (finished.child_session_id, finished.is_error) == (child_id, False)
    assert "slept" in final_text(events)


async def test_archiving_the_parent_archives_its_running_child(client: AstraBoxClient, stack) -> None:
    await _apply(client)
    parent = await new_session(client, agent="lead")
    sent = await client.send_message(parent.session_id, call("reviewer", "sleep: 120"))
    started = await until(client, parent.session_id, sent.seq, kind("subagent_started"))
    child_id = started[-1].subagent_started.child_session_id

    await client.archive_session(parent.session_id)

    await until(client, child_id, 0, kind("session_archived"))
    assert (await client.get_session(child_id)).state == session_pb2.SESSION_STATE_ARCHIVED
    events = await until(client, parent.session_id, sent.seq, kind("subagent_finished"))
    assert events[-1].subagent_finished.reason == "PARENT_CALL_CLOSED"


async def test_an_agent_that_cannot_start_or_a_child_past_the_deadline_is_an_error_result(stacks) -> None:
    stack = stacks(controlplane_args=("--subagent-deadline", "4"))
    async with AstraBoxClient.connect(stack.address) as client:
        await _apply(client)
        [caller] = agent_files.parse("name: caller\nsubagents: [{agent: ghost}, {agent: reviewer}]\n")
        await client.agents.apply(caller.name, caller.spec)
        parent = await new_session(client, agent="caller")

        sent = await client.send_message(parent.session_id, call("ghost", "hello"))
        events = await until(client, parent.session_id, sent.seq, turn_end(sent.turn_id))
        finished = _one(events, "subagent_finished").subagent_finished
        assert (finished.child_session_id, finished.is_error, finished.reason) == ("", True, "SUBAGENT_NOT_STARTED")
        assert "could not be started" in final_text(events) and "ghost" in final_text(events)

        sent = await client.send_message(parent.session_id, call("reviewer", "sleep: 120"))
        events = await until(client, parent.session_id, sent.seq, turn_end(sent.turn_id))
        finished = _one(events, "subagent_finished").subagent_finished
        assert (finished.is_error, finished.reason) == (True, "SUBAGENT_DEADLINE_EXCEEDED")
        assert "did not finish within" in final_text(events)
        await until(client, finished.child_session_id, 0, kind("turn_interrupted"))  # the child was stopped
