"""The `webhook_attempts` table: the delivery log, one row per attempt of a webhook delivery."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import asyncpg

# The most attempts a listing shows of one delivery (its latest).
SHOWN_PER_DELIVERY = 20


async def begin(conn: asyncpg.Connection | asyncpg.Pool, delivery_id: uuid.UUID, attempt: int) -> None:
    """Log that attempt `attempt` starts (again, if a replica died in it and the number was reused)."""
    await conn.execute(
        "INSERT INTO webhook_attempts (delivery_id, attempt) VALUES ($1, $2) ON CONFLICT (delivery_id, attempt)"
        " DO UPDATE SET started_at = now(), finished_at = NULL, status_code = NULL, error = '', response_excerpt = ''",
        delivery_id,
        attempt,
    )


async def end(
    conn: asyncpg.Connection | asyncpg.Pool,
    delivery_id: uuid.UUID,
    attempt: int,
    status_code: int | None,
    error: str,
    excerpt: str,
) -> None:
    await conn.execute(
        "UPDATE webhook_attempts SET finished_at = now(), status_code = $3, error = $4, response_excerpt = $5"
        " WHERE delivery_id = $1 AND attempt = $2",
        delivery_id,
        attempt,
        status_code,
        error,
        excerpt,
    )


async def of(conn: asyncpg.Connection | asyncpg.Pool, delivery_ids: Sequence[uuid.UUID]) -> list[asyncpg.Record]:
    """The latest attempts of each delivery, oldest first."""
    rows: list[asyncpg.Record] = await conn.fetch(
        "SELECT * FROM (SELECT delivery_id, attempt, started_at, finished_at, status_code, error, response_excerpt,"
        " row_number() OVER (PARTITION BY delivery_id ORDER BY attempt DESC) AS newest FROM webhook_attempts"
        " WHERE delivery_id = ANY($1::uuid[])) a WHERE newest <= $2 ORDER BY delivery_id, attempt",
        list(delivery_ids),
        SHOWN_PER_DELIVERY,
    )
    return rows
