"""The `memory_versions` table: every version of every memory document, never updated.

A document's state at a time is its newest version created at or before it; a store's state is
that of each of its paths. Statements go by store id: the caller found the store in its project.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

# Everything but the content, for lists.
_HEAD = (
    "store_id, path, version, '' AS content, deleted, sha256, writer, session_id, turn_id,"
    " conflicting_version, restored_from, created_at, octet_length(content) AS size_bytes"
)
_FULL = "*, octet_length(content) AS size_bytes"


@dataclass(frozen=True, slots=True)
class NewVersion:
    """A version to write; `session_id`/`turn_id` set when a session's turn wrote it."""

    path: str
    content: str
    deleted: bool
    sha256: str
    writer: str
    session_id: str = ""
    turn_id: str = ""
    conflicting_version: int = 0
    restored_from: datetime | None = None
    restore_request_id: str | None = None


async def insert(conn: asyncpg.Connection, store_id: uuid.UUID, version: int, new: NewVersion) -> asyncpg.Record:
    row: asyncpg.Record = await conn.fetchrow(
        "INSERT INTO memory_versions (store_id, path, version, content, deleted, sha256, writer, session_id,"
        " turn_id, conflicting_version, restored_from, restore_request_id)"
        f" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING {_FULL}",
        store_id,
        new.path,
        version,
        new.content,
        new.deleted,
        new.sha256,
        new.writer,
        uuid.UUID(new.session_id) if new.session_id else None,
        new.turn_id,
        new.conflicting_version,
        new.restored_from,
        new.restore_request_id,
    )
    return row


async def latest(
    db: asyncpg.Connection | asyncpg.Pool, store_id: uuid.UUID, path: str, at: datetime | None = None
) -> asyncpg.Record | None:
    """The path's newest version (created at or before `at` when given), with its content."""
    return await db.fetchrow(
        f"SELECT {_FULL} FROM memory_versions WHERE store_id = $1 AND path = $2"
        " AND ($3::timestamptz IS NULL OR created_at <= $3) ORDER BY version DESC LIMIT 1",
        store_id,
        path,
        at,
    )


async def one(
    db: asyncpg.Connection | asyncpg.Pool, store_id: uuid.UUID, path: str, version: int
) -> asyncpg.Record | None:
    return await db.fetchrow(
        f"SELECT {_FULL} FROM memory_versions WHERE store_id = $1 AND path = $2 AND version = $3",
        store_id,
        path,
        version,
    )


async def state(
    db: asyncpg.Connection | asyncpg.Pool,
    store_id: uuid.UUID,
    at: datetime | None,
    *,
    content: bool,
    after: str = "",
    limit: int | None = None,
) -> list[asyncpg.Record]:
    """Each path's newest version at `at` (now when None), by path, deleted ones left out."""
    columns = _FULL if content else _HEAD
    rows: list[asyncpg.Record] = await db.fetch(
        f"SELECT * FROM (SELECT DISTINCT ON (path) {columns} FROM memory_versions WHERE store_id = $1"
        " AND ($2::timestamptz IS NULL OR created_at <= $2) AND path > $3 ORDER BY path, version DESC) AS newest"
        " WHERE NOT deleted ORDER BY path LIMIT $4",
        store_id,
        at,
        after,
        limit,
    )
    return rows


async def all_paths(conn: asyncpg.Connection, store_id: uuid.UUID) -> list[asyncpg.Record]:
    """Each path's newest version now, deleted ones too, with content (a restore's starting point)."""
    rows: list[asyncpg.Record] = await conn.fetch(
        f"SELECT DISTINCT ON (path) {_FULL} FROM memory_versions WHERE store_id = $1 ORDER BY path, version DESC",
        store_id,
    )
    return rows


async def live_count(conn: asyncpg.Connection, store_id: uuid.UUID) -> int:
    found: int = await conn.fetchval(
        "SELECT count(*) FROM (SELECT DISTINCT ON (path) deleted FROM memory_versions WHERE store_id = $1"
        " ORDER BY path, version DESC) AS newest WHERE NOT deleted",
        store_id,
    )
    return found


async def live_bytes(conn: asyncpg.Connection, store_id: uuid.UUID) -> int:
    """The bytes of the store's documents now (deleted ones not counted)."""
    found: int = await conn.fetchval(
        "SELECT coalesce(sum(octet_length(content)), 0) FROM (SELECT DISTINCT ON (path) deleted, content"
        " FROM memory_versions WHERE store_id = $1 ORDER BY path, version DESC) AS newest WHERE NOT deleted",
        store_id,
    )
    return found


async def history(
    db: asyncpg.Connection | asyncpg.Pool,
    store_id: uuid.UUID,
    path: str,
    before: tuple[datetime, str, int] | None,
    limit: int,
) -> list[asyncpg.Record]:
    """Versions newest first (of one path when `path`), after the cursor (created_at, path, version)."""
    rows: list[asyncpg.Record] = await db.fetch(
        f"SELECT {_HEAD} FROM memory_versions WHERE store_id = $1 AND ($2 = '' OR path = $2)"
        " AND ($3::timestamptz IS NULL OR (created_at, path, version) < ($3, $4, $5))"
        " ORDER BY created_at DESC, path DESC, version DESC LIMIT $6",
        store_id,
        path,
        before[0] if before else None,
        before[1] if before else "",
        before[2] if before else 0,
        limit,
    )
    return rows


async def restored(conn: asyncpg.Connection, store_id: uuid.UUID, request_id: str) -> list[asyncpg.Record] | None:
    """The versions a restore with this request id wrote; None when no such restore happened."""
    seen = await conn.fetchval(
        "SELECT 1 FROM memory_versions WHERE store_id = $1 AND restore_request_id = $2 LIMIT 1", store_id, request_id
    )
    if seen is None:
        return None
    rows: list[asyncpg.Record] = await conn.fetch(
        f"SELECT {_HEAD} FROM memory_versions WHERE store_id = $1 AND restore_request_id = $2 ORDER BY path",
        store_id,
        request_id,
    )
    return rows
