"""The `turns` table: turns opened by user messages (queued, running, settled) or by the engine itself.

It is also the idempotency record of SendMessage (a client_message_id opens one turn).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from datetime import timedelta

import asyncpg


async def insert_queued(
    conn: asyncpg.Connection,
    session_id: str,
    turn_id: str,
    client_message_id: str,
    fingerprint: str,
    accepted_seq: int,
    text: str,
    permission_mode: str,
    traceparent: str = "",
) -> None:
    await conn.execute(
        "INSERT INTO turns (session_id, turn_id, client_message_id, fingerprint, accepted_seq, state, text,"
        " permission_mode, traceparent) VALUES ($1, $2, $3, $4, $5, 'queued', $6, $7, $8)",
        session_id,
        turn_id,
        client_message_id,
        fingerprint,
        accepted_seq,
        text,
        permission_mode,
        traceparent,
    )


async def insert_engine_turn(
    conn: asyncpg.Connection, session_id: str, turn_id: str, accepted_seq: int, state: str
) -> None:
    """Record a turn the engine started on its own; one reported again keeps its first row."""
    await conn.execute(
        "INSERT INTO turns (session_id, turn_id, accepted_seq, state, origin) VALUES ($1, $2, $3, $4, 'engine')"
        " ON CONFLICT DO NOTHING",
        session_id,
        turn_id,
        accepted_seq,
        state,
    )


async def by_client_message_id(
    conn: asyncpg.Connection, session_id: str, client_message_id: str
) -> asyncpg.Record | None:
    """The turn a message opened: turn_id, accepted_seq, fingerprint."""
    return await conn.fetchrow(
        "SELECT turn_id, accepted_seq, fingerprint FROM turns WHERE session_id = $1 AND client_message_id = $2",
        session_id,
        client_message_id,
    )


async def oldest_queued(conn: asyncpg.Connection, session_id: str) -> asyncpg.Record | None:
    """The next queued turn to run: turn_id, text, permission_mode, traceparent."""
    return await conn.fetchrow(
        "SELECT turn_id, text, permission_mode, traceparent FROM turns WHERE session_id = $1 AND state = 'queued'"
        " ORDER BY accepted_seq LIMIT 1",
        session_id,
    )


async def queued_ids(conn: asyncpg.Connection, session_id: str) -> list[str]:
    """The session's queued turns, oldest first."""
    rows = await conn.fetch(
        "SELECT turn_id FROM turns WHERE session_id = $1 AND state = 'queued' ORDER BY accepted_seq", session_id
    )
    return [row["turn_id"] for row in rows]


async def set_state(conn: asyncpg.Connection, session_id: str, turn_id: str, state: str) -> float | None:
    """Set the turn's state; the seconds since it was dispatched (None if it never was)."""
    seconds: float | None = await conn.fetchval(
        "UPDATE turns SET state = $3 WHERE session_id = $1 AND turn_id = $2"
        " RETURNING extract(epoch FROM clock_timestamp() - dispatched_at)::float8",
        session_id,
        turn_id,
        state,
    )
    return seconds


async def accepted_seq(conn: asyncpg.Connection, session_id: str, turn_id: str) -> int | None:
    seq: int | None = await conn.fetchval(
        "SELECT accepted_seq FROM turns WHERE session_id = $1 AND turn_id = $2", session_id, turn_id
    )
    return seq


async def start_running(conn: asyncpg.Connection, session_id: str, turn_id: str) -> None:
    """The turn is dispatched to its agent now (its delivery deadline counts from here)."""
    await conn.execute(
        "UPDATE turns SET state = 'running', dispatched_at = now(), delivered_at = NULL"
        " WHERE session_id = $1 AND turn_id = $2",
        session_id,
        turn_id,
    )


async def mark_delivered(conn: asyncpg.Connection, session_id: str, turn_id: str) -> None:
    """The agent accepted the turn's input."""
    await conn.execute(
        "UPDATE turns SET delivered_at = now() WHERE session_id = $1 AND turn_id = $2 AND delivered_at IS NULL",
        session_id,
        turn_id,
    )


async def undelivered_since(db: asyncpg.Connection | asyncpg.Pool, deadline: timedelta) -> list[asyncpg.Record]:
    """Running turns (session_id, turn_id) dispatched longer than `deadline` ago whose input no agent accepted."""
    rows: list[asyncpg.Record] = await db.fetch(
        "SELECT session_id::text AS session_id, turn_id FROM turns"
        " WHERE state = 'running' AND delivered_at IS NULL AND dispatched_at < now() - $1::interval"
        " ORDER BY dispatched_at LIMIT 100",
        deadline,
    )
    return rows


async def settled_among_many(conn: asyncpg.Connection, turn_ids: Mapping[str, Collection[str]]) -> dict[str, set[str]]:
    """Which of each session's `turn_ids` have ended (completed, failed, interrupted), in one
    statement; keyed as the caller spelled the session ids, a session with none left out."""
    pairs = [(session_id, turn_id) for session_id, turns in turn_ids.items() for turn_id in turns]
    if not pairs:
        return {}
    rows = await conn.fetch(
        "SELECT t.session_id, t.turn_id FROM turns t"
        " JOIN unnest($1::uuid[], $2::text[]) AS p (session_id, turn_id)"
        " ON t.session_id = p.session_id AND t.turn_id = p.turn_id"
        " WHERE t.state IN ('completed', 'failed', 'interrupted')",
        [session_id for session_id, _ in pairs],
        [turn_id for _, turn_id in pairs],
    )
    named = {uuid.UUID(session_id): session_id for session_id in turn_ids}
    settled: dict[str, set[str]] = {}
    for row in rows:
        settled.setdefault(named[row["session_id"]], set()).add(row["turn_id"])
    return settled


async def forget_sessions(conn: asyncpg.Connection, session_ids: Sequence[str]) -> int:
    """Delete the sessions' rows (retention: `controlplane.retention`); how many."""
    deleted: int = await conn.fetchval(
        "WITH gone AS (DELETE FROM turns WHERE session_id = ANY($1::uuid[]) RETURNING 1) SELECT count(*) FROM gone",
        list(session_ids),
    )
    return deleted


async def mark_transcript(conn: asyncpg.Connection, session_id: str, turn_id: str, length: int, sha256: bytes) -> None:
    """Note the engine transcript's length and digest as the turn ended (a fork's point: `controlplane.forks`)."""
    await conn.execute(
        "UPDATE turns SET transcript_bytes = $3, transcript_sha256 = $4 WHERE session_id = $1 AND turn_id = $2",
        session_id,
        turn_id,
        length,
        sha256,
    )


async def transcript_mark(conn: asyncpg.Connection, session_id: str, turn_id: str) -> tuple[int, bytes] | None:
    """The transcript's length and digest as the turn ended; None when none reached the control plane."""
    row = await conn.fetchrow(
        "SELECT transcript_bytes, transcript_sha256 FROM turns WHERE session_id = $1 AND turn_id = $2",
        session_id,
        turn_id,
    )
    if row is None or row["transcript_bytes"] is None:
        return None
    return int(row["transcript_bytes"]), bytes(row["transcript_sha256"])
