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
        render(Event.from_proto(result)) == render(result) == ["[   9] ● result: success after 2 model turns, $0.5000"]
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
