"""Readable one-line renderings of session events, for `astrabox run` and `astrabox session events`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from astrabox.sessionkernel.v1 import events_pb2

_PREVIEW_LINES = 6


def _preview(text: str, indent: str = "    ") -> str:
    lines = text.rstrip("\n").splitlines() or [""]
    shown = lines[:_PREVIEW_LINES]
    more = f"\n{indent}… {len(lines) - _PREVIEW_LINES} more lines" if len(lines) > _PREVIEW_LINES else ""
    return "\n".join(indent + line for line in shown) + more


def _blocks(content: Any) -> Iterator[dict[str, Any]]:
    if isinstance(content, str):
        yield {"type_name": "TextBlock", "text": content}
    elif isinstance(content, list):
        yield from (b for b in content if isinstance(b, dict))


def _tool_result_text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _engine_lines(type_name: str, message: dict[str, Any]) -> Iterator[str]:
    if type_name == "SystemMessage" and message.get("subtype") == "init":
        data = message.get("data") or {}
        yield f"● engine connected (model {data.get('model', '?')}, {len(data.get('tools') or [])} tools)"
    elif type_name == "AssistantMessage":
        for block in _blocks(message.get("content")):
            if block.get("type_name") == "TextBlock" and block.get("text", "").strip():
                yield f"◆ {block['text'].strip()}"
            elif block.get("type_name") == "ToolUseBlock":
                tool_input = block.get("input") or {}
                shown = tool_input.get("command") if isinstance(tool_input, dict) and "command" in tool_input else json.dumps(tool_input)
                yield f"⚙ {block.get('name', 'tool')}: {shown}"
    elif type_name == "UserMessage":
        for block in _blocks(message.get("content")):
            if block.get("type_name") == "ToolResultBlock":
                mark = "✗" if block.get("is_error") else "⎿"
                yield f"  {mark} tool result:\n{_preview(_tool_result_text(block.get('content')))}"
    elif type_name == "ResultMessage":
        cost = message.get("total_cost_usd")
        cost_text = f", ${cost:.4f}" if isinstance(cost, (int, float)) else ""
        yield f"● result: {message.get('subtype', '?')} after {message.get('num_turns', '?')} model turns{cost_text}"


def render(event: events_pb2.SessionEvent) -> list[str]:
    """Lines describing one event; empty for events not worth showing."""
    kind = event.WhichOneof("payload")
    prefix = f"[{event.seq:>4}] "
    if kind == "session_created":
        lines = [f"● session created ({event.session_created.engine}, mode {event.session_created.permission_mode})"]
    elif kind == "startup_requested":
        lines = [f"● runtime requested from agent {event.startup_requested.agent_id}"]
    elif kind == "runtime_ready":
        ready = event.runtime_ready
        lines = [f"● sandbox ready: {ready.driver} {ready.sandbox_id} ({ready.sandbox_ms} ms), workspace {ready.workspace}"]
    elif kind == "runtime_failed":
        lines = [f"✗ runtime failed: {event.runtime_failed.reason}"]
    elif kind == "user_message_accepted":
        lines = [f"> {event.user_message_accepted.text}"]
    elif kind == "engine_message":
        lines = list(_engine_lines(event.engine_message.type_name, json.loads(event.engine_message.payload_json or "{}")))
    elif kind == "turn_completed":
        done = event.turn_completed
        lines = [f"✓ turn {'failed' if done.is_error else 'completed'} in {done.duration_ms / 1000:.1f} s"]
    elif kind == "turn_failed":
        lines = [f"✗ turn failed: {event.turn_failed.reason}"]
    elif kind == "session_deleted":
        lines = ["● session deleted"]
    elif kind == "session_archived":
        lines = ["● session archived"]
    elif kind == "startup_phase":
        lines = [f"● {event.startup_phase.phase.replace('_', ' ')} ({event.startup_phase.duration_ms} ms)"]
    elif kind == "interaction_requested":
        asked = event.interaction_requested.interaction
        if asked.questions:
            lines = [f"? {q.question} [{' | '.join(q.options)}]" for q in asked.questions]
        else:
            lines = [f"? may {asked.tool_name} run {asked.input_json}?  (interaction {asked.interaction_id})"]
    elif kind == "interaction_answered":
        lines = [f"  ↳ answered: {event.interaction_answered.decision} {event.interaction_answered.message}".rstrip()]
    elif kind == "interaction_closed":
        lines = [f"  ↳ closed: {event.interaction_closed.reason}"]
    elif kind == "interrupt_requested":
        lines = ["■ interrupt requested"]
    elif kind == "turn_interrupted":
        lines = [f"■ turn interrupted: {event.turn_interrupted.reason}"]
    elif kind == "input_delivered":
        lines = []
    elif kind == "permission_mode_changed":
        lines = [f"● permission mode: {event.permission_mode_changed.permission_mode}"]
    elif kind == "runtime_lost":
        lines = [f"✗ runtime lost: {event.runtime_lost.reason}; recovering"]
    elif kind == "engine_turn_started":
        lines = [f"● the engine started a turn: {event.engine_turn_started.reason}"]
    elif kind == "engine_info":
        lines = [f"● engine offers {len(event.engine_info.slash_commands)} slash commands"]
    elif kind == "task_stop_requested":
        lines = [f"■ stop requested for task {event.task_stop_requested.task_id}"]
    elif kind == "runtime_stop_requested":
        lines = [f"● stopping the idle runtime: {event.runtime_stop_requested.reason}"]
    elif kind == "runtime_stopped":
        lines = [f"● runtime stopped ({event.runtime_stopped.reason}); the next message starts it again"]
    elif kind == "sandbox_reconciled":
        done = event.sandbox_reconciled
        lines = [f"● sandbox {done.sandbox_id} {done.action or 'reconciled'}: {done.reason}".rstrip(": ")]
    else:
        lines = [f"● {events_pb2.EventKind.Name(event.kind)}"]
    return [prefix + line for line in lines]
