"""The `agent_commands` table: commands for agents, numbered per agent, kept until acknowledged and
then for a retention period (the sweep prunes them)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import asyncpg


async def insert(
    conn: asyncpg.Connection, agent_id: str, command_seq: int, command_id: str, session_id: str, body: bytes
) -> None:
    await conn.execute(
        "INSERT INTO agent_commands (agent_id, command_seq, command_id, session_id, body) VALUES ($1, $2, $3, $4, $5)",
        agent_id,
        command_seq,
        command_id,
        session_id,
        body,
    )


async def unacked(
    db: asyncpg.Connection | asyncpg.Pool, agent_id: str, after_seq: int, limit: int
) -> list[asyncpg.Record]:
    """The agent's unacknowledged commands after `after_seq`, in order: command_seq, command_id, session_id, body."""
    rows: list[asyncpg.Record] = await db.fetch(
        "SELECT command_seq, command_id, session_id::text AS session_id, body FROM agent_commands"
        " WHERE agent_id = $1 AND acked_at IS NULL AND command_seq > $2 ORDER BY command_seq LIMIT $3",
        agent_id,
        after_seq,
        limit,
    )
    return rows


async def unacked_for_session(conn: asyncpg.Connection, session_id: str) -> list[asyncpg.Record]:
    """The session's commands no agent has acknowledged: agent_id, command_seq, body."""
    rows: list[asyncpg.Record] = await conn.fetch(
        "SELECT agent_id, command_seq, body FROM agent_commands WHERE session_id = $1 AND acked_at IS NULL"
        " ORDER BY agent_id, command_seq",
        session_id,
    )
    return rows


async def acknowledge(conn: asyncpg.Connection, agent_id: str, command_seq: int, error: str) -> asyncpg.Record | None:
    """Record the agent's verdict (an empty `error`: done); the command's session_id and body, None
    when it was acknowledged already (or is unknown)."""
    return await conn.fetchrow(
        "UPDATE agent_commands SET acked_at = now(), error = NULLIF($3, '')"
        " WHERE agent_id = $1 AND command_seq = $2 AND acked_at IS NULL RETURNING session_id, body",
        agent_id,
        command_seq,
        error,
    )


async def prune_done(db: asyncpg.Connection | asyncpg.Pool, older_than: timedelta, limit: int) -> int:
    """Delete up to `limit` commands acknowledged more than `older_than` ago, oldest first; how many."""
    deleted: int = await db.fetchval(
        "WITH done AS (DELETE FROM agent_commands WHERE (agent_id, command_seq) IN"
        " (SELECT agent_id, command_seq FROM agent_commands WHERE acked_at < now() - $1::interval"
        "  ORDER BY acked_at LIMIT $2) RETURNING 1)"
        " SELECT count(*) FROM done",
        older_than,
        limit,
    )
    return deleted


async def outcome(db: asyncpg.Connection | asyncpg.Pool, command_id: str) -> str | None:
    """The agent's verdict on the command: "" done, else its error; None while unacknowledged."""
    row = await db.fetchrow("SELECT acked_at, error FROM agent_commands WHERE command_id = $1", command_id)
    if row is None or row["acked_at"] is None:
        return None
    return str(row["error"] or "")


async def forget_sessions(conn: asyncpg.Connection, session_ids: Sequence[str]) -> int:
    """Delete the sessions' rows (acknowledged ones only: the sweep takes no session with one pending) (retention: `controlplane.retention`); how many."""
    deleted: int = await conn.fetchval(
        "WITH gone AS (DELETE FROM agent_commands WHERE session_id = ANY($1::uuid[]) AND acked_at IS NOT NULL RETURNING 1)"
        " SELECT count(*) FROM gone",
        list(session_ids),
    )
    return deleted


async def pending_by_agent(
    db: asyncpg.Connection | asyncpg.Pool, agent_ids: Sequence[str]
) -> dict[str, tuple[int, datetime]]:
    """Per agent with any: how many of its commands wait for an acknowledgement, and the oldest's time."""
    rows = await db.fetch(
        "SELECT agent_id, count(*) AS n, min(created_at) AS oldest FROM agent_commands"
        " WHERE agent_id = ANY($1::text[]) AND acked_at IS NULL GROUP BY agent_id",
        list(agent_ids),
    )
    return {row["agent_id"]: (row["n"], row["oldest"]) for row in rows}
