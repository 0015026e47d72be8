"""Engine messages too large for the relay, made to fit.

An engine message goes to the control plane as one gRPC message, which has a maximum size; one
larger than that would be refused on every resend and hold up every output behind it. So a message
whose JSON is larger than the cap has its longest strings (an image a tool read, a huge command
output) replaced by a short marker, longest first, until it fits; everything else stays as it was
(its types, ids, tool calls and results, short texts), so the control plane reads it as before. The
message then says how many bytes were left out, under `ELIDED_KEY`. Only if eliding strings cannot
make it fit (a message of countless small parts) is it cut down to its short top-level fields.
"""

from __future__ import annotations

import json
from typing import Any

# The key an elided message carries: how many bytes of its JSON were left out.
ELIDED_KEY = "astrabox_elided_bytes"
# Room kept for the marker key and the worst case of the estimate below.
_RESERVE = 4096
# A top-level field kept by the last resort: at most this long as JSON.
_SHORT_FIELD = 1024


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode())


def fitted_json(payload: Any, max_bytes: int) -> tuple[str, int]:
    """`payload` as JSON (values JSON cannot hold as their `str`) of at most `max_bytes` UTF-8 bytes,
    and how many bytes were elided to make it so (0: none, the plain `json.dumps`)."""
    text = json.dumps(payload, default=str)
    size = _utf8_len(text)
    if size <= max_bytes:
        return text, 0
    data = json.loads(text)
    excess = size - max_bytes + _RESERVE
    for length, container, key in _strings_longest_first(data):
        if excess <= 0:
            break
        marker = f"[{length} bytes elided by AstraBox]"
        if length <= len(marker) + 2:
            break  # the rest are no longer than their marker would be: eliding them saves nothing
        container[key] = marker
        excess -= length - len(marker) - 2
    if isinstance(data, dict):
        data[ELIDED_KEY] = size
        fitted = json.dumps(data)
        if (fitted_size := _utf8_len(fitted)) <= max_bytes:
            data[ELIDED_KEY] = size - fitted_size
            return json.dumps(data), size - fitted_size
        short = {k: v for k, v in data.items() if len(json.dumps(v)) <= _SHORT_FIELD}
        short[ELIDED_KEY] = size
        fitted = json.dumps(short)
        if _utf8_len(fitted) <= max_bytes:
            return fitted, size
    return json.dumps({ELIDED_KEY: size}), size


def _strings_longest_first(data: Any) -> list[tuple[int, Any, Any]]:
    """Every string value in `data` (nested dicts and lists, walked without recursion) as (its size
    as JSON in UTF-8 bytes, its container, its key or index), longest first."""
    found: list[tuple[int, Any, Any]] = []
    stack = [data]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            if isinstance(value, str):
                found.append((_utf8_len(json.dumps(value)), node, key))
            elif isinstance(value, (dict, list)):
                stack.append(value)
    found.sort(key=lambda entry: entry[0], reverse=True)
    return found
