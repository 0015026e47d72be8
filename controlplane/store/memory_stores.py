"""The `memory_stores` table (a project's memory stores, MemoryService) and `session_memory` (the
stores each session attached, so that its later starts mount them again).

Every statement a caller reaches names the project: another project's store is never read, locked
or changed. `attached` goes by session, whose project the kernel checked when it was created.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import asyncpg


def _named(ref: uuid.UUID | str) -> str:
    """The condition that picks the project's ($1) store named by `ref` ($2): its id or its name."""
    return "project_id = $1 AND " + ("store_id = $2" if isinstance(ref, uuid.UUID) else "name = $2")


async def insert(
    conn: asyncpg.Connection, store_id: uuid.UUID, project_id: uuid.UUID, name: str, description: str, request_id: str
) -> asyncpg.Record | None:
    """None when the project has a store with this name or made with this request id already."""
    return await conn.fetchrow(
        "INSERT INTO memory_stores (store_id, project_id, name, description, request_id)"
        " VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING *",
        store_id,
        project_id,
        name,
        description,
        request_id,
    )


async def count(conn: asyncpg.Connection, project_id: uuid.UUID) -> int:
    found: int = await conn.fetchval("SELECT count(*) FROM memory_stores WHERE project_id = $1", project_id)
    return found


async def lock_project(conn: asyncpg.Connection, project_id: uuid.UUID) -> None:
    """Make the project's store creations take turns until the transaction ends (so that the count
    of its stores is still right when the new one is inserted)."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('memory/' || $1::uuid::text, 0))", project_id)


async def by_request_id(
    db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, request_id: str
) -> asyncpg.Record | None:
    return await db.fetchrow(
        "SELECT * FROM memory_stores WHERE project_id = $1 AND request_id = $2", project_id, request_id
    )


async def find(
    db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, ref: uuid.UUID | str, *, lock: bool = False
) -> asyncpg.Record | None:
    """The project's store named by `ref`; with `lock`, locked until the transaction ends (writes to
    one store take turns: versions are numbered and counted under it)."""
    suffix = " FOR UPDATE" if lock else ""
    return await db.fetchrow(f"SELECT * FROM memory_stores WHERE {_named(ref)}{suffix}", project_id, ref)


async def lock_by_id(conn: asyncpg.Connection, store_id: uuid.UUID) -> asyncpg.Record | None:
    """The store by id, locked (a session's sync, whose store the session attached)."""
    return await conn.fetchrow("SELECT * FROM memory_stores WHERE store_id = $1 FOR UPDATE", store_id)


async def page(
    db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, after: str, limit: int
) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await db.fetch(
        "SELECT * FROM memory_stores WHERE project_id = $1 AND name > $2 ORDER BY name LIMIT $3",
        project_id,
        after,
        limit,
    )
    return rows


async def touch(conn: asyncpg.Connection, store_id: uuid.UUID) -> asyncpg.Record:
    row: asyncpg.Record = await conn.fetchrow(
        "UPDATE memory_stores SET updated_at = clock_timestamp() WHERE store_id = $1 RETURNING *", store_id
    )
    return row


async def delete(conn: asyncpg.Connection, store_id: uuid.UUID) -> None:
    await conn.execute("DELETE FROM memory_stores WHERE store_id = $1", store_id)


async def attach(conn: asyncpg.Connection, session_id: str, store_id: uuid.UUID, read_write: bool) -> None:
    await conn.execute(
        "INSERT INTO session_memory (session_id, store_id, read_write) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        uuid.UUID(session_id),
        store_id,
        read_write,
    )


async def attached(db: asyncpg.Connection | asyncpg.Pool, session_id: str) -> list[asyncpg.Record]:
    """The stores the session attached that still exist, by name: store_id, name, read_write."""
    rows: list[asyncpg.Record] = await db.fetch(
        "SELECT m.store_id, s.name, m.read_write FROM session_memory m"
        " JOIN memory_stores s ON s.store_id = m.store_id WHERE m.session_id = $1 ORDER BY s.name",
        uuid.UUID(session_id),
    )
    return rows


async def forget_sessions(conn: asyncpg.Connection, session_ids: Sequence[str]) -> int:
    """Delete the sessions' attachments (retention: `controlplane.retention`); how many. The versions
    they wrote stay, naming them."""
    deleted: int = await conn.fetchval(
        "WITH gone AS (DELETE FROM session_memory WHERE session_id = ANY($1::uuid[]) RETURNING 1)"
        " SELECT count(*) FROM gone",
        list(session_ids),
    )
    return deleted
