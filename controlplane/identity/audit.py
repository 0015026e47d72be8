"""The audit trail: every mutating call, who made it and how it ended (the `audit_records` table).

`identity.authenticator` records each call whose rule `mutates`, after its
handler has ended, with the caller (`key:<id>` or `oidc:<subject>`), the
session and the other identifiers the request named (`IDENTIFIERS`: never
text, files or secrets) and the status code. AdminService.ListAuditRecords and
`astrabox audit` read it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
import structlog

from controlplane import database
from controlplane.identity.callers import Caller

log = structlog.get_logger(__name__)

# The request fields worth recording; each holds an identifier the caller chose, bounded at the edge.
IDENTIFIERS = (
    "key_id",
    "project_id",
    "name",
    "agent",
    "agent_id",
    "environment",
    "interaction_id",
    "task_id",
    "request_id",
    "client_message_id",
)


@dataclass(frozen=True, slots=True)
class AuditRecord:
    record_id: int
    at: datetime
    project_id: uuid.UUID
    actor: str
    method: str
    session_id: uuid.UUID | None
    details: dict[str, str]
    code: str


def _session_id(request: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(getattr(request, "session_id", "") or "")
    except (ValueError, TypeError):
        return None


def _details(request: Any) -> dict[str, str]:
    found = {}
    for name in IDENTIFIERS:
        value = getattr(request, name, None)
        if isinstance(value, str) and value:
            found[name] = value[:128]
    return found


async def record(pool: asyncpg.Pool, caller: Caller, method: str, request: Any, code: str) -> None:
    """Record one call; a failure to write is logged, never the caller's problem (the call is over)."""
    try:
        await pool.execute(
            "INSERT INTO audit_records (project_id, actor, method, session_id, details, code)"
            " VALUES ($1, $2, $3, $4, $5, $6)",
            caller.project_id,
            caller.who,
            method,
            _session_id(request),
            _details(request),
            code,
        )
    except (asyncpg.PostgresError, *database.FAULTS) as error:  # a fault, or a value jsonb refuses (a NUL)
        log.error("audit_record_lost", method=method, caller=caller.who, code=code, error=type(error).__name__)


async def page(
    pool: asyncpg.Pool, project_id: uuid.UUID, session_id: uuid.UUID | None, before: int | None, limit: int
) -> list[AuditRecord]:
    rows = await pool.fetch(
        "SELECT * FROM audit_records WHERE project_id = $1 AND ($2::uuid IS NULL OR session_id = $2)"
        " AND ($3::bigint IS NULL OR record_id < $3) ORDER BY record_id DESC LIMIT $4",
        project_id,
        session_id,
        before,
        limit,
    )
    return [
        AuditRecord(
            r["record_id"], r["at"], r["project_id"], r["actor"], r["method"], r["session_id"], r["details"], r["code"]
        )
        for r in rows
    ]
