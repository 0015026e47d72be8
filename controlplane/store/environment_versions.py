"""The `environment_versions` table: every version of every environment, immutable once written
(the spec in its canonical form, its digest, and the digest of what its layer is built from).

Callers reach a version through its environment, which `store.environments` finds within a project.
"""

from __future__ import annotations

import uuid

import asyncpg


async def insert(
    conn: asyncpg.Connection, environment_id: uuid.UUID, version: int, spec: bytes, spec_digest: str, build_digest: str
) -> asyncpg.Record:
    row = await conn.fetchrow(
        "INSERT INTO environment_versions (environment_id, version, spec, spec_digest, build_digest)"
        " VALUES ($1, $2, $3, $4, $5) RETURNING *",
        environment_id,
        version,
        spec,
        spec_digest,
        build_digest,
    )
    assert row is not None
    return row


async def get(db: asyncpg.Connection | asyncpg.Pool, environment_id: uuid.UUID, version: int) -> asyncpg.Record | None:
    return await db.fetchrow(
        "SELECT * FROM environment_versions WHERE environment_id = $1 AND version = $2", environment_id, version
    )


async def page(
    db: asyncpg.Connection | asyncpg.Pool, environment_id: uuid.UUID, before: int | None, limit: int
) -> list[asyncpg.Record]:
    """The environment's versions, newest first, older than `before` (None: from the newest)."""
    rows: list[asyncpg.Record] = await db.fetch(
        "SELECT * FROM environment_versions WHERE environment_id = $1"
        " AND ($2::integer IS NULL OR version < $2) ORDER BY version DESC LIMIT $3",
        environment_id,
        before,
        limit,
    )
    return rows
