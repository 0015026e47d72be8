"""The `engine_transcripts` table: each session's engine transcript, so a new sandbox resumes the conversation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg


@dataclass(frozen=True, slots=True)
class Transcript:
    engine_session_id: str
    content: bytes


async def save(conn: asyncpg.Connection, session_id: str, engine_session_id: str, content: bytes) -> None:
    """Keep the session's latest transcript, replacing the one before."""
    await conn.execute(
        "INSERT INTO engine_transcripts (session_id, engine_session_id, content) VALUES ($1, $2, $3)"
        " ON CONFLICT (session_id) DO UPDATE SET engine_session_id = EXCLUDED.engine_session_id,"
        " content = EXCLUDED.content, updated_at = now()",
        session_id,
        engine_session_id,
        content,
    )


async def find(conn: asyncpg.Connection, session_id: str) -> Transcript | None:
    row = await conn.fetchrow(
        "SELECT engine_session_id, content FROM engine_transcripts WHERE session_id = $1", session_id
    )
    return Transcript(row["engine_session_id"], bytes(row["content"])) if row else None


async def forget_sessions(conn: asyncpg.Connection, session_ids: Sequence[str]) -> int:
    """Delete the sessions' rows (retention: `controlplane.retention`); how many."""
    deleted: int = await conn.fetchval(
        "WITH gone AS (DELETE FROM engine_transcripts WHERE session_id = ANY($1::uuid[]) RETURNING 1)"
        " SELECT count(*) FROM gone",
        list(session_ids),
    )
    return deleted
