"""The typed view of an engine message (`EngineMessage.content`) and of an interaction's tool input
(`Interaction.input`), built as events are read for clients, beside the verbatim JSON.

The JSON is read by the client SDK's own parser (`astrabox.messages.parse_message`), so the view
says what the SDK's typed messages say. A view is an extra, never a reason to fail a read: a payload
that cannot be read safely gets none (the field stays unset) and the raw JSON goes as always.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from google.protobuf import struct_pb2

from astrabox import messages
from astrabox.sessionkernel.v1 import events_pb2

# A JSON text longer than this gets no view: reading it would cost more than a client saves.
MAX_JSON_BYTES = 1024 * 1024
# How deep a value the view carries may nest, counted from the top of the JSON it came from (the
# message is level 1, its content list 2, a block 3, a tool's input 4). Each level of a Struct is
# three protobuf messages deep, and decoders refuse more than 100: 20 leaves room around it.
MAX_DEPTH = 20
# A view larger than this many times its JSON, plus the slack, is dropped: a small JSON must not
# turn into a large response (a Struct number takes 9 bytes or more, an empty block several).
MAX_GROWTH = 2
_GROWTH_SLACK = 256

_KINDS: dict[type[messages.Message], events_pb2.EngineContentKind] = {
    messages.AssistantMessage: events_pb2.ENGINE_CONTENT_KIND_ASSISTANT,
    messages.UserMessage: events_pb2.ENGINE_CONTENT_KIND_USER,
    messages.ResultMessage: events_pb2.ENGINE_CONTENT_KIND_RESULT,
    messages.InitMessage: events_pb2.ENGINE_CONTENT_KIND_SYSTEM,
    messages.TaskMessage: events_pb2.ENGINE_CONTENT_KIND_SYSTEM,
    messages.SystemMessage: events_pb2.ENGINE_CONTENT_KIND_SYSTEM,
    messages.OtherMessage: events_pb2.ENGINE_CONTENT_KIND_OTHER,
}
# Where a tool's input sits in a message: message (1), content (2), block (3), input (4).
_INPUT_DEPTH = 4
_BLOCK_DEPTH = 3


class _Unfit(ValueError):
    """The payload holds something the view cannot carry safely."""


def _reject_constant(name: str) -> Any:
    raise _Unfit(f"{name} is no JSON number")


# One decoder for every read (json.loads with an argument makes a new one each call).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _decode(text: str) -> dict[str, Any] | None:
    """`text` as a JSON object, or None when it is not one."""
    text = text.strip()  # raw_decode takes no whitespace around the value (strip copies only when there is)
    value, end = _DECODER.raw_decode(text)
    if end != len(text):
        raise _Unfit("text after the JSON value")
    return value if isinstance(value, dict) else None


def json_bytes(text: str) -> int:
    """The UTF-8 length of `text`, cheaply for ASCII."""
    return len(text) if text.isascii() else len(text.encode())


def set_engine_content(
    target: events_pb2.EngineMessage, type_name: str, text: str, message: Any = None, size: int = -1
) -> int:
    """The view of an engine message written into `target.content` (from `text`, its JSON; `message`
    is the same already decoded when the caller has it, `size` the JSON's UTF-8 length when known);
    the bytes the view takes, 0 when it has none."""
    if size < 0:
        size = json_bytes(text)
    if size > MAX_JSON_BYTES:
        return 0
    try:
        payload = _decode(text) if message is None else message if isinstance(message, dict) else None
        if payload is None:
            return 0
        content = target.content
        _fill_content(content, messages.parse_message(type_name, payload))
        written = content.ByteSize()
    except Exception:  # a hostile or malformed payload: no view, the raw JSON still goes
        target.ClearField("content")
        return 0
    if written > MAX_GROWTH * size + _GROWTH_SLACK:
        target.ClearField("content")
        return 0
    return written


def tool_input(input_json: str, decoded: Mapping[str, Any] | None = None) -> struct_pb2.Struct | None:
    """An interaction's tool input as a Struct (from its JSON, or already decoded); None when it is not
    a JSON object or cannot be carried safely."""
    if json_bytes(input_json) > MAX_JSON_BYTES:
        return None
    try:
        value = decoded if isinstance(decoded, dict) else _decode(input_json)
        if value is None:
            return None
        struct = struct_pb2.Struct()
        _fill_struct(struct, value, 1)
    except Exception:  # a hostile or malformed input: no Struct, input_json still goes
        return None
    return struct


def _fill_content(content: events_pb2.EngineContent, message: messages.Message) -> None:
    content.kind = _KINDS[type(message)]
    match message:
        case messages.AssistantMessage():
            _add_blocks(content, message.content)
            content.model = message.model
            content.parent_tool_use_id = message.parent_tool_use_id or ""
            content.error = message.error or ""
        case messages.UserMessage():
            _add_blocks(content, message.content)
            content.parent_tool_use_id = message.parent_tool_use_id or ""
        case messages.ResultMessage():
            content.subtype = message.subtype
            content.is_error = message.is_error
            content.result = message.result
            content.errors.extend(message.errors)
        case messages.InitMessage():
            content.subtype = "init"
            content.model = message.model
        case messages.TaskMessage() | messages.SystemMessage():
            content.subtype = message.subtype


def _add_blocks(content: events_pb2.EngineContent, blocks: tuple[messages.Block, ...]) -> None:
    add = content.blocks.add
    for block in blocks:
        match block:
            case messages.TextBlock(text=text):
                add().text.text = text
            case messages.ThinkingBlock(thinking=thinking):
                add().thinking.thinking = thinking
            case messages.ToolUseBlock():
                use = add().tool_use
                use.id = block.id
                use.name = block.name
                _fill_struct(use.input, block.input, _INPUT_DEPTH)
            case messages.ToolResultBlock():
                result = add().tool_result
                result.tool_use_id = block.tool_use_id
                result.is_error = block.is_error
                result.content = block.content
            case messages.OtherBlock():
                other = add().other
                other.type = block.type_name
                _check(block.data, _BLOCK_DEPTH)
                other.json = json.dumps(block.data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _fill_struct(struct: struct_pb2.Struct, value: Mapping[str, Any], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise _Unfit("nested too deep")
    fields = struct.fields
    for key, item in value.items():
        _fill_value(fields[key], item, depth + 1)


def _fill_value(target: struct_pb2.Value, value: Any, depth: int) -> None:
    if isinstance(value, str):
        target.string_value = value
    elif value is None:
        target.null_value = struct_pb2.NULL_VALUE
    elif isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int | float):
        number = float(value)  # OverflowError for an integer no double holds
        if not math.isfinite(number):
            raise _Unfit("a number no double holds")
        target.number_value = number
    elif isinstance(value, dict):
        _fill_struct(target.struct_value, value, depth)
    elif isinstance(value, list):
        if depth > MAX_DEPTH:
            raise _Unfit("nested too deep")
        values = target.list_value.values
        target.list_value.SetInParent()  # an empty list is still a list
        for item in value:
            _fill_value(values.add(), item, depth + 1)
    else:
        raise _Unfit(f"no JSON value: {type(value).__name__}")


def _check(value: Any, depth: int) -> None:
    """Raise _Unfit when `value` (at `depth`) nests deeper than MAX_DEPTH or holds a non-finite number."""
    if isinstance(value, dict | list):
        if depth > MAX_DEPTH:
            raise _Unfit("nested too deep")
        for item in value.values() if isinstance(value, dict) else value:
            _check(item, depth + 1)
    elif isinstance(value, float) and not math.isfinite(value):
        raise _Unfit("a number no double holds")
