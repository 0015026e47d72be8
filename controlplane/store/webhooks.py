"""The `webhooks` table: a project's subscriptions to its sessions' events, with their sealed
signing secrets (controlplane.webhooks.subscriptions). The trigger that reads it for each journaled
event is in migrations/0034_webhooks.sql."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

import asyncpg

_COLUMNS = (
    "webhook_id, project_id, url, description, event_types, enabled, request_id, secret_version,"
    " secret_ciphertext, secret_nonce, secret_key_id, previous_ciphertext, previous_nonce, previous_key_id,"
    " previous_expires_at, created_at, updated_at"
)


async def insert(
    conn: asyncpg.Connection | asyncpg.Pool,
    webhook_id: uuid.UUID,
    project_id: uuid.UUID,
    url: str,
    description: str,
    event_types: Sequence[str],
    request_id: str | None,
    sealed: tuple[bytes, bytes, str],
) -> asyncpg.Record | None:
    """The new webhook's row; None (nothing inserted) when the project has one of `request_id`."""
    row: asyncpg.Record | None = await conn.fetchrow(
        "INSERT INTO webhooks (webhook_id, project_id, url, description, event_types, request_id, secret_version,"
        " secret_ciphertext, secret_nonce, secret_key_id) VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $8, $9)"
        f" ON CONFLICT (project_id, request_id) DO NOTHING RETURNING {_COLUMNS}",
        webhook_id,
        project_id,
        url,
        description,
        list(event_types),
        request_id,
        *sealed,
    )
    return row


async def by_request_id(
    conn: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, request_id: str
) -> asyncpg.Record | None:
    row: asyncpg.Record | None = await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM webhooks WHERE project_id = $1 AND request_id = $2", project_id, request_id
    )
    return row


async def get(
    conn: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID | None, webhook_id: uuid.UUID
) -> asyncpg.Record | None:
    """The webhook, if it is `project_id`'s (any project's for None)."""
    row: asyncpg.Record | None = await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM webhooks WHERE webhook_id = $1 AND ($2::uuid IS NULL OR project_id = $2)",
        webhook_id,
        project_id,
    )
    return row


async def get_many(conn: asyncpg.Connection | asyncpg.Pool, webhook_ids: Sequence[uuid.UUID]) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await conn.fetch(
        f"SELECT {_COLUMNS} FROM webhooks WHERE webhook_id = ANY($1::uuid[])", list(webhook_ids)
    )
    return rows


async def page(
    conn: asyncpg.Connection | asyncpg.Pool,
    project_id: uuid.UUID,
    after: tuple[datetime, uuid.UUID] | None,
    limit: int,
) -> list[asyncpg.Record]:
    """The project's webhooks, oldest first, after `after` (created_at, webhook_id)."""
    rows: list[asyncpg.Record] = await conn.fetch(
        f"SELECT {_COLUMNS} FROM webhooks WHERE project_id = $1"
        " AND ($2::timestamptz IS NULL OR (created_at, webhook_id) > ($2, $3))"
        " ORDER BY created_at, webhook_id LIMIT $4",
        project_id,
        after[0] if after else None,
        after[1] if after else None,
        limit,
    )
    return rows


async def update(
    conn: asyncpg.Connection | asyncpg.Pool,
    project_id: uuid.UUID,
    webhook_id: uuid.UUID,
    url: str | None,
    description: str | None,
    event_types: Sequence[str] | None,
    enabled: bool | None,
) -> asyncpg.Record | None:
    """Set the fields given (None: unchanged); the changed row, None when there is no such webhook."""
    row: asyncpg.Record | None = await conn.fetchrow(
        "UPDATE webhooks SET url = coalesce($3, url), description = coalesce($4, description),"
        " event_types = coalesce($5, event_types), enabled = coalesce($6, enabled), updated_at = now()"
        f" WHERE webhook_id = $2 AND project_id = $1 RETURNING {_COLUMNS}",
        project_id,
        webhook_id,
        url,
        description,
        list(event_types) if event_types is not None else None,
        enabled,
    )
    return row


async def rotate(
    conn: asyncpg.Connection | asyncpg.Pool,
    project_id: uuid.UUID,
    webhook_id: uuid.UUID,
    version: int,
    sealed: tuple[bytes, bytes, str],
    previous_expires_at: datetime,
) -> asyncpg.Record | None:
    """Make `sealed` secret number `version` the current one, the current one the previous one until
    `previous_expires_at`; only if the current one is still number `version - 1` (else None)."""
    row: asyncpg.Record | None = await conn.fetchrow(
        "UPDATE webhooks SET previous_ciphertext = secret_ciphertext, previous_nonce = secret_nonce,"
        " previous_key_id = secret_key_id, previous_expires_at = $7, secret_version = $3,"
        " secret_ciphertext = $4, secret_nonce = $5, secret_key_id = $6, updated_at = now()"
        f" WHERE webhook_id = $2 AND project_id = $1 AND secret_version = $3 - 1 RETURNING {_COLUMNS}",
        project_id,
        webhook_id,
        version,
        *sealed,
        previous_expires_at,
    )
    return row


async def delete(conn: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, webhook_id: uuid.UUID) -> bool:
    """Delete the webhook (its deliveries and their attempts go with it); whether there was one."""
    status: str = await conn.execute(
        "DELETE FROM webhooks WHERE webhook_id = $2 AND project_id = $1", project_id, webhook_id
    )
    return status != "DELETE 0"
