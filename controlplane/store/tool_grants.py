"""The `tool_grants` table: tools a session may use without asking (controlplane.tool_grants)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

import asyncpg

# A grant is in force while not revoked and not expired (the table's alias: g).
IN_FORCE = "g.revoked_at IS NULL AND (g.expires_at IS NULL OR g.expires_at > now())"


async def insert(
    conn: asyncpg.Connection,
    grant_id: uuid.UUID,
    session_id: str,
    interaction_id: str,
    tool_name: str,
    input_pattern: str,
    expires_at: datetime | None,
) -> asyncpg.Record:
    """Record a grant; returns its row."""
    row: asyncpg.Record = await conn.fetchrow(
        "INSERT INTO tool_grants (grant_id, session_id, interaction_id, tool_name, input_pattern, expires_at)"
        " VALUES ($1, $2, $3, $4, $5, $6) RETURNING *",
        grant_id,
        session_id,
        interaction_id,
        tool_name,
        input_pattern,
        expires_at,
    )
    return row


async def in_force(db: asyncpg.Connection | asyncpg.Pool, session_id: str) -> list[asyncpg.Record]:
    """The session's grants in force, oldest first."""
    rows: list[asyncpg.Record] = await db.fetch(
        f"SELECT * FROM tool_grants g WHERE g.session_id = $1 AND {IN_FORCE} ORDER BY g.created_at, g.grant_id",
        session_id,
    )
    return rows


async def revoke(conn: asyncpg.Connection, session_id: str, grant_id: uuid.UUID) -> bool | None:
    """Revoke the session's grant: True now, False when it was revoked before, None when the session
    has no such grant."""
    row = await conn.fetchrow(
        "SELECT revoked_at FROM tool_grants WHERE session_id = $1 AND grant_id = $2 FOR UPDATE", session_id, grant_id
    )
    if row is None:
        return None
    if row["revoked_at"] is not None:
        return False
    await conn.execute("UPDATE tool_grants SET revoked_at = now() WHERE grant_id = $1", grant_id)
    return True


async def forget_sessions(conn: asyncpg.Connection, session_ids: Sequence[str]) -> int:
    """Delete the sessions' rows (retention: `controlplane.retention`); how many."""
    deleted: int = await conn.fetchval(
        "WITH gone AS (DELETE FROM tool_grants WHERE session_id = ANY($1::uuid[]) RETURNING 1)"
        " SELECT count(*) FROM gone",
        list(session_ids),
    )
    return deleted
