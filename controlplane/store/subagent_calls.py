"""The `subagent_calls` table: a parent session's calls of its agent's sub-agents (`controlplane.subagents`).

A call in a transitional state (creating, starting, running) is moved on by the replica whose
lease (`lease_until`) it holds, and by any replica once that lapsed; `done` is final.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

import asyncpg

CREATING = "creating"
STARTING = "starting"
RUNNING = "running"
DONE = "done"


async def insert(
    conn: asyncpg.Connection,
    parent_session_id: str,
    interaction_id: str,
    project_id: uuid.UUID,
    parent_turn_id: str,
    tool_use_id: str,
    agent: str,
    prompt: str,
    depth: int,
) -> None:
    """A new call, to be created by the next sweep; one reported again keeps its first row."""
    await conn.execute(
        "INSERT INTO subagent_calls (parent_session_id, interaction_id, project_id, parent_turn_id, tool_use_id,"
        " agent, prompt, depth) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING",
        parent_session_id,
        interaction_id,
        project_id,
        parent_turn_id,
        tool_use_id,
        agent,
        prompt,
        depth,
    )


async def depth_of(db: asyncpg.Connection | asyncpg.Pool, session_id: str) -> int:
    """How deep `session_id` is among sub-agents: 0 for a session no call started."""
    depth: int | None = await db.fetchval("SELECT depth FROM subagent_calls WHERE child_session_id = $1", session_id)
    return depth or 0


async def lease_open(
    db: asyncpg.Connection | asyncpg.Pool, now: datetime, lease_until: datetime, limit: int
) -> list[asyncpg.Record]:
    """Take the lease of up to `limit` open calls whose lease lapsed, oldest first."""
    rows: list[asyncpg.Record] = await db.fetch(
        "UPDATE subagent_calls SET lease_until = $2 WHERE (parent_session_id, interaction_id) IN ("
        "  SELECT parent_session_id, interaction_id FROM subagent_calls"
        "  WHERE state <> 'done' AND lease_until <= $1 ORDER BY lease_until LIMIT $3 FOR UPDATE SKIP LOCKED"
        ") RETURNING *",
        now,
        lease_until,
        limit,
    )
    return rows


async def lock(conn: asyncpg.Connection, parent_session_id: str, interaction_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "SELECT * FROM subagent_calls WHERE parent_session_id = $1 AND interaction_id = $2 FOR UPDATE",
        parent_session_id,
        interaction_id,
    )


async def created(
    conn: asyncpg.Connection, parent_session_id: str, interaction_id: str, child_session_id: str, agent_version: int
) -> None:
    await conn.execute(
        "UPDATE subagent_calls SET state = 'starting', child_session_id = $3, agent_version = $4"
        " WHERE parent_session_id = $1 AND interaction_id = $2",
        parent_session_id,
        interaction_id,
        child_session_id,
        agent_version,
    )


async def started(conn: asyncpg.Connection, parent_session_id: str, interaction_id: str, child_turn_id: str) -> None:
    await conn.execute(
        "UPDATE subagent_calls SET state = 'running', child_turn_id = $3"
        " WHERE parent_session_id = $1 AND interaction_id = $2",
        parent_session_id,
        interaction_id,
        child_turn_id,
    )


async def finish(
    conn: asyncpg.Connection, parent_session_id: str, interaction_id: str, is_error: bool, reason: str
) -> None:
    await conn.execute(
        "UPDATE subagent_calls SET state = 'done', is_error = $3, reason = $4, finished_at = now()"
        " WHERE parent_session_id = $1 AND interaction_id = $2",
        parent_session_id,
        interaction_id,
        is_error,
        reason,
    )


async def look_again(
    db: asyncpg.Connection | asyncpg.Pool, parent_session_id: str, interaction_id: str, at: datetime
) -> None:
    """Let go of the call until `at` (its child is not there yet)."""
    await db.execute(
        "UPDATE subagent_calls SET lease_until = $3 WHERE parent_session_id = $1 AND interaction_id = $2",
        parent_session_id,
        interaction_id,
        at,
    )


async def forget_sessions(conn: asyncpg.Connection, session_ids: Sequence[str]) -> int:
    """Delete the calls the sessions made or ran (retention: `controlplane.retention`); how many."""
    deleted: int = await conn.fetchval(
        "WITH gone AS (DELETE FROM subagent_calls WHERE parent_session_id = ANY($1::uuid[])"
        " OR child_session_id = ANY($1::uuid[]) RETURNING 1) SELECT count(*) FROM gone",
        list(session_ids),
    )
    return deleted
