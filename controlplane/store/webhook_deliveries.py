"""The `webhook_deliveries` table: the outbox of webhook deliveries, one row per (webhook, event),
written by the trigger on `events` (migrations/0034_webhooks.sql), claimed under a lease by one
replica at a time (controlplane.webhooks.dispatcher)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta

import asyncpg

_COLUMNS = (
    "delivery_id, webhook_id, project_id, event_type, session_id, seq, payload::text AS payload_json, created_at,"
    " state, attempts, round_attempts, round_started_at, next_attempt_at, lease_until, last_status_code,"
    " last_error, finished_at"
)
# The same, of the row named `d` (a claim's UPDATE … FROM, where `due` has a delivery_id too).
_D_COLUMNS = ", ".join(f"d.{column.strip()}" for column in _COLUMNS.split(","))


async def claim(conn: asyncpg.Connection | asyncpg.Pool, limit: int, lease: timedelta) -> list[asyncpg.Record]:
    """Lease up to `limit` due deliveries, none another replica holds a live lease on, counting the
    attempt about to be made; their rows (`attempts` is the new attempt's number). The rows another
    transaction is claiming are skipped, not waited for."""
    rows: list[asyncpg.Record] = await conn.fetch(
        "WITH due AS (SELECT delivery_id FROM webhook_deliveries WHERE state = 'pending' AND next_attempt_at <= now()"
        " AND (lease_until IS NULL OR lease_until < now()) ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED)"
        " UPDATE webhook_deliveries d SET lease_until = now() + $2::interval, attempts = d.attempts + 1,"
        f" round_attempts = d.round_attempts + 1 FROM due WHERE d.delivery_id = due.delivery_id RETURNING {_D_COLUMNS}",
        limit,
        lease,
    )
    return rows


async def finish(
    conn: asyncpg.Connection | asyncpg.Pool,
    delivery_id: uuid.UUID,
    attempt: int,
    state: str,
    next_attempt_at: datetime | None,
    status_code: int | None,
    error: str,
) -> bool:
    """Record the outcome of attempt `attempt`: `state`, and when pending the next attempt's time.
    Only if no later attempt was claimed since (a lease that lapsed mid-attempt): whether it was."""
    status: str = await conn.execute(
        "UPDATE webhook_deliveries SET state = $3, next_attempt_at = coalesce($4, next_attempt_at),"
        " lease_until = NULL, last_status_code = $5, last_error = $6,"
        " finished_at = CASE WHEN $3 = 'pending' THEN NULL ELSE now() END"
        " WHERE delivery_id = $1 AND attempts = $2",
        delivery_id,
        attempt,
        state,
        next_attempt_at,
        status_code,
        error,
    )
    return status != "UPDATE 0"


async def redeliver(
    conn: asyncpg.Connection | asyncpg.Pool, webhook_id: uuid.UUID, delivery_id: uuid.UUID
) -> asyncpg.Record | None:
    """Start a new round of attempts now (the limits count from here); the row, None for no such
    delivery. A delivery being attempted keeps its lease: the round begins after it."""
    row: asyncpg.Record | None = await conn.fetchrow(
        "UPDATE webhook_deliveries SET state = 'pending', next_attempt_at = now(), round_attempts = 0,"
        " round_started_at = now(), finished_at = NULL"
        f" WHERE delivery_id = $2 AND webhook_id = $1 RETURNING {_COLUMNS}",
        webhook_id,
        delivery_id,
    )
    return row


async def page(
    conn: asyncpg.Connection | asyncpg.Pool,
    webhook_id: uuid.UUID,
    state: str | None,
    event_type: str | None,
    before: tuple[datetime, uuid.UUID] | None,
    limit: int,
) -> list[asyncpg.Record]:
    """The webhook's deliveries, newest first, before `before` (created_at, delivery_id), filtered."""
    rows: list[asyncpg.Record] = await conn.fetch(
        f"SELECT {_COLUMNS} FROM webhook_deliveries WHERE webhook_id = $1"
        " AND ($2::text IS NULL OR state = $2) AND ($3::text IS NULL OR event_type = $3)"
        " AND ($4::timestamptz IS NULL OR (created_at, delivery_id) < ($4, $5))"
        " ORDER BY created_at DESC, delivery_id DESC LIMIT $6",
        webhook_id,
        state,
        event_type,
        before[0] if before else None,
        before[1] if before else None,
        limit,
    )
    return rows


async def get(conn: asyncpg.Connection | asyncpg.Pool, delivery_ids: Sequence[uuid.UUID]) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await conn.fetch(
        f"SELECT {_COLUMNS} FROM webhook_deliveries WHERE delivery_id = ANY($1::uuid[])", list(delivery_ids)
    )
    return rows


async def prune_finished(db: asyncpg.Connection | asyncpg.Pool, older_than: timedelta, limit: int) -> int:
    """Delete up to `limit` deliveries delivered or failed more than `older_than` ago, oldest first,
    with their attempts; how many."""
    deleted: int = await db.fetchval(
        "WITH gone AS (DELETE FROM webhook_deliveries WHERE delivery_id IN"
        " (SELECT delivery_id FROM webhook_deliveries WHERE state <> 'pending' AND finished_at < now() - $1::interval"
        "  ORDER BY finished_at LIMIT $2) RETURNING 1)"
        " SELECT count(*) FROM gone",
        older_than,
        limit,
    )
    return deleted


async def backlog(db: asyncpg.Connection | asyncpg.Pool) -> asyncpg.Record:
    """`pending`: deliveries pending; `oldest_s`: seconds since the oldest of them was written (None: none)."""
    row: asyncpg.Record = await db.fetchrow(
        "SELECT count(*) AS pending, extract(epoch FROM now() - min(created_at))::float8 AS oldest_s"
        " FROM webhook_deliveries WHERE state = 'pending'"
    )
    return row
