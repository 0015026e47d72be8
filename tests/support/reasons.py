"""The ErrorInfo reasons the protos document, and those the tests saw: every reason a client can
receive must be listed in a service's proto header (the comment before `service`)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICE_PROTOS = sorted((ROOT / "proto").rglob("*_service.proto"))
# Services a client calls (RunnerService is the agents' and the replicas').
CLIENT_SERVICES = (
    "session_kernel_service",
    "admin_service",
    "agent_service",
    "environment_service",
    "credential_service",
    "webhook_service",
    "schedule_service",
    "memory_service",
)
_REASON = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b|\bINTERNAL\b")


def header(path: Path) -> str:
    """The comment block before the file's `service` (what a reader of the service sees first)."""
    text = path.read_text()
    return text[: text.index("\nservice ")]


def documented(path: Path) -> set[str]:
    return set(_REASON.findall(header(path)))


def all_documented() -> set[str]:
    return set().union(*(documented(path) for path in SERVICE_PROTOS))


# Reasons the tests received through the SDK (tests/conftest.py records them; checked at the end).
SEEN: dict[str, str] = {}
