"""Typed views of engine messages (astrabox.messages) on payloads recorded from real turns, and on
shapes no engine should send, which must come out as generic views rather than errors."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from astrabox.events import Event
from astrabox.messages import (
    AssistantMessage,
    InitMessage,
    OtherBlock,
    OtherMessage,
    ResultMessage,
    SystemMessage,
    TaskMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
    parse_message,
)
from astrabox.sessionkernel.v1 import events_pb2

TURNS: dict[str, list[dict[str, Any]]] = json.loads(
    (Path(__file__).parent / "data" / "offline_model_turns.json").read_text()
)["turns"]


def views(prompt: str) -> list[Any]:
    return [parse_message(m["type_name"], json.dumps(m["payload"])) for m in TURNS[prompt]]


def test_a_recorded_turn_reads_as_init_text_tool_use_tool_result_text_result() -> None:
    init, said, call, returned, answer, result = views("run: echo hi")

    assert isinstance(init, InitMessage)
    assert init.model == "claude-opus-5-5" and "Bash" in init.tools and init.cwd == "/workspace"
    assert isinstance(said, AssistantMessage) and said.text == "I'll run `echo hi`." and said.tool_uses == ()
    assert said.model == "claude-opus-5-5" and said.usage is not None and said.usage.input_tokens == 2691
    assert isinstance(call, AssistantMessage) and call.text == ""
    [tool_use] = call.tool_uses
    assert tool_use.name == "Bash" and tool_use.input["command"] == "echo hi"
    assert isinstance(returned, UserMessage)
    assert returned.tool_results == (ToolResultBlock(tool_use.id, "hi", False),)
    assert isinstance(answer, AssistantMessage) and answer.text == "The command `echo hi` printed:\nhi"
    assert isinstance(result, ResultMessage)
    assert (result.subtype, result.is_error, result.num_turns) == ("success", False, 2)
    assert result.result == answer.text
    assert result.usage == Usage(input_tokens=5471, output_tokens=67)
    assert result.total_cost_usd == pytest.approx(0.023224)
    assert result.engine_session_id == init.engine_session_id != ""
    assert result.payload["model_usage"]["claude-opus-5-5"]["costUSD"] == pytest.approx(0.023224)


def test_a_failed_command_is_an_error_result_and_an_answered_question_is_not() -> None:
    [failed] = [v for v in views("run: false") if isinstance(v, UserMessage)]
    assert failed.tool_results == (ToolResultBlock(failed.tool_results[0].tool_use_id, "Exit code 1", True),)

    messages = views("ask: Which color? red|blue")
    [asked] = [u for v in messages if isinstance(v, AssistantMessage) for u in v.tool_uses]
    assert asked.name == "AskUserQuestion" and asked.input["questions"][0]["question"] == "Which color?"
    [answered] = [r for v in messages if isinstance(v, UserMessage) for r in v.tool_results]
    assert answered.tool_use_id == asked.id and not answered.is_error and '"Which color?"="red"' in answered.content


def test_background_task_lifecycle_reads_as_task_messages() -> None:
    started = [v for v in views("background: sleep 1; echo done-bg") if isinstance(v, TaskMessage)]
    later = views("run: sleep 3")
    assert [(t.subtype, t.status) for t in started] == [("task_started", None)]
    task_id = started[0].task_id
    finished = [v for v in later if isinstance(v, TaskMessage) and v.task_id == task_id]
    assert [(t.type_name, t.status) for t in finished] == [
        ("TaskUpdatedMessage", "completed"),
        ("TaskNotificationMessage", "completed"),
    ]
    assert "completed (exit code 0)" in finished[-1].summary
    [changed, *_] = [v for v in later if isinstance(v, SystemMessage)]
    assert changed.subtype == "background_tasks_changed" and changed.data["tasks"] == []


def test_every_recorded_message_has_a_view_of_its_own() -> None:
    for prompt in TURNS:
        assert not [v for v in views(prompt) if isinstance(v, OtherMessage)], prompt


def _mangled(payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The payload with each field, and each field of its content blocks and data, replaced by
    values of the wrong type."""
    for value in (None, 7, "text", [1, "x", None], {"type_name": 3}, True, 1.5):
        for key in payload:
            broken = copy.deepcopy(payload)
            broken[key] = value
            yield broken
        for key in ("content", "data"):
            inner = payload.get(key)
            for index, block in enumerate(
                inner if isinstance(inner, list) else [inner] if isinstance(inner, dict) else []
            ):
                for field in block:
                    broken = copy.deepcopy(payload)
                    target = broken[key][index] if isinstance(inner, list) else broken[key]
                    target[field] = value
                    yield broken


def test_payloads_of_the_wrong_shape_never_raise_and_conversation_messages_keep_their_view() -> None:
    typed = {"AssistantMessage": AssistantMessage, "UserMessage": UserMessage, "ResultMessage": ResultMessage}
    for prompt, messages in TURNS.items():
        for message in messages:
            for broken in _mangled(message["payload"]):
                view = parse_message(message["type_name"], json.dumps(broken))
                assert view.payload == broken, (prompt, message["type_name"])
                # A field of the wrong type reads as its empty value; the message keeps its view.
                assert isinstance(view, typed.get(message["type_name"], object)), (prompt, broken)


def test_what_is_not_a_known_message_becomes_a_generic_view() -> None:
    assert parse_message("AssistantMessage", "{not json") == OtherMessage("AssistantMessage", {})
    assert parse_message("ResultMessage", "[1, 2]") == OtherMessage("ResultMessage", {})
    assert parse_message("StreamEvent", '{"event": {"type": "ping"}}') == OtherMessage(
        "StreamEvent", {"event": {"type": "ping"}}
    )
    assert parse_message("", "") == OtherMessage("", {})
    odd = parse_message(
        "AssistantMessage",
        json.dumps(
            {
                "content": [
                    {"type_name": "ThinkingBlock", "thinking": "hmm", "signature": "s"},
                    {"type_name": "ServerToolUseBlock", "id": "x", "name": "web_search", "input": {}},
                    "not a block",
                    {"text": "a block without a type"},
                ]
            }
        ),
    )
    assert isinstance(odd, AssistantMessage)
    assert odd.content == (
        ThinkingBlock("hmm"),
        OtherBlock("ServerToolUseBlock", {"id": "x", "name": "web_search", "input": {}}),
        OtherBlock("", {"text": "a block without a type"}),
    )
    assert odd.text == "" and odd.usage is None and odd.model == ""
    prompt = parse_message("UserMessage", json.dumps({"content": "a plain prompt"}))
    assert isinstance(prompt, UserMessage) and prompt.content == (TextBlock("a plain prompt"),)
    structured = parse_message(
        "UserMessage",
        json.dumps(
            {
                "content": [
                    {
                        "type_name": "ToolResultBlock",
                        "tool_use_id": "t",
                        "content": [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}],
                    }
                ]
            }
        ),
    )
    assert isinstance(structured, UserMessage) and structured.tool_results == (ToolResultBlock("t", "a\nb", False),)
    assert (
        ToolUseBlock("i", "Bash", {})
        == parse_message(
            "AssistantMessage", '{"content": [{"type_name": "ToolUseBlock", "id": "i", "name": "Bash", "input": "ls"}]}'
        ).tool_uses[0]
    )  # type: ignore[union-attr]


def test_events_carry_the_view_of_their_engine_message() -> None:
    recorded = TURNS["run: echo hi"][-1]
    proto = events_pb2.SessionEvent(
        seq=16,
        turn_id="t1",
        engine_message=events_pb2.EngineMessage(
            type_name=recorded["type_name"], payload_json=json.dumps(recorded["payload"])
        ),
    )
    proto.time.FromSeconds(1_700_000_000)
    event = Event.from_proto(proto)
    assert (event.seq, event.turn_id, event.kind, event.time.timestamp()) == (16, "t1", "engine_message", 1_700_000_000)
    assert isinstance(event.message, ResultMessage) and event.message.num_turns == 2
    assert not event.ends_turn and event.interaction is None

    end = Event.from_proto(
        events_pb2.SessionEvent(seq=17, turn_id="t1", turn_interrupted=events_pb2.TurnInterrupted(reason="r"))
    )
    assert end.kind == "turn_interrupted" and end.ends_turn and end.message is None
    assert end.payload == events_pb2.TurnInterrupted(reason="r")
    unknown = Event.from_proto(events_pb2.SessionEvent(seq=18, kind=99))
    assert unknown.kind == "unknown" and unknown.payload is None and not unknown.ends_turn
