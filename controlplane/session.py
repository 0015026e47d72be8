"""The session projection: its states and the record read from the sessions table."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


class SessionState(enum.Enum):
    CREATING = "creating"
    READY = "ready"
    RUNNING = "running"
    WAITING_FOR_INPUT = "waiting_for_input"
    INTERRUPTING = "interrupting"
    ARCHIVED = "archived"
    DELETED = "deleted"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class SessionRecord:
    session_id: str
    request_id: str
    engine: str
    permission_mode: str
    model: str
    state: SessionState
    runtime_available: bool
    agent_id: str
    current_turn_id: str
    engine_session_id: str
    failure_reason: str
    last_seq: int
    created_at: datetime
    updated_at: datetime
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> SessionRecord:
        return cls(
            session_id=str(row["session_id"]),
            request_id=row["request_id"],
            engine=row["engine"],
            permission_mode=row["permission_mode"],
            model=row["model"],
            state=SessionState(row["state"]),
            runtime_available=row["runtime_available"],
            agent_id=row["agent_id"] or "",
            current_turn_id=row["current_turn_id"] or "",
            engine_session_id=row["engine_session_id"],
            failure_reason=row["failure_reason"],
            last_seq=row["last_seq"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            labels=dict(row["labels"]),
        )
