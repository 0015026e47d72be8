"""The SDK's partial messages (StreamEvent) as deltas: pieces of text as the model writes them.

With `include_partial_messages` the SDK interleaves the model API's stream
events with its complete messages. Only the pieces that carry text become
`EngineDelta`s (text, tool input JSON, thinking); the start/stop events only
tell which message the following pieces belong to. The complete message still
follows as an ordinary output, so a delta is never the only copy of anything.
"""

from __future__ import annotations

from typing import Any

from dataplane_agent.engines.base import EngineDelta

# The API's delta types and the field each carries its text in.
_KINDS = {
    "text_delta": ("text", "text"),
    "input_json_delta": ("tool_input", "partial_json"),
    "thinking_delta": ("thinking", "thinking"),
}


class PartialMessages:
    """Follows one engine's stream events; says which message each piece belongs to."""

    def __init__(self) -> None:
        # The message being written, per (sub)agent: a subagent's stream interleaves with its parent's.
        self._message_ids: dict[str, str] = {}

    def delta(self, event: dict[str, Any], parent_tool_use_id: str | None) -> EngineDelta | None:
        """The piece of text in `event`, or None for an event that carries none."""
        parent = parent_tool_use_id or ""
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message")
            self._message_ids[parent] = str(message.get("id") or "") if isinstance(message, dict) else ""
            return None
        if kind != "content_block_delta":
            return None
        piece = event.get("delta")
        if not isinstance(piece, dict) or piece.get("type") not in _KINDS:
            return None
        name, field = _KINDS[str(piece["type"])]
        text = piece.get(field)
        index = event.get("index")
        if not isinstance(text, str) or not text or not isinstance(index, int):
            return None
        return EngineDelta(message_id=self._message_ids.get(parent, ""), index=index, kind=name, text=text)
