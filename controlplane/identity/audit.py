"""The audit trail: every mutating call, who made it and how it ended (the `audit_records` table).

`identity.authenticator` records each call whose rule `mutates`, after its
handler has ended, with the caller (`key:<id>` or `oidc:<subject>`), the
session and the other identifiers the request named (`IDENTIFIERS`: never
text, files or secrets) and the status code. AdminService.ListAuditRecords and
`astrabox audit` read it.

A refused call is recorded like any other, and its identifiers are what a
caller chose: a NUL (which PostgreSQL's text and jsonb refuse), a lone
surrogate (which no UTF-8 encodes), megabytes. So every text recorded (the
actor, the method, each detail's name and value, a session id that is no UUID)
is first made `recorded`: control characters and lone surrogates escaped, each
value cut, and no content can make the insert fail.
"""

from __future__ import annotations

import unicodedata
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
    # MemoryService: the store a call names.
    "store",
)

# The characters of a recorded text past which the rest is cut (`recorded`).
MAX_RECORDED_CHARS = 128
# Escaped: control characters (C0, DEL, C1), format characters (bidirectional overrides, zero
# widths), lone surrogates, line and paragraph separators; and the backslash, so an escape is never
# ambiguous.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _escape(char: str) -> str:
    if char == "\\":
        return "\\\\"
    if unicodedata.category(char) not in _ESCAPED_CATEGORIES:
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def recorded(value: str, limit: int = MAX_RECORDED_CHARS) -> str:
    """`value` as the audit trail keeps it: a backslash as `\\\\`; a control, format or separator
    character or a lone surrogate as `\\xNN`, `\\uNNNN` or `\\UNNNNNNNN` (Python's escapes); at most
    `limit` characters of that (an escape is never split), then, when some were cut,
    `…[N more characters]` (N of `value`)."""
    kept: list[str] = []
    used = 0
    for index, char in enumerate(value[: limit + 1]):
        piece = _escape(char)
        if used + len(piece) > limit:
            return "".join(kept) + f"…[{len(value) - index} more characters]"
        kept.append(piece)
        used += len(piece)
    return "".join(kept)


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
    except (ValueError, TypeError, AttributeError):
        return None


def _details(request: Any, session_id: uuid.UUID | None) -> dict[str, str]:
    """The identifiers `request` named, `recorded`; its session id among them when it is no UUID
    (the column holds only UUIDs; a refused call's id is still worth reading)."""
    names = IDENTIFIERS if session_id is not None else ("session_id", *IDENTIFIERS)
    found = {}
    for name in names:
        value = getattr(request, name, None)
        if isinstance(value, str) and value:
            found[recorded(name)] = recorded(value)
    return found


async def record(pool: asyncpg.Pool, caller: Caller, method: str, request: Any, code: str) -> None:
    """Record one call, its texts `recorded`; a fault of the database is logged, never the caller's
    problem (the call is over)."""
    session_id = _session_id(request)
    actor = recorded(caller.who)
    try:
        await pool.execute(
            "INSERT INTO audit_records (project_id, actor, method, session_id, details, code)"
            " VALUES ($1, $2, $3, $4, $5, $6)",
            caller.project_id,
            actor,
            recorded(method),
            session_id,
            _details(request, session_id),
            recorded(code),
        )
    except (asyncpg.PostgresError, *database.FAULTS) as error:
        log.error("audit_record_lost", method=recorded(method), caller=actor, code=code, error=type(error).__name__)


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
