"""The `open_tool_calls` table: the engine's tool calls that have no result yet."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg


async def open_calls(conn: asyncpg.Connection, session_id: str, turn_id: str, calls: Sequence[tuple[str, str]]) -> None:
    """Record the (tool_use_id, tool_name) calls of the turn as waiting for their results; a call
    recorded already keeps its row."""
    await conn.executemany(
        "INSERT INTO open_tool_calls (session_id, tool_use_id, turn_id, tool_name) VALUES ($1, $2, $3, $4)"
        " ON CONFLICT DO NOTHING",
        [(session_id, tool_use_id, turn_id, name) for tool_use_id, name in calls],
    )


async def answered(conn: asyncpg.Connection, session_id: str, tool_use_ids: Sequence[str]) -> None:
    """These calls got their results."""
    await conn.execute(
        "DELETE FROM open_tool_calls WHERE session_id = $1 AND tool_use_id = ANY($2::text[])",
        session_id,
        list(tool_use_ids),
    )


async def take(conn: asyncpg.Connection, session_id: str, turn_id: str | None = None) -> list[asyncpg.Record]:
    """Remove and return the session's open calls (of `turn_id` only, when given), oldest first:
    tool_use_id, tool_name, turn_id."""
    rows: list[asyncpg.Record] = await conn.fetch(
        "WITH taken AS (DELETE FROM open_tool_calls WHERE session_id = $1 AND ($2::text IS NULL OR turn_id = $2)"
        " RETURNING tool_use_id, tool_name, turn_id, opened_at)"
        " SELECT tool_use_id, tool_name, turn_id FROM taken ORDER BY opened_at, tool_use_id",
        session_id,
        turn_id,
    )
    return rows


async def forget_sessions(conn: asyncpg.Connection, session_ids: Sequence[str]) -> int:
    """Delete the sessions' rows (retention: `controlplane.retention`); how many."""
    deleted: int = await conn.fetchval(
        "WITH gone AS (DELETE FROM open_tool_calls WHERE session_id = ANY($1::uuid[]) RETURNING 1)"
        " SELECT count(*) FROM gone",
        list(session_ids),
    )
    return deleted
