"""Readable one-line renderings of session events, for `astrabox run` and `astrabox session events`.

Engine messages are read through their typed views (`astrabox.messages`)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import UTC
from typing import Any, TextIO

from astrabox.events import Delta, Event
from astrabox.messages import (
    AssistantMessage,
    InitMessage,
    Message,
    ResultMessage,
    TextBlock,
    ToolUseBlock,
    UserMessage,
)
from astrabox.sessionkernel.v1 import events_pb2, session_pb2

__all__ = ["LiveText", "grant_scope", "interaction_lines", "render", "tool_input"]

_PREVIEW_LINES = 6


def _preview(text: str, indent: str = "    ") -> str:
    lines = text.rstrip("\n").splitlines() or [""]
    shown = lines[:_PREVIEW_LINES]
    more = f"\n{indent}… {len(lines) - _PREVIEW_LINES} more lines" if len(lines) > _PREVIEW_LINES else ""
    return "\n".join(indent + line for line in shown) + more


# The input a person reads first for each tool: what tool grants match their patterns against
# (ToolGrantScope.input_pattern); any other tool's input is shown as compact JSON.
_MAIN_INPUT = {
    "Bash": "command",
    "Read": "file_path",
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
    "WebFetch": "url",
    "Glob": "pattern",
    "Grep": "pattern",
}


def tool_input(tool_name: str, call_input: Mapping[str, Any] | str) -> str:
    """A tool call's input as a person reads it: Bash's command, a file tool's path, WebFetch's URL,
    Glob's and Grep's pattern; any other input as compact JSON. `call_input` is the input, or its JSON."""
    if isinstance(call_input, str):
        try:
            parsed = json.loads(call_input) if call_input.strip() else {}
        except ValueError:
            return call_input
        if not isinstance(parsed, dict):
            return call_input
        call_input = parsed
    main = call_input.get(_MAIN_INPUT.get(tool_name, ""))
    if isinstance(main, str):
        return main
    return json.dumps(call_input, separators=(",", ":"), sort_keys=True)


def _tool_call(block: ToolUseBlock) -> str:
    return tool_input(block.name, block.input)


def _engine_lines(message: Message | None) -> Iterator[str]:
    if isinstance(message, InitMessage):
        yield f"● engine connected (model {message.model or '?'}, {len(message.tools)} tools)"
    elif isinstance(message, AssistantMessage):
        for block in message.content:
            if isinstance(block, TextBlock) and block.text.strip():
                yield f"◆ {block.text.strip()}"
            elif isinstance(block, ToolUseBlock):
                yield f"⚙ {block.name or 'tool'}: {_tool_call(block)}"
    elif isinstance(message, UserMessage):
        for result in message.tool_results:
            yield f"  {'✗' if result.is_error else '⎿'} tool result:\n{_preview(result.content)}"
    elif isinstance(message, ResultMessage):
        # Claude Code reports its conversation's running cost, not the turn's (TURN_COMPLETED has that).
        cost = f" · conversation so far ${message.total_cost_usd:.4f}" if message.total_cost_usd is not None else ""
        yield f"● result: {message.subtype or '?'} after {message.num_turns} model turns{cost}"


def render(event: events_pb2.SessionEvent | Event) -> list[str]:
    """Lines describing one event, each starting with its seq; empty for events not worth showing."""
    view = event if isinstance(event, Event) else Event.from_proto(event)
    event = view.proto
    kind = event.WhichOneof("payload")
    prefix = f"[{event.seq:>4}] "
    if kind == "session_created":
        lines = [f"● session created ({event.session_created.engine}, mode {event.session_created.permission_mode})"]
    elif kind == "startup_requested":
        lines = [f"● runtime requested from agent {event.startup_requested.agent_id}"]
    elif kind == "runtime_ready":
        ready = event.runtime_ready
        lines = [
            f"● sandbox ready: {ready.driver} {ready.sandbox_id} ({ready.sandbox_ms} ms), workspace {ready.workspace}"
        ]
    elif kind == "runtime_failed":
        lines = [f"✗ runtime failed: {event.runtime_failed.reason}"]
    elif kind == "user_message_accepted":
        lines = [f"> {event.user_message_accepted.text}"]
    elif kind == "engine_message":
        lines = list(_engine_lines(view.message))
        if event.engine_message.late and lines:
            # After its turn was settled (a tool call's TOOL_CALL_SETTLED is its result that counts).
            lines[0] = f"(late, for the record: its turn had ended) {lines[0]}"
    elif kind == "turn_completed":
        done = event.turn_completed
        lines = [f"✓ turn {'failed' if done.is_error else 'completed'} in {done.duration_ms / 1000:.1f} s{_used(done)}"]
    elif kind == "turn_failed":
        lines = [f"✗ turn failed: {event.turn_failed.reason}"]
    elif kind == "session_deleted":
        lines = ["● session deleted"]
    elif kind == "session_archived":
        lines = ["● session archived"]
    elif kind == "startup_phase":
        lines = [f"● {event.startup_phase.phase.replace('_', ' ')} ({event.startup_phase.duration_ms} ms)"]
    elif kind == "interaction_requested":
        lines = interaction_lines(event.interaction_requested.interaction)
    elif kind == "interaction_answered":
        lines = [_answered(event.interaction_answered)]
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
    elif kind == "tool_call_settled":
        settled = event.tool_call_settled
        lines = [f"  ✗ tool result ({settled.tool_name or 'tool'}, no result): {settled.reason}"]
    elif kind == "background_task_lost":
        lost = event.background_task_lost
        lines = [f"✗ background task {lost.task_id} lost: {lost.reason}"]
    elif kind == "runtime_destroy_failed":
        failed = event.runtime_destroy_failed
        then = "abandoned: remove it by hand" if failed.abandoned else f"retrying in {failed.retry_in_seconds} s"
        lines = [f"✗ sandbox not destroyed (attempt {failed.attempts}): {failed.reason}; {then}"]
    elif kind == "sandbox_retained":
        retained = event.sandbox_retained
        lines = [f"● sandbox {retained.sandbox_id} kept by agent {retained.agent_id} (retained); released"]
    elif kind == "mcp_server_unavailable":
        unavailable = event.mcp_server_unavailable
        lines = [f"✗ MCP server {unavailable.server} unavailable, going on without it: {unavailable.reason}"]
    elif kind == "network_request_refused":
        refused = event.network_request_refused
        more = f" (and {refused.suppressed} more refused)" if refused.suppressed else ""
        lines = [f"✗ network request to {refused.host}:{refused.port} refused: {refused.reason}{more}"]
    elif kind == "sandbox_reconciled":
        reconciled = event.sandbox_reconciled
        lines = [
            f"● sandbox {reconciled.sandbox_id} {reconciled.action or 'reconciled'}: {reconciled.reason}".rstrip(": ")
        ]
    elif kind == "memory_synced":
        synced = event.memory_synced
        written = ", ".join(
            f"{w.path} {'deleted' if w.deleted else f'v{w.version}'}"
            + (f" (over v{w.conflicting_version} it had not seen)" if w.conflict else "")
            for w in synced.written
        )
        lines = [f"● memory {synced.store or synced.store_id}: {written or 'nothing written'}"]
        lines += [f"  ✗ not kept: {reason}" for reason in synced.refused]
    elif kind == "tool_granted":
        grant = event.tool_granted.grant
        lines = [f"● granted: {grant.tool_name} runs without asking, {grant_scope(grant)} (grant {grant.grant_id})"]
    elif kind == "tool_grant_revoked":
        lines = [f"● grant {event.tool_grant_revoked.grant_id} revoked: its tool asks again"]
    elif kind == "subagent_started":
        started = event.subagent_started
        lines = [f"⇢ sub-agent {started.agent} v{started.agent_version} runs as session {started.child_session_id}"]
    elif kind == "subagent_finished":
        lines = [_subagent_finished(event.subagent_finished)]
    else:
        lines = [f"● {_kind_name(event.kind)}"]
    return [prefix + line for line in lines]


def _kind_name(kind: int) -> str:
    """An event kind this renderer has no words for, as a person reads it: "tool granted"."""
    try:
        name = events_pb2.EventKind.Name(kind)
    except ValueError:
        return f"event of kind {kind}"
    return name.removeprefix("EVENT_KIND_").replace("_", " ").lower()


def interaction_lines(interaction: session_pb2.Interaction) -> list[str]:
    """What a turn parked on `interaction` asks of a person, one line per question."""
    if interaction.kind == session_pb2.INTERACTION_KIND_CUSTOM_TOOL:
        return [
            f"⚒ custom tool {interaction.tool_name} called with {interaction.input_json or '{}'}:"
            f" your client runs it and answers with its result (interaction {interaction.interaction_id})"
        ]
    if interaction.kind == session_pb2.INTERACTION_KIND_SUBAGENT:
        return [
            f"⇢ sub-agent {interaction.tool_name} called with {interaction.input_json or '{}'}:"
            f" it runs as a child session (interaction {interaction.interaction_id})"
        ]
    if interaction.questions:
        return [f"? {q.question} [{' | '.join(q.options)}]" for q in interaction.questions]
    call = tool_input(interaction.tool_name, interaction.input_json)
    return [f"? may {interaction.tool_name} run: {call}  (approval {interaction.interaction_id})"]


def _subagent_finished(finished: events_pb2.SubagentFinished) -> str:
    child = f"session {finished.child_session_id}" if finished.child_session_id else "no session"
    first = (finished.result_preview.splitlines() or [""])[0]
    if finished.is_error:
        return f"✗ sub-agent call failed ({finished.reason or 'error'}, {child}): {first}".rstrip(": ")
    return f"⇠ sub-agent {child} answered: {first}".rstrip(": ")


def _answered(answered: events_pb2.InteractionAnswered) -> str:
    if answered.decision == "allow":
        text = "allowed" + (" with edited input" if answered.updated_input_json else "")
    elif answered.decision == "deny":
        text = f"denied: {answered.message}" if answered.message else "denied"
    elif answered.decision == "answers":
        text = "answered " + ", ".join(f"{question} → {answer}" for question, answer in answered.answers.items())
    elif answered.decision == "tool_result":
        first = (answered.tool_result.splitlines() or [""])[0]
        text = f"{'tool error' if answered.is_error else 'tool result'} sent: {first}"
    else:
        text = f"answered: {answered.decision} {answered.message}".rstrip()
    return f"  ↳ {text}"


def grant_scope(grant: session_pb2.ToolGrant) -> str:
    """Which of its tool's calls a grant lets run, and until when: "every call, for the rest of the
    session" or "calls matching 'npm test*', until 2026-01-31 09:00 UTC"."""
    calls = f"calls matching {grant.input_pattern!r}" if grant.input_pattern else "every call"
    if grant.HasField("expire_time"):
        return f"{calls}, until {grant.expire_time.ToDatetime(tzinfo=UTC):%Y-%m-%d %H:%M} UTC"
    return f"{calls}, for the rest of the session"


def _used(done: events_pb2.TurnCompleted) -> str:
    """What a turn used, as its TURN_COMPLETED says (nothing when the engine reported no usage)."""
    usage = done.usage
    if not usage.turns:
        return ""
    read = usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens
    return f" · {read:,} in / {usage.output_tokens:,} out tokens · this turn ${usage.cost_usd:.4f}"


# Where a streamed line's text starts: under the text of a rendered line ("[seq] ◆ ").
_LIVE_PREFIX = " " * len("[   1] ") + "◆ "


class LiveText:
    """Renders a watch with deltas: text printed as it is written, then each complete message
    without the text already shown (a newline ends the streamed line instead)."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._open: tuple[str, int] | None = None
        # The text shown so far, by message id.
        self._shown: dict[str, str] = {}

    def delta(self, delta: Delta) -> None:
        """Prints a text delta at once; other kinds are not printed."""
        if delta.kind != "text" or not delta.text:
            return
        block = (delta.message_id, delta.index)
        if self._open != block:
            self._end_line()
            self._out.write(_LIVE_PREFIX)
            self._open = block
        self._out.write(delta.text)
        self._out.flush()
        self._shown[delta.message_id] = self._shown.get(delta.message_id, "") + delta.text

    def event(self, event: Event) -> None:
        """Prints a complete event, leaving out the text its deltas already showed."""
        self._end_line()
        shown = ""
        if isinstance(event.message, AssistantMessage):
            shown = self._shown.pop(str(event.message.payload.get("message_id") or ""), "")
        streamed = {
            block.text.strip() for block in getattr(event.message, "content", ()) if isinstance(block, TextBlock)
        }
        streamed = {text for text in streamed if text and text in shown}
        for line in render(event):
            if line.split("] ", 1)[-1].removeprefix("◆ ") in streamed:
                continue
            print(line, file=self._out, flush=True)

    def _end_line(self) -> None:
        if self._open is not None:
            self._out.write("\n")
            self._open = None
