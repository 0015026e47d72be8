"""The `schedule_runs` table: one row per (schedule, tick), the tick's run and its outcome.

The primary key makes a tick run once however many replicas claim it. A run in a transitional
state (creating, starting) is worked on by the replica whose lease (`leased_until`) it holds,
and by any replica once that lapsed.
"""

from __future__ import annotations

import uuid
from datetime import datetime

import asyncpg

CREATING = "creating"
STARTING = "starting"
STARTED = "started"
FAILED = "failed"

# A run with the spec and name of its schedule, and the project: what a replica needs to work on it.
_WITH_SCHEDULE = "SELECT r.*, s.project_id, s.name, s.spec FROM schedule_runs r JOIN schedules s USING (schedule_id)"


async def insert(
    conn: asyncpg.Connection,
    schedule_id: uuid.UUID,
    tick_at: datetime,
    missed: int,
    leased_until: datetime,
    deadline_at: datetime,
) -> bool:
    """A claimed tick's run, leased to the claiming replica; False when the tick has one already."""
    done = await conn.execute(
        "INSERT INTO schedule_runs (schedule_id, tick_at, state, missed_ticks, leased_until, deadline_at, attempts)"
        " VALUES ($1, $2, 'creating', $3, $4, $5, 1) ON CONFLICT DO NOTHING",
        schedule_id,
        tick_at,
        missed,
        leased_until,
        deadline_at,
    )
    return bool(done == "INSERT 0 1")


async def with_schedule(
    db: asyncpg.Connection | asyncpg.Pool, schedule_id: uuid.UUID, tick_at: datetime
) -> asyncpg.Record | None:
    return await db.fetchrow(f"{_WITH_SCHEDULE} WHERE schedule_id = $1 AND tick_at = $2", schedule_id, tick_at)


async def lease_open(
    db: asyncpg.Connection | asyncpg.Pool, now: datetime, leased_until: datetime, limit: int
) -> list[asyncpg.Record]:
    """Take the lease of up to `limit` runs in a transitional state whose lease lapsed (their
    replica died, or let go to be looked at again); each with its schedule."""
    rows: list[asyncpg.Record] = await db.fetch(
        "WITH taken AS ("
        "  UPDATE schedule_runs SET leased_until = $2, attempts = attempts + 1"
        "  WHERE (schedule_id, tick_at) IN ("
        "    SELECT schedule_id, tick_at FROM schedule_runs"
        "    WHERE state IN ('creating', 'starting') AND leased_until <= $1"
        "    ORDER BY leased_until LIMIT $3 FOR UPDATE SKIP LOCKED)"
        "  RETURNING *)"
        " SELECT t.*, s.project_id, s.name, s.spec FROM taken t JOIN schedules s USING (schedule_id)",
        now,
        leased_until,
        limit,
    )
    return rows


async def created(
    db: asyncpg.Connection | asyncpg.Pool, schedule_id: uuid.UUID, tick_at: datetime, session_id: str, look_at: datetime
) -> bool:
    """Its session is made: the run waits for it to be ready, looked at again from `look_at`."""
    done = await db.execute(
        "UPDATE schedule_runs SET state = 'starting', session_id = $3, leased_until = $4, updated_at = now()"
        " WHERE schedule_id = $1 AND tick_at = $2 AND state = 'creating'",
        schedule_id,
        tick_at,
        uuid.UUID(session_id),
        look_at,
    )
    return bool(done == "UPDATE 1")


async def look_again(
    db: asyncpg.Connection | asyncpg.Pool, schedule_id: uuid.UUID, tick_at: datetime, look_at: datetime
) -> None:
    """Let go of a run not finished yet, to be looked at again from `look_at` (by any replica)."""
    await db.execute(
        "UPDATE schedule_runs SET leased_until = $3 WHERE schedule_id = $1 AND tick_at = $2"
        " AND state IN ('creating', 'starting')",
        schedule_id,
        tick_at,
        look_at,
    )


async def retry_after_refusal(
    db: asyncpg.Connection | asyncpg.Pool,
    schedule_id: uuid.UUID,
    tick_at: datetime,
    look_at: datetime,
    reason: str,
    message: str,
) -> None:
    """Let go of a run the kernel refused, to be tried again from `look_at`; it shows the refusal meanwhile."""
    await db.execute(
        "UPDATE schedule_runs SET leased_until = $3, error_reason = $4, error_message = $5, updated_at = now()"
        " WHERE schedule_id = $1 AND tick_at = $2 AND state IN ('creating', 'starting')",
        schedule_id,
        tick_at,
        look_at,
        reason,
        message,
    )


async def finish(
    db: asyncpg.Connection | asyncpg.Pool,
    schedule_id: uuid.UUID,
    tick_at: datetime,
    state: str,
    reason: str = "",
    message: str = "",
) -> bool:
    """The run's outcome (STARTED, or FAILED with why), once: a run already finished stays as it was."""
    done = await db.execute(
        "UPDATE schedule_runs SET state = $3, error_reason = $4, error_message = $5, updated_at = now()"
        " WHERE schedule_id = $1 AND tick_at = $2 AND state IN ('creating', 'starting')",
        schedule_id,
        tick_at,
        state,
        reason,
        message,
    )
    return bool(done == "UPDATE 1")


async def page(
    db: asyncpg.Connection | asyncpg.Pool, schedule_id: uuid.UUID, before: datetime | None, limit: int
) -> list[asyncpg.Record]:
    """The schedule's runs, newest tick first, before the tick `before` (None: from the newest)."""
    rows: list[asyncpg.Record] = await db.fetch(
        "SELECT * FROM schedule_runs WHERE schedule_id = $1 AND ($2::timestamptz IS NULL OR tick_at < $2)"
        " ORDER BY tick_at DESC LIMIT $3",
        schedule_id,
        before,
        limit,
    )
    return rows


async def prune(conn: asyncpg.Connection, schedule_id: uuid.UUID, keep: int) -> None:
    """Keep the schedule's newest `keep` runs (finished ones older than those are deleted)."""
    await conn.execute(
        "DELETE FROM schedule_runs WHERE schedule_id = $1 AND state IN ('started', 'failed') AND tick_at < ("
        " SELECT tick_at FROM schedule_runs WHERE schedule_id = $1 ORDER BY tick_at DESC OFFSET $2 LIMIT 1)",
        schedule_id,
        keep,
    )
