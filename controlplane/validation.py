"""Checks on request fields, raising InvalidArgument with an actionable message."""

from __future__ import annotations

import re
import uuid

from controlplane.engines import MANIFESTS, EngineManifest
from controlplane.errors import InvalidArgument

_CLIENT_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
MAX_MESSAGE_BYTES = 256 * 1024


def session_id(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise InvalidArgument("session_id", f"session_id must be a UUID, got {value[:80]!r}") from None


def client_id(field: str, value: str) -> str:
    if not _CLIENT_ID.match(value):
        raise InvalidArgument(field, f"{field} must be 1-128 characters of [A-Za-z0-9._:-], got {value[:80]!r}")
    return value


def message_text(value: str) -> str:
    if not value.strip():
        raise InvalidArgument("text", "text must not be empty")
    if len(value.encode()) > MAX_MESSAGE_BYTES:
        raise InvalidArgument("text", f"text must be at most {MAX_MESSAGE_BYTES} bytes")
    return value


def engine(value: str) -> EngineManifest:
    manifest = MANIFESTS.get(value)
    if manifest is None:
        raise InvalidArgument("engine", f"unknown engine {value!r}; known engines: {', '.join(sorted(MANIFESTS))}")
    return manifest


def permission_mode(manifest: EngineManifest, value: str) -> str:
    if value not in manifest.permission_modes:
        raise InvalidArgument(
            "permission_mode",
            f"unknown permission mode {value!r} for {manifest.kind}; valid: {', '.join(manifest.permission_modes)}",
            reason="PERMISSION_MODE_INVALID",
        )
    return value


def page_size(value: int, default: int, maximum: int) -> int:
    if value < 0 or value > maximum:
        raise InvalidArgument("page_size", f"page_size must be between 0 and {maximum}, got {value}")
    return value or default
