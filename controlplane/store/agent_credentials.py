"""The `agent_credentials` table: each agent's credential, bound at enrollment, its admission and its
revocation."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg


@dataclass(frozen=True, slots=True)
class AgentCredential:
    agent_id: str
    secret_sha256: bytes
    enrolled_at: datetime
    revoked_at: datetime | None
    # None: pending, given no work until admitted.
    admitted_at: datetime | None = None
    admitted_by: str = ""
    # The project its join token dedicated it to.
    project_id: uuid.UUID | None = None
    # A pending agent's latest refused Hello, and where it came from.
    last_refused_at: datetime | None = None
    last_peer: str = ""


def _credential(row: asyncpg.Record) -> AgentCredential:
    return AgentCredential(
        row["agent_id"],
        bytes(row["secret_sha256"]),
        row["enrolled_at"],
        row["revoked_at"],
        row["admitted_at"],
        row["admitted_by"],
        row["project_id"],
        row["last_refused_at"],
        row["last_peer"],
    )


async def find(db: asyncpg.Connection | asyncpg.Pool, agent_id: str) -> AgentCredential | None:
    row = await db.fetchrow("SELECT * FROM agent_credentials WHERE agent_id = $1", agent_id)
    return _credential(row) if row else None


async def enrol(
    db: asyncpg.Connection | asyncpg.Pool,
    agent_id: str,
    secret_sha256: bytes,
    admitted_by: str | None = None,
    project_id: uuid.UUID | None = None,
) -> AgentCredential:
    """Bind the credential to `agent_id` (admitted when `admitted_by` is given, else pending), unless
    one is bound already (a racing Hello): the bound one."""
    row = await db.fetchrow(
        "INSERT INTO agent_credentials (agent_id, secret_sha256, admitted_at, admitted_by, project_id)"
        " VALUES ($1, $2, CASE WHEN $3::text IS NULL THEN NULL ELSE now() END, coalesce($3, ''), $4)"
        " ON CONFLICT (agent_id) DO UPDATE SET agent_id = EXCLUDED.agent_id RETURNING *",
        agent_id,
        secret_sha256,
        admitted_by,
        project_id,
    )
    return _credential(row)


async def admit(
    db: asyncpg.Connection | asyncpg.Pool, agent_id: str, admitted_by: str, project_id: uuid.UUID | None = None
) -> AgentCredential | None:
    """Admit the agent (an admitted one stays as it was); None when it never enrolled."""
    row = await db.fetchrow(
        "UPDATE agent_credentials SET admitted_at = coalesce(admitted_at, now()),"
        " admitted_by = CASE WHEN admitted_at IS NULL THEN $2 ELSE admitted_by END,"
        " project_id = CASE WHEN admitted_at IS NULL THEN coalesce($3, project_id) ELSE project_id END"
        " WHERE agent_id = $1 RETURNING *",
        agent_id,
        admitted_by,
        project_id,
    )
    return _credential(row) if row else None


async def note_refused(db: asyncpg.Connection | asyncpg.Pool, agent_id: str, peer: str) -> None:
    """A pending agent asked again: when, and from where (bounded)."""
    await db.execute(
        "UPDATE agent_credentials SET last_refused_at = now(), last_peer = $2 WHERE agent_id = $1",
        agent_id,
        peer[:256],
    )


async def revoke(conn: asyncpg.Connection, agent_id: str) -> AgentCredential | None:
    """Mark the agent revoked (keeping the first time); None when it never enrolled."""
    row = await conn.fetchrow(
        "UPDATE agent_credentials SET revoked_at = coalesce(revoked_at, now()) WHERE agent_id = $1 RETURNING *",
        agent_id,
    )
    return _credential(row) if row else None


async def listed(db: asyncpg.Connection | asyncpg.Pool, limit: int) -> list[AgentCredential]:
    rows = await db.fetch("SELECT * FROM agent_credentials ORDER BY enrolled_at DESC, agent_id LIMIT $1", limit)
    return [_credential(row) for row in rows]
