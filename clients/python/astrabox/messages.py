"""Typed views of the engine's messages, as a session's ENGINE_MESSAGE events carry them.

The journal stores every message of the claude-agent-sdk verbatim: its type
name and every field as JSON (`EngineMessage.type_name`, `.payload_json`).
`parse_message` reads one into a frozen dataclass:

    AssistantMessage   what the model said: text, thinking, tool calls (`.text`, `.tool_uses`)
    UserMessage        what went back to it: tool results (`.tool_results`), or a prompt
    ResultMessage      the end of the engine's turn: outcome, final text, usage, cost
    InitMessage        the engine's start of a turn: model, tools, working directory
    TaskMessage        a (background) task started, progressed, was updated or finished
    SystemMessage      any other system notice (hooks, background-task lists, …)
    OtherMessage       anything else, or a shape this client does not know: never an error

Content blocks (`AssistantMessage.content`, `UserMessage.content`) are
`TextBlock`, `ThinkingBlock`, `ToolUseBlock`, `ToolResultBlock`, or
`OtherBlock` for block types not listed here. Every view keeps the verbatim
payload in `payload`, so nothing the engine said is out of reach.

    match parse_message(event.engine_message.type_name, event.engine_message.payload_json):
        case AssistantMessage(text=text) if text:
            print(text)
        case ResultMessage(usage=usage, total_cost_usd=cost):
            print(usage.output_tokens if usage else 0, cost)

Parsing never raises: a field of an unexpected type reads as its empty value,
and a message that cannot be read at all becomes an `OtherMessage`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

__all__ = [
    "AssistantMessage",
    "Block",
    "InitMessage",
    "Message",
    "OtherBlock",
    "OtherMessage",
    "ResultMessage",
    "SystemMessage",
    "TaskMessage",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "Usage",
    "UserMessage",
    "parse_message",
]

_TYPE_KEY = "type_name"
_EMPTY: Mapping[str, Any] = {}


# Content blocks


@dataclass(frozen=True, slots=True)
class TextBlock:
    """Text the model wrote (or, in a `UserMessage`, the prompt)."""

    text: str


@dataclass(frozen=True, slots=True)
class ThinkingBlock:
    """The model's extended thinking."""

    thinking: str


@dataclass(frozen=True, slots=True)
class ToolUseBlock:
    """A tool call the model made: the tool's `name` and its `input` (for Bash, `input["command"]`)."""

    id: str
    name: str
    input: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ToolResultBlock:
    """What a tool call (`tool_use_id`) returned: its text, and whether it failed."""

    tool_use_id: str
    content: str
    """The result's text: a string result as is, the text parts of a structured one joined by newlines."""
    is_error: bool


@dataclass(frozen=True, slots=True)
class OtherBlock:
    """A content block of a type not described here (server tool use, images, …): its type and fields."""

    type_name: str
    data: Mapping[str, Any]


Block: TypeAlias = TextBlock | ThinkingBlock | ToolUseBlock | ToolResultBlock | OtherBlock
"""One block of a message's content."""


# Messages


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens one model call (on an `AssistantMessage`) or a whole engine turn (on a `ResultMessage`) used."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Every input and output token, cached or not."""
        return self.input_tokens + self.output_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens


def _text_of(content: tuple[Block, ...]) -> str:
    return "\n\n".join(block.text for block in content if isinstance(block, TextBlock))


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    """A message from the model: text, thinking and tool calls, in order."""

    content: tuple[Block, ...]
    model: str
    usage: Usage | None
    error: str | None
    """Why the model call failed (for example "rate_limit"), when it did."""
    parent_tool_use_id: str | None
    """The tool call (a subagent's Task) this message belongs to; None at the top level."""
    payload: Mapping[str, Any] = field(repr=False, compare=False)
    """Every field of the engine's message, verbatim."""

    @property
    def text(self) -> str:
        """The text blocks, joined by blank lines ("" when there are none)."""
        return _text_of(self.content)

    @property
    def tool_uses(self) -> tuple[ToolUseBlock, ...]:
        """The tool calls the message makes."""
        return tuple(block for block in self.content if isinstance(block, ToolUseBlock))


@dataclass(frozen=True, slots=True)
class UserMessage:
    """A message to the model: tool results, or a prompt the engine echoes."""

    content: tuple[Block, ...]
    parent_tool_use_id: str | None
    """The tool call (a subagent's Task) this message belongs to; None at the top level."""
    payload: Mapping[str, Any] = field(repr=False, compare=False)
    """Every field of the engine's message, verbatim (`tool_use_result` holds a tool's structured output)."""

    @property
    def text(self) -> str:
        """The text blocks, joined by blank lines ("" when there are none)."""
        return _text_of(self.content)

    @property
    def tool_results(self) -> tuple[ToolResultBlock, ...]:
        """The tool results the message carries."""
        return tuple(block for block in self.content if isinstance(block, ToolResultBlock))


@dataclass(frozen=True, slots=True)
class ResultMessage:
    """The end of the engine's work on a turn: how it went, its final text, what it used and cost."""

    subtype: str
    """"success", or why it stopped (for example "error_max_turns")."""
    is_error: bool
    result: str
    """The final text ("" when the engine gave none)."""
    num_turns: int
    """Model calls the turn took."""
    duration_ms: int
    duration_api_ms: int
    total_cost_usd: float | None
    """The turn's cost as the engine priced it; None when it did not say."""
    usage: Usage | None
    stop_reason: str | None
    errors: tuple[str, ...]
    engine_session_id: str
    """The engine's own conversation id."""
    payload: Mapping[str, Any] = field(repr=False, compare=False)
    """Every field of the engine's message, verbatim (`model_usage` breaks the cost down by model)."""


@dataclass(frozen=True, slots=True)
class InitMessage:
    """The engine starting a turn (a SystemMessage "init"): which model and tools it has."""

    model: str
    tools: tuple[str, ...]
    cwd: str
    engine_session_id: str
    data: Mapping[str, Any] = field(repr=False)
    """Everything the engine reported (slash commands, MCP servers, permission mode, …)."""
    payload: Mapping[str, Any] = field(repr=False, compare=False)
    """Every field of the engine's message, verbatim."""


@dataclass(frozen=True, slots=True)
class TaskMessage:
    """A task's lifecycle: started, progress, updated or notification (it finished).

    Background tasks (a command run in the background) report through these
    after their turn has ended as well."""

    type_name: str
    """The engine's message type, for example "TaskStartedMessage" or "TaskNotificationMessage"."""
    subtype: str
    """"task_started", "task_progress", "task_updated" or "task_notification"."""
    task_id: str
    status: str | None
    """"completed", "failed", "stopped" …; None while a task has only started."""
    description: str
    summary: str
    """What a finished task did ("" until it has)."""
    tool_use_id: str | None
    payload: Mapping[str, Any] = field(repr=False, compare=False)
    """Every field of the engine's message, verbatim."""


@dataclass(frozen=True, slots=True)
class SystemMessage:
    """Any other system notice of the engine (hook events, the list of background tasks, …)."""

    type_name: str
    subtype: str
    data: Mapping[str, Any] = field(repr=False)
    payload: Mapping[str, Any] = field(repr=False, compare=False)
    """Every field of the engine's message, verbatim."""


@dataclass(frozen=True, slots=True)
class OtherMessage:
    """A message of another type (stream events, rate-limit notices) or of a shape this client cannot read."""

    type_name: str
    payload: Mapping[str, Any]
    """Every field of the engine's message ({} when its JSON was not an object)."""


Message: TypeAlias = (
    AssistantMessage | UserMessage | ResultMessage | InitMessage | TaskMessage | SystemMessage | OtherMessage
)
"""The typed view of one engine message."""

_TASK_TYPES = frozenset({"TaskStartedMessage", "TaskProgressMessage", "TaskUpdatedMessage", "TaskNotificationMessage"})


def parse_message(type_name: str, payload_json: str | bytes | Mapping[str, Any]) -> Message:
    """The typed view of an engine message, from its type name and payload (JSON, or already decoded).

    Never raises: what cannot be read becomes an `OtherMessage`."""
    payload = _decode(payload_json)
    if payload is None:
        return OtherMessage(type_name, {})
    try:
        return _parse(type_name, payload)
    except Exception:  # a shape this client does not know must not break a caller's loop
        return OtherMessage(type_name, payload)


def _decode(payload_json: str | bytes | Mapping[str, Any]) -> Mapping[str, Any] | None:
    if isinstance(payload_json, Mapping):
        return payload_json
    try:
        payload = json.loads(payload_json or "{}")
    except (ValueError, TypeError):
        return None
    return payload if isinstance(payload, dict) else None


def _parse(type_name: str, payload: Mapping[str, Any]) -> Message:
    if type_name == "AssistantMessage":
        return AssistantMessage(
            content=_blocks(payload.get("content")),
            model=_str(payload.get("model")),
            usage=_usage(payload.get("usage")),
            error=_optional_str(payload.get("error")),
            parent_tool_use_id=_optional_str(payload.get("parent_tool_use_id")),
            payload=payload,
        )
    if type_name == "UserMessage":
        return UserMessage(
            content=_blocks(payload.get("content")),
            parent_tool_use_id=_optional_str(payload.get("parent_tool_use_id")),
            payload=payload,
        )
    if type_name == "ResultMessage":
        return ResultMessage(
            subtype=_str(payload.get("subtype")),
            is_error=payload.get("is_error") is True,
            result=_str(payload.get("result")),
            num_turns=_int(payload.get("num_turns")),
            duration_ms=_int(payload.get("duration_ms")),
            duration_api_ms=_int(payload.get("duration_api_ms")),
            total_cost_usd=_optional_float(payload.get("total_cost_usd")),
            usage=_usage(payload.get("usage")),
            stop_reason=_optional_str(payload.get("stop_reason")),
            errors=tuple(_str(e) for e in _list(payload.get("errors"))),
            engine_session_id=_str(payload.get("session_id")),
            payload=payload,
        )
    if type_name in _TASK_TYPES:
        return TaskMessage(
            type_name=type_name,
            subtype=_str(payload.get("subtype")),
            task_id=_str(payload.get("task_id")),
            status=_optional_str(payload.get("status")),
            description=_str(payload.get("description")),
            summary=_str(payload.get("summary")),
            tool_use_id=_optional_str(payload.get("tool_use_id")),
            payload=payload,
        )
    # SystemMessage and its subclasses: told by their fields, whatever their class is called.
    data = payload.get("data")
    if isinstance(data, Mapping) and isinstance(payload.get("subtype"), str):
        if payload["subtype"] == "init":
            return InitMessage(
                model=_str(data.get("model")),
                tools=tuple(_str(t) for t in _list(data.get("tools"))),
                cwd=_str(data.get("cwd")),
                engine_session_id=_str(data.get("session_id")),
                data=data,
                payload=payload,
            )
        return SystemMessage(type_name=type_name, subtype=payload["subtype"], data=data, payload=payload)
    return OtherMessage(type_name, payload)


def _blocks(content: Any) -> tuple[Block, ...]:
    if isinstance(content, str):
        return (TextBlock(content),)
    return tuple(_block(item) for item in _list(content) if isinstance(item, Mapping))


def _block(item: Mapping[str, Any]) -> Block:
    kind = _str(item.get(_TYPE_KEY))
    if kind == "TextBlock":
        return TextBlock(_str(item.get("text")))
    if kind == "ThinkingBlock":
        return ThinkingBlock(_str(item.get("thinking")))
    if kind == "ToolUseBlock":
        tool_input = item.get("input")
        return ToolUseBlock(
            id=_str(item.get("id")),
            name=_str(item.get("name")),
            input=tool_input if isinstance(tool_input, Mapping) else {},
        )
    if kind == "ToolResultBlock":
        return ToolResultBlock(
            tool_use_id=_str(item.get("tool_use_id")),
            content=_result_text(item.get("content")),
            is_error=item.get("is_error") is True,
        )
    return OtherBlock(kind, {k: v for k, v in item.items() if k != _TYPE_KEY})


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(_str(part.get("text")) for part in _list(content) if isinstance(part, Mapping) and "text" in part)


def _usage(value: Any) -> Usage | None:
    if not isinstance(value, Mapping):
        return None
    return Usage(
        input_tokens=_int(value.get("input_tokens")),
        output_tokens=_int(value.get("output_tokens")),
        cache_read_input_tokens=_int(value.get("cache_read_input_tokens")),
        cache_creation_input_tokens=_int(value.get("cache_creation_input_tokens")),
    )


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _optional_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _optional_float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _list(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list) else ()
