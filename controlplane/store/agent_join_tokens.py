"""The `agent_join_tokens` table: tokens an operator minted, each admitting one new agent once
before it expires (`controlplane.identity.agent_admission`)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg


@dataclass(frozen=True, slots=True)
class JoinToken:
    token_id: str
    project_id: uuid.UUID | None
    created_by: str
    created_at: datetime
    expires_at: datetime


def _join_token(row: asyncpg.Record) -> JoinToken:
    return JoinToken(row["token_id"], row["project_id"], row["created_by"], row["created_at"], row["expires_at"])


async def insert(
    db: asyncpg.Connection | asyncpg.Pool,
    token_id: str,
    secret_sha256: bytes,
    project_id: uuid.UUID | None,
    created_by: str,
    ttl: timedelta,
) -> JoinToken:
    row = await db.fetchrow(
        "INSERT INTO agent_join_tokens (token_id, secret_sha256, project_id, created_by, expires_at)"
        " VALUES ($1, $2, $3, $4, now() + $5) RETURNING *",
        token_id,
        secret_sha256,
        project_id,
        created_by,
        ttl,
    )
    return _join_token(row)


async def digest(conn: asyncpg.Connection, token_id: str) -> bytes | None:
    """The secret's digest of a token that is unused and unexpired, locked until the transaction
    ends (two agents presenting it at once: one gets it); None otherwise."""
    digest = await conn.fetchval(
        "SELECT secret_sha256 FROM agent_join_tokens WHERE token_id = $1 AND used_at IS NULL AND expires_at > now()"
        " FOR UPDATE",
        token_id,
    )
    return bytes(digest) if digest is not None else None


async def use(conn: asyncpg.Connection, token_id: str, agent_id: str) -> JoinToken:
    """Spend the token (locked by `digest`) on `agent_id`."""
    row = await conn.fetchrow(
        "UPDATE agent_join_tokens SET used_at = now(), used_by_agent = $2 WHERE token_id = $1 RETURNING *",
        token_id,
        agent_id,
    )
    return _join_token(row)
