"""Turning claude-agent-sdk message objects into verbatim, JSON-ready payloads.

Every field of the message is kept. Nested dataclasses (content blocks,
rate-limit info, deferred tool uses) carry a `"type_name"` key with their class
name, so a reader can tell a `ToolUseBlock` from a `ServerToolUseBlock` though
their fields look alike. The top-level type name travels beside the payload.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import math
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

TYPE_KEY = "type_name"


def message_payload(message: object) -> dict[str, Any]:
    """Every field of an SDK message, as JSON-serialisable data."""
    if not dataclasses.is_dataclass(message) or isinstance(message, type):
        raise TypeError(f"not an SDK message: {type(message).__name__}")
    return {field.name: _plain(getattr(message, field.name)) for field in dataclasses.fields(message)}


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        # JSON has no NaN or infinities; keep them readable rather than emitting invalid JSON.
        return value if math.isfinite(value) else repr(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {TYPE_KEY: type(value).__name__, **message_payload(value)}
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(item) for item in value]
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, (bytes, bytearray)):
        return {TYPE_KEY: "bytes", "base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, PurePath):
        return str(value)
    return {TYPE_KEY: type(value).__name__, "repr": repr(value)}
