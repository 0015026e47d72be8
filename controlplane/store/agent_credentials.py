"""The `agent_credentials` table: each agent's credential, bound at enrollment, and its revocation."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg


@dataclass(frozen=True, slots=True)
class AgentCredential:
    agent_id: str
    secret_sha256: bytes
    enrolled_at: datetime
    revoked_at: datetime | None


def _credential(row: asyncpg.Record) -> AgentCredential:
    return AgentCredential(row["agent_id"], bytes(row["secret_sha256"]), row["enrolled_at"], row["revoked_at"])


async def find(db: asyncpg.Connection | asyncpg.Pool, agent_id: str) -> AgentCredential | None:
    row = await db.fetchrow("SELECT * FROM agent_credentials WHERE agent_id = $1", agent_id)
    return _credential(row) if row else None


async def enrol(db: asyncpg.Connection | asyncpg.Pool, agent_id: str, secret_sha256: bytes) -> AgentCredential:
    """Bind the credential to `agent_id`, unless one is bound already (a racing Hello): the bound one."""
    row = await db.fetchrow(
        "INSERT INTO agent_credentials (agent_id, secret_sha256) VALUES ($1, $2)"
        " ON CONFLICT (agent_id) DO UPDATE SET agent_id = EXCLUDED.agent_id RETURNING *",
        agent_id,
        secret_sha256,
    )
    return _credential(row)


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
