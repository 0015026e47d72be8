"""The `command_leases` table: one row for each RunCommand running, while it runs.

A replica holds a lease for each command it runs and renews it; a replica that
dies leaves leases that lapse at their `expires_at` and count no more.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta

import asyncpg

# pg_advisory_xact_lock(class, project hash): the class of the locks that serialise one project's leases.
_LEASES_LOCK_CLASS = 0x4C454153  # "LEAS"


async def lock_project(conn: asyncpg.Connection, project_id: uuid.UUID) -> None:
    """Serialise the project's acquisitions until the transaction ends (on every replica)."""
    await conn.execute("SELECT pg_advisory_xact_lock($1, hashtext($2::uuid::text))", _LEASES_LOCK_CLASS, project_id)


async def count_held(db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID) -> int:
    """The project's leases that have not lapsed."""
    count: int = await db.fetchval(
        "SELECT count(*) FROM command_leases WHERE project_id = $1 AND expires_at > now()", project_id
    )
    return count


async def insert(
    conn: asyncpg.Connection, lease_id: uuid.UUID, project_id: uuid.UUID, session_id: str, ttl: timedelta
) -> None:
    # The project's lapsed leases go first: nobody renews them any more.
    await conn.execute("DELETE FROM command_leases WHERE project_id = $1 AND expires_at <= now()", project_id)
    await conn.execute(
        "INSERT INTO command_leases (lease_id, project_id, session_id, expires_at) VALUES ($1, $2, $3, now() + $4)",
        lease_id,
        project_id,
        uuid.UUID(session_id),
        ttl,
    )


async def renew(db: asyncpg.Connection | asyncpg.Pool, lease_id: uuid.UUID, ttl: timedelta) -> bool:
    """Move the lease's expiry on; False when it is gone (it lapsed and was cleared)."""
    renewed = await db.fetchval(
        "UPDATE command_leases SET expires_at = now() + $2 WHERE lease_id = $1 RETURNING lease_id", lease_id, ttl
    )
    return renewed is not None


async def delete(db: asyncpg.Connection | asyncpg.Pool, lease_id: uuid.UUID) -> None:
    await db.execute("DELETE FROM command_leases WHERE lease_id = $1", lease_id)


async def forget_sessions(conn: asyncpg.Connection, session_ids: Sequence[str]) -> int:
    """Delete the sessions' rows (retention: `controlplane.retention`); how many."""
    deleted: int = await conn.fetchval(
        "WITH gone AS (DELETE FROM command_leases WHERE session_id = ANY($1::uuid[]) RETURNING 1)"
        " SELECT count(*) FROM gone",
        list(session_ids),
    )
    return deleted
