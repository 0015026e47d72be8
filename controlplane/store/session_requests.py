"""The `session_requests` table: the request ids session commands other than SendMessage were taken with."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg


async def insert(conn: asyncpg.Connection, session_id: str, request_id: str, kind: str, fingerprint: str) -> bool:
    """Record the request; False when the session has one with this id already."""
    inserted = await conn.fetchval(
        "INSERT INTO session_requests (session_id, request_id, kind, fingerprint) VALUES ($1, $2, $3, $4)"
        " ON CONFLICT DO NOTHING RETURNING true",
        session_id,
        request_id,
        kind,
        fingerprint,
    )
    return bool(inserted)


async def fingerprint_of(conn: asyncpg.Connection, session_id: str, request_id: str) -> str | None:
    fingerprint: str | None = await conn.fetchval(
        "SELECT fingerprint FROM session_requests WHERE session_id = $1 AND request_id = $2", session_id, request_id
    )
    return fingerprint


async def forget_sessions(conn: asyncpg.Connection, session_ids: Sequence[str]) -> int:
    """Delete the sessions' rows (retention: `controlplane.retention`); how many."""
    deleted: int = await conn.fetchval(
        "WITH gone AS (DELETE FROM session_requests WHERE session_id = ANY($1::uuid[]) RETURNING 1)"
        " SELECT count(*) FROM gone",
        list(session_ids),
    )
    return deleted
