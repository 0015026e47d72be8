"""The `credential_store` table: a project's named secrets, each encrypted (never in clear here) with
its version, description, nonce and the id of the key it was written under.

Every statement names the project: another project's credential is never read, replaced or deleted.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import asyncpg


async def find(db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, name: str) -> asyncpg.Record | None:
    return await db.fetchrow("SELECT * FROM credential_store WHERE project_id = $1 AND name = $2", project_id, name)


async def lock(conn: asyncpg.Connection, project_id: uuid.UUID, name: str) -> asyncpg.Record | None:
    """`find`, locking the row until the transaction ends: replacements take turns."""
    return await conn.fetchrow(
        "SELECT * FROM credential_store WHERE project_id = $1 AND name = $2 FOR UPDATE", project_id, name
    )


async def insert(
    conn: asyncpg.Connection,
    project_id: uuid.UUID,
    name: str,
    description: str,
    ciphertext: bytes,
    nonce: bytes,
    key_id: str,
) -> asyncpg.Record | None:
    """Insert the credential at version 1; None when the project has one by this name already (a
    concurrent put, waited for)."""
    return await conn.fetchrow(
        "INSERT INTO credential_store (project_id, name, version, description, ciphertext, nonce, key_id)"
        " VALUES ($1, $2, 1, $3, $4, $5, $6) ON CONFLICT DO NOTHING RETURNING *",
        project_id,
        name,
        description,
        ciphertext,
        nonce,
        key_id,
    )


async def replace(
    conn: asyncpg.Connection,
    project_id: uuid.UUID,
    name: str,
    version: int,
    description: str,
    ciphertext: bytes,
    nonce: bytes,
    key_id: str,
) -> asyncpg.Record:
    """Store the secret as `version` of the (locked) credential."""
    row = await conn.fetchrow(
        "UPDATE credential_store SET version = $3, description = $4, ciphertext = $5, nonce = $6, key_id = $7,"
        " updated_at = now() WHERE project_id = $1 AND name = $2 RETURNING *",
        project_id,
        name,
        version,
        description,
        ciphertext,
        nonce,
        key_id,
    )
    assert row is not None
    return row


async def page(
    db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, after_name: str, limit: int
) -> list[asyncpg.Record]:
    """The project's credentials by name, after `after_name`."""
    rows: list[asyncpg.Record] = await db.fetch(
        "SELECT * FROM credential_store WHERE project_id = $1 AND name > $2 ORDER BY name LIMIT $3",
        project_id,
        after_name,
        limit,
    )
    return rows


async def named(
    db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, names: Sequence[str]
) -> list[asyncpg.Record]:
    """The project's credentials among `names`."""
    rows: list[asyncpg.Record] = await db.fetch(
        "SELECT * FROM credential_store WHERE project_id = $1 AND name = ANY($2::text[])", project_id, list(names)
    )
    return rows


async def delete(db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, name: str) -> bool:
    """Delete the credential; False when there was none."""
    deleted = await db.fetchval(
        "DELETE FROM credential_store WHERE project_id = $1 AND name = $2 RETURNING name", project_id, name
    )
    return deleted is not None
