"""The `background_tasks` table: tasks the engine reported, open until a terminal status arrives."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from controlplane.session import BackgroundTaskState


async def insert(conn: asyncpg.Connection, session_id: str, task_id: str, description: str, started_seq: int) -> None:
    """Record a started task; a task reported again keeps its first row."""
    await conn.execute(
        "INSERT INTO background_tasks (session_id, task_id, description, started_seq) VALUES ($1, $2, $3, $4)"
        " ON CONFLICT DO NOTHING",
        session_id,
        task_id,
        description,
        started_seq,
    )


async def set_state(conn: asyncpg.Connection, session_id: str, task_id: str, state: BackgroundTaskState) -> None:
    await conn.execute(
        "UPDATE background_tasks SET state = $3 WHERE session_id = $1 AND task_id = $2",
        session_id,
        task_id,
        state.value,
    )


async def state_of(conn: asyncpg.Connection, session_id: str, task_id: str) -> str | None:
    """The task's state as stored; None when the session has no such task."""
    state: str | None = await conn.fetchval(
        "SELECT state FROM background_tasks WHERE session_id = $1 AND task_id = $2", session_id, task_id
    )
    return state


async def lose_open(conn: asyncpg.Connection, session_id: str) -> list[asyncpg.Record]:
    """Mark the session's open tasks lost; returns them, oldest first: task_id, description."""
    rows: list[asyncpg.Record] = await conn.fetch(
        "WITH lost AS (UPDATE background_tasks SET state = $2 WHERE session_id = $1 AND state = $3"
        " RETURNING task_id, description, started_seq)"
        " SELECT task_id, description FROM lost ORDER BY started_seq",
        session_id,
        BackgroundTaskState.LOST.value,
        BackgroundTaskState.OPEN.value,
    )
    return rows


async def forget_sessions(conn: asyncpg.Connection, session_ids: Sequence[str]) -> int:
    """Delete the sessions' rows (retention: `controlplane.retention`); how many."""
    deleted: int = await conn.fetchval(
        "WITH gone AS (DELETE FROM background_tasks WHERE session_id = ANY($1::uuid[]) RETURNING 1)"
        " SELECT count(*) FROM gone",
        list(session_ids),
    )
    return deleted


async def count_open(db: asyncpg.Connection | asyncpg.Pool) -> int:
    """How many tasks are open, across every session (the metrics' gauge; cached there)."""
    count: int = await db.fetchval(
        "SELECT count(*) FROM background_tasks WHERE state = $1", BackgroundTaskState.OPEN.value
    )
    return count
