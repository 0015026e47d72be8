"""The `agent_definition_versions` table: every version of every agent definition, immutable once
written (the spec in its canonical form and its digest).

Callers reach a version through its agent, which `store.agent_definitions` finds within a project.
"""

from __future__ import annotations

import uuid

import asyncpg


async def insert(
    conn: asyncpg.Connection, agent_id: uuid.UUID, version: int, spec: bytes, spec_digest: str
) -> asyncpg.Record:
    row = await conn.fetchrow(
        "INSERT INTO agent_definition_versions (agent_id, version, spec, spec_digest) VALUES ($1, $2, $3, $4)"
        " RETURNING *",
        agent_id,
        version,
        spec,
        spec_digest,
    )
    assert row is not None
    return row


async def get(db: asyncpg.Connection | asyncpg.Pool, agent_id: uuid.UUID, version: int) -> asyncpg.Record | None:
    return await db.fetchrow(
        "SELECT * FROM agent_definition_versions WHERE agent_id = $1 AND version = $2", agent_id, version
    )


async def page(
    db: asyncpg.Connection | asyncpg.Pool, agent_id: uuid.UUID, before: int | None, limit: int
) -> list[asyncpg.Record]:
    """The agent's versions, newest first, older than `before` (None: from the newest)."""
    rows: list[asyncpg.Record] = await db.fetch(
        "SELECT * FROM agent_definition_versions WHERE agent_id = $1 AND ($2::integer IS NULL OR version < $2)"
        " ORDER BY version DESC LIMIT $3",
        agent_id,
        before,
        limit,
    )
    return rows
