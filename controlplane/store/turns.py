"""The `turns` table: turns opened by user messages (queued, running, settled) or by the engine itself.

It is also the idempotency record of SendMessage (a client_message_id opens one turn).
"""

from __future__ import annotations

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
) -> None:
    await conn.execute(
        "INSERT INTO turns (session_id, turn_id, client_message_id, fingerprint, accepted_seq, state, text,"
        " permission_mode) VALUES ($1, $2, $3, $4, $5, 'queued', $6, $7)",
        session_id,
        turn_id,
        client_message_id,
        fingerprint,
        accepted_seq,
        text,
        permission_mode,
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
    """The next queued turn to run: turn_id, text, permission_mode."""
    return await conn.fetchrow(
        "SELECT turn_id, text, permission_mode FROM turns WHERE session_id = $1 AND state = 'queued'"
        " ORDER BY accepted_seq LIMIT 1",
        session_id,
    )


async def queued_ids(conn: asyncpg.Connection, session_id: str) -> list[str]:
    """The session's queued turns, oldest first."""
    rows = await conn.fetch(
        "SELECT turn_id FROM turns WHERE session_id = $1 AND state = 'queued' ORDER BY accepted_seq", session_id
    )
    return [row["turn_id"] for row in rows]


async def set_state(conn: asyncpg.Connection, session_id: str, turn_id: str, state: str) -> None:
    await conn.execute("UPDATE turns SET state = $3 WHERE session_id = $1 AND turn_id = $2", session_id, turn_id, state)


async def accepted_seq(conn: asyncpg.Connection, session_id: str, turn_id: str) -> int | None:
    seq: int | None = await conn.fetchval(
        "SELECT accepted_seq FROM turns WHERE session_id = $1 AND turn_id = $2", session_id, turn_id
    )
    return seq
