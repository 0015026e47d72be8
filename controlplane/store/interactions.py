"""The `interactions` table: questions the engine asked a human; at most one pending per session."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg


async def insert(
    conn: asyncpg.Connection,
    interaction_id: str,
    session_id: str,
    turn_id: str,
    kind: str,
    tool_name: str,
    tool_input: Mapping[str, Any],
    tool_use_id: str,
    requested_seq: int,
) -> None:
    """Record a pending interaction; one reported again keeps its first row."""
    await conn.execute(
        "INSERT INTO interactions (interaction_id, session_id, turn_id, kind, tool_name, input, tool_use_id,"
        " requested_seq) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING",
        interaction_id,
        session_id,
        turn_id,
        kind,
        tool_name,
        tool_input,
        tool_use_id,
        requested_seq,
    )


async def lock(conn: asyncpg.Connection, session_id: str, interaction_id: str) -> asyncpg.Record | None:
    """The session's interaction, locked for the rest of the transaction."""
    return await conn.fetchrow(
        "SELECT * FROM interactions WHERE interaction_id = $1 AND session_id = $2 FOR UPDATE",
        interaction_id,
        session_id,
    )


async def answer(conn: asyncpg.Connection, interaction_id: str, request_id: str, answer: Mapping[str, Any]) -> None:
    await conn.execute(
        "UPDATE interactions SET state = 'answered', request_id = $2, answer = $3, settled_at = now()"
        " WHERE interaction_id = $1",
        interaction_id,
        request_id,
        answer,
    )


async def close_pending(conn: asyncpg.Connection, session_id: str) -> str | None:
    """Close the session's pending interaction without an answer; its id, None when there was none."""
    interaction_id: str | None = await conn.fetchval(
        "UPDATE interactions SET state = 'closed', settled_at = now()"
        " WHERE session_id = $1 AND state = 'pending' RETURNING interaction_id",
        session_id,
    )
    return interaction_id


async def forget_sessions(conn: asyncpg.Connection, session_ids: Sequence[str]) -> int:
    """Delete the sessions' rows (retention: `controlplane.retention`); how many."""
    deleted: int = await conn.fetchval(
        "WITH gone AS (DELETE FROM interactions WHERE session_id = ANY($1::uuid[]) RETURNING 1)"
        " SELECT count(*) FROM gone",
        list(session_ids),
    )
    return deleted


async def state_of(db: asyncpg.Connection | asyncpg.Pool, session_id: str, interaction_id: str) -> str | None:
    """The interaction's state (pending, answered, closed); None when the session has none such."""
    state: str | None = await db.fetchval(
        "SELECT state FROM interactions WHERE interaction_id = $1 AND session_id = $2", interaction_id, session_id
    )
    return state
