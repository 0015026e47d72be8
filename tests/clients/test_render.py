"""The CLI's readable rendering of events a user sees in `astrabox run`."""

from __future__ import annotations

import json

from astrabox.events import Event
from astrabox.render import render
from astrabox.sessionkernel.v1 import events_pb2, session_pb2


def test_every_event_kind_renders_without_error_and_names_what_happened():
    for name, number in events_pb2.EventKind.items():
        if number == 0:
            continue
        event = events_pb2.SessionEvent(seq=7, kind=number)
        getattr(event, name.removeprefix("EVENT_KIND_").lower()).SetInParent()
        for line in render(event):
            assert line.startswith("[   7] ")
            assert "EVENT_KIND" not in line  # as a person reads it, not the enum's name


def test_tool_use_questions_and_results_are_readable():
    tool = events_pb2.SessionEvent(
        seq=1,
        engine_message=events_pb2.EngineMessage(
            type_name="AssistantMessage",
            payload_json=json.dumps(
                {"content": [{"type_name": "ToolUseBlock", "name": "Bash", "input": {"command": "ls"}}]}
            ),
        ),
    )
    assert render(tool) == ["[   1] ⚙ Bash: ls"]
    question = events_pb2.SessionEvent(
        seq=2,
        interaction_requested=events_pb2.InteractionRequested(
            interaction=session_pb2.Interaction(
                questions=[session_pb2.Question(question="Color?", options=["red", "blue"])]
            )
        ),
    )
    assert render(question) == ["[   2] ? Color? [red | blue]"]
    result = events_pb2.SessionEvent(
        seq=3,
        engine_message=events_pb2.EngineMessage(
            type_name="UserMessage",
            payload_json=json.dumps(
                {"content": [{"type_name": "ToolResultBlock", "content": "a\nb", "is_error": False}]}
            ),
        ),
    )
    assert render(result) == ["[   3]   ⎿ tool result:\n    a\n    b"]


def test_engine_messages_it_cannot_read_render_as_nothing_rather_than_an_error():
    for type_name, payload in [
        ("AssistantMessage", "{not json"),
        ("UserMessage", '{"content": 7}'),
        ("ResultMessage", "[]"),
        ("RateLimitEvent", '{"rate_limit_info": {}}'),
    ]:
        event = events_pb2.SessionEvent(
            seq=4, engine_message=events_pb2.EngineMessage(type_name=type_name, payload_json=payload)
        )
        assert render(event) == []


def test_a_typed_event_renders_as_its_protobuf_does():
    result = events_pb2.SessionEvent(
        seq=9,
        engine_message=events_pb2.EngineMessage(
            type_name="ResultMessage",
            payload_json=json.dumps({"subtype": "success", "num_turns": 2, "total_cost_usd": 0.5}),
        ),
    )
    assert (
        render(Event.from_proto(result))
        == render(result)
        == ["[   9] ● result: success after 2 model turns · conversation so far $0.5000"]
    )


def test_an_mcp_server_left_out_is_named_with_why():
    event = events_pb2.SessionEvent(
        seq=5,
        mcp_server_unavailable=events_pb2.McpServerUnavailable(
            server="tickets", reason="http://127.0.0.1:9/mcp refused the credential (HTTP 401)"
        ),
    )
    assert render(event) == [
        "[   5] ✗ MCP server tickets unavailable, going on without it:"
        " http://127.0.0.1:9/mcp refused the credential (HTTP 401)"
    ]


def test_a_refused_network_request_is_one_line_with_why_and_how_many_more():
    event = events_pb2.SessionEvent(
        seq=6,
        network_request_refused=events_pb2.NetworkRequestRefused(
            host="example.com",
            port=443,
            reason="example.com:443 is refused: not in this environment's allowed_hosts",
            suppressed=7,
        ),
    )
    assert render(event) == [
        "[   6] ✗ network request to example.com:443 refused:"
        " example.com:443 is refused: not in this environment's allowed_hosts (and 7 more refused)"
    ]


def test_a_tool_approval_shows_the_calls_main_input_and_a_custom_tool_call_is_no_permission_prompt():
    approval = session_pb2.Interaction(
        interaction_id="i-1",
        kind=session_pb2.INTERACTION_KIND_TOOL_APPROVAL,
        tool_name="Bash",
        input_json=json.dumps({"command": "npm test", "description": "run the tests"}),
    )
    asked = events_pb2.SessionEvent(seq=3, interaction_requested=events_pb2.InteractionRequested(interaction=approval))
    assert render(asked) == ["[   3] ? may Bash run: npm test  (approval i-1)"]
    custom = session_pb2.Interaction(
        interaction_id="i-2",
        kind=session_pb2.INTERACTION_KIND_CUSTOM_TOOL,
        tool_name="lookup_order",
        input_json='{"order_id": "A-7"}',
    )
    called = events_pb2.SessionEvent(seq=4, interaction_requested=events_pb2.InteractionRequested(interaction=custom))
    assert render(called) == [
        '[   4] ⚒ custom tool lookup_order called with {"order_id": "A-7"}:'
        " your client runs it and answers with its result (interaction i-2)"
    ]
    result = events_pb2.SessionEvent(
        seq=5,
        interaction_answered=events_pb2.InteractionAnswered(decision="tool_result", tool_result="A-7 left\nLyon"),
    )
    assert render(result) == ["[   5]   ↳ tool result sent: A-7 left"]


def test_grants_made_and_revoked_read_as_sentences():
    granted = events_pb2.SessionEvent(
        seq=8,
        tool_granted=events_pb2.ToolGranted(
            grant=session_pb2.ToolGrant(grant_id="g-1", tool_name="Bash", input_pattern="npm test*")
        ),
    )
    assert render(granted) == [
        "[   8] ● granted: Bash runs without asking, calls matching 'npm test*', for the rest of the session (grant g-1)"
    ]
    until = session_pb2.ToolGrant(grant_id="g-2", tool_name="Read")
    until.expire_time.FromSeconds(1_800_000_000)
    granted = events_pb2.SessionEvent(seq=9, tool_granted=events_pb2.ToolGranted(grant=until))
    assert render(granted) == [
        "[   9] ● granted: Read runs without asking, every call, until 2027-01-15 08:00 UTC (grant g-2)"
    ]
    revoked = events_pb2.SessionEvent(seq=10, tool_grant_revoked=events_pb2.ToolGrantRevoked(grant_id="g-1"))
    assert render(revoked) == ["[  10] ● grant g-1 revoked: its tool asks again"]


def test_a_turns_cost_is_labelled_as_the_turns():
    done = events_pb2.SessionEvent(
        seq=11,
        turn_completed=events_pb2.TurnCompleted(
            duration_ms=1500, usage=session_pb2.Usage(input_tokens=1000, output_tokens=20, cost_usd=0.25, turns=1)
        ),
    )
    assert render(done) == ["[  11] ✓ turn completed in 1.5 s · 1,000 in / 20 out tokens · this turn $0.2500"]


def test_a_late_result_after_a_settled_call_says_it_does_not_count():
    settled = events_pb2.SessionEvent(
        seq=4,
        tool_call_settled=events_pb2.ToolCallSettled(tool_name="Bash", reason="the agent was lost", is_error=True),
    )
    late = events_pb2.SessionEvent(
        seq=5,
        engine_message=events_pb2.EngineMessage(
            type_name="UserMessage",
            late=True,
            payload_json=json.dumps(
                {"content": [{"type_name": "ToolResultBlock", "content": "done", "is_error": False}]}
            ),
        ),
    )
    assert render(settled) == ["[   4]   ✗ tool result (Bash, no result): the agent was lost"]
    assert render(late) == ["[   5] (late, for the record: its turn had ended)   ⎿ tool result:\n    done"]


def test_a_sub_agent_call_names_its_child_session_and_how_it_ended():
    call = session_pb2.Interaction(
        interaction_id="i-3",
        kind=session_pb2.INTERACTION_KIND_SUBAGENT,
        tool_name="reviewer",
        input_json='{"prompt": "go"}',
    )
    asked = events_pb2.SessionEvent(seq=3, interaction_requested=events_pb2.InteractionRequested(interaction=call))
    assert render(asked) == [
        '[   3] ⇢ sub-agent reviewer called with {"prompt": "go"}: it runs as a child session (interaction i-3)'
    ]
    started = events_pb2.SessionEvent(
        seq=4,
        subagent_started=events_pb2.SubagentStarted(
            interaction_id="i-3", child_session_id="c-1", agent="reviewer", agent_version=2
        ),
    )
    assert render(started) == ["[   4] ⇢ sub-agent reviewer v2 runs as session c-1"]
    answered = events_pb2.SessionEvent(
        seq=5, subagent_finished=events_pb2.SubagentFinished(child_session_id="c-1", result_preview="LGTM\nmore")
    )
    assert render(answered) == ["[   5] ⇠ sub-agent session c-1 answered: LGTM"]
    refused = events_pb2.SessionEvent(
        seq=6,
        subagent_finished=events_pb2.SubagentFinished(
            is_error=True, reason="SUBAGENT_DEPTH_EXCEEDED", result_preview="nest at most 3 deep"
        ),
    )
    assert render(refused) == [
        "[   6] ✗ sub-agent call failed (SUBAGENT_DEPTH_EXCEEDED, no session): nest at most 3 deep"
    ]
