"""The `schedules` table: a project's cron schedules (ScheduleService), their spec, whether they are
paused, and their next tick not yet claimed.

Every statement a caller reaches names the project: a schedule of another project is never read,
locked or changed. The scheduler's own statements (`due`, `lock_due`, `advance`) go by id.
"""

from __future__ import annotations

import uuid
from datetime import datetime

import asyncpg


def _named(ref: uuid.UUID | str) -> str:
    """The condition that picks the project's ($1) schedule named by `ref` ($2): its id or its name."""
    return "project_id = $1 AND " + ("schedule_id = $2" if isinstance(ref, uuid.UUID) else "name = $2")


async def insert(
    conn: asyncpg.Connection,
    schedule_id: uuid.UUID,
    project_id: uuid.UUID,
    name: str,
    spec: bytes,
    paused: bool,
    next_tick_at: datetime,
    request_id: str,
) -> asyncpg.Record | None:
    """None when the project has a schedule with this name or made with this request id already."""
    return await conn.fetchrow(
        "INSERT INTO schedules (schedule_id, project_id, name, spec, paused, next_tick_at, request_id)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING RETURNING *",
        schedule_id,
        project_id,
        name,
        spec,
        paused,
        next_tick_at,
        request_id,
    )


async def count(conn: asyncpg.Connection, project_id: uuid.UUID) -> int:
    found: int = await conn.fetchval("SELECT count(*) FROM schedules WHERE project_id = $1", project_id)
    return found


async def lock_project(conn: asyncpg.Connection, project_id: uuid.UUID) -> None:
    """Make the project's schedule creations take turns until the transaction ends (so that the
    count of its schedules is still right when the new one is inserted)."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('schedules/' || $1::uuid::text, 0))", project_id)


async def by_request_id(
    db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, request_id: str
) -> asyncpg.Record | None:
    return await db.fetchrow(
        "SELECT * FROM schedules WHERE project_id = $1 AND request_id = $2", project_id, request_id
    )


async def find(
    db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, ref: uuid.UUID | str, lock: bool = False
) -> asyncpg.Record | None:
    """The project's schedule with this id (a UUID) or name; `lock`: locked until the transaction ends."""
    return await db.fetchrow(
        f"SELECT * FROM schedules WHERE {_named(ref)}{' FOR UPDATE' if lock else ''}", project_id, ref
    )


async def page(
    db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, after_name: str, limit: int
) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await db.fetch(
        "SELECT * FROM schedules WHERE project_id = $1 AND name > $2 ORDER BY name LIMIT $3",
        project_id,
        after_name,
        limit,
    )
    return rows


async def set_spec(
    conn: asyncpg.Connection, schedule_id: uuid.UUID, spec: bytes, next_tick_at: datetime
) -> asyncpg.Record:
    """A new spec: ticks count again from `next_tick_at`; those skipped under the old one are forgotten."""
    row: asyncpg.Record = await conn.fetchrow(
        "UPDATE schedules SET spec = $2, next_tick_at = $3, missed_ticks = 0, updated_at = now()"
        " WHERE schedule_id = $1 RETURNING *",
        schedule_id,
        spec,
        next_tick_at,
    )
    return row


async def set_paused(conn: asyncpg.Connection, schedule_id: uuid.UUID, paused: bool) -> asyncpg.Record:
    row: asyncpg.Record = await conn.fetchrow(
        "UPDATE schedules SET paused = $2, updated_at = now() WHERE schedule_id = $1 RETURNING *", schedule_id, paused
    )
    return row


async def delete(conn: asyncpg.Connection, schedule_id: uuid.UUID) -> None:
    await conn.execute("DELETE FROM schedules WHERE schedule_id = $1", schedule_id)


async def due(db: asyncpg.Connection | asyncpg.Pool, now: datetime, limit: int) -> list[uuid.UUID]:
    """Schedules, not paused, whose next tick is at or before `now`: the most overdue first."""
    rows = await db.fetch(
        "SELECT schedule_id FROM schedules WHERE NOT paused AND next_tick_at <= $1 ORDER BY next_tick_at LIMIT $2",
        now,
        limit,
    )
    return [row["schedule_id"] for row in rows]


async def lock_due(conn: asyncpg.Connection, schedule_id: uuid.UUID, now: datetime) -> asyncpg.Record | None:
    """The schedule locked, if it is still due and no other replica is claiming it right now
    (SKIP LOCKED: that one will claim its ticks; this replica goes on with others)."""
    return await conn.fetchrow(
        "SELECT * FROM schedules WHERE schedule_id = $1 AND NOT paused AND next_tick_at <= $2 FOR UPDATE SKIP LOCKED",
        schedule_id,
        now,
    )


async def advance(conn: asyncpg.Connection, schedule_id: uuid.UUID, next_tick_at: datetime, missed: int) -> None:
    """Claimed: the schedule's next tick moves on, and the ticks skipped without a run are carried."""
    await conn.execute(
        "UPDATE schedules SET next_tick_at = $2, missed_ticks = $3 WHERE schedule_id = $1",
        schedule_id,
        next_tick_at,
        missed,
    )
