"""The `sessions` table's fork columns: where a fork came from and whether its files were copied."""

from __future__ import annotations

import asyncpg


async def set_origin(conn: asyncpg.Connection, session_id: str, source_session_id: str, through_seq: int) -> None:
    await conn.execute(
        "UPDATE sessions SET forked_from_session_id = $2, forked_from_seq = $3 WHERE session_id = $1",
        session_id,
        source_session_id,
        through_seq,
    )


async def files_copied(db: asyncpg.Connection | asyncpg.Pool, session_id: str) -> bool:
    """Whether the fork's files were copied from its source (False too for a session that is no fork)."""
    copied: bool = await db.fetchval(
        "SELECT fork_files_copied_at IS NOT NULL FROM sessions WHERE session_id = $1", session_id
    )
    return bool(copied)


async def mark_files_copied(db: asyncpg.Connection | asyncpg.Pool, session_id: str) -> None:
    await db.execute("UPDATE sessions SET fork_files_copied_at = now() WHERE session_id = $1", session_id)
