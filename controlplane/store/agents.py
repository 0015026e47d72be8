"""The `agents` table: data-plane agents, their leases, the engines they declared, their command numbering
and the replica that holds each one's stream.

`pick_for` also reads `sessions` (an agent's free capacity is its capacity less the sessions placed on it).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import asyncpg


async def register(
    db: asyncpg.Connection | asyncpg.Pool,
    agent_id: str,
    lease_ttl: timedelta,
    drivers: Sequence[str],
    engines: Sequence[str],
    engine_manifests: Mapping[str, Any],
    capacity: int,
    instance_id: str,
) -> asyncpg.Record:
    """Insert the agent or renew its row with a new lease generation: generation, lease_expires_at."""
    return await db.fetchrow(
        "INSERT INTO agents (agent_id, generation, lease_expires_at, drivers, engines, engine_manifests, capacity,"
        " instance_id) VALUES ($1, 1, now() + $2, $3, $4, $5, $6, $7)"
        " ON CONFLICT (agent_id) DO UPDATE SET generation = agents.generation + 1,"
        "  lease_expires_at = EXCLUDED.lease_expires_at, drivers = EXCLUDED.drivers,"
        "  engines = EXCLUDED.engines, engine_manifests = EXCLUDED.engine_manifests, capacity = EXCLUDED.capacity,"
        "  instance_id = EXCLUDED.instance_id, connected_at = now()"
        " RETURNING generation, lease_expires_at",
        agent_id,
        lease_ttl,
        list(drivers),
        list(engines),
        dict(engine_manifests),
        capacity,
        instance_id,
    )


async def renew(
    db: asyncpg.Connection | asyncpg.Pool, agent_id: str, generation: int, lease_ttl: timedelta
) -> asyncpg.Record | None:
    """Extend the lease of that generation: generation, lease_expires_at; None when a newer one replaced it."""
    return await db.fetchrow(
        "UPDATE agents SET lease_expires_at = now() + $3 WHERE agent_id = $1 AND generation = $2"
        " RETURNING generation, lease_expires_at",
        agent_id,
        generation,
        lease_ttl,
    )


async def engine_manifest(db: asyncpg.Connection | asyncpg.Pool, engine: str, agent_id: str) -> Any:
    """The manifest of `engine` (its JSON) as `agent_id` declared it, else the live agent that connected
    last, else any agent; None when no agent declared it."""
    return await db.fetchval(
        "SELECT engine_manifests -> $1 FROM agents WHERE engine_manifests ? $1"
        " ORDER BY agent_id = $2 DESC, lease_expires_at > now() DESC, connected_at DESC LIMIT 1",
        engine,
        agent_id,
    )


async def live_engines(db: asyncpg.Connection | asyncpg.Pool) -> list[str]:
    """The kinds of engine the agents with a live lease declared, sorted."""
    kinds: list[str] = await db.fetchval(
        "SELECT coalesce(array_agg(DISTINCT kind ORDER BY kind), '{}')"
        " FROM agents, jsonb_object_keys(engine_manifests) AS kind WHERE lease_expires_at > now()"
    )
    return kinds


async def pick_for(db: asyncpg.Connection | asyncpg.Pool, engine: str, project_id: uuid.UUID | None) -> str | None:
    """The live agent that runs `engine` for the project with the most free capacity: one dedicated to
    the project first, else one of the shared pool (never another project's)."""
    agent_id: str | None = await db.fetchval(
        "SELECT a.agent_id FROM agents a"
        " LEFT JOIN sessions s ON s.agent_id = a.agent_id AND s.deleted_at IS NULL"
        " WHERE a.lease_expires_at > now() AND $1 = ANY(a.engines)"
        " AND (a.project_id IS NULL OR a.project_id = $2)"
        " GROUP BY a.agent_id, a.capacity, a.project_id"
        " HAVING count(s.session_id) < a.capacity"
        " ORDER BY a.project_id IS NULL, a.capacity - count(s.session_id) DESC, a.agent_id LIMIT 1",
        engine,
        project_id,
    )
    return agent_id


async def dedicate(db: asyncpg.Connection | asyncpg.Pool, agent_id: str, project_id: uuid.UUID | None) -> bool:
    """Dedicate the agent to the project (None: return it to the shared pool); False when no such agent."""
    done = await db.fetchval(
        "UPDATE agents SET project_id = $2 WHERE agent_id = $1 RETURNING true", agent_id, project_id
    )
    return bool(done)


async def next_command_seq(conn: asyncpg.Connection, agent_id: str) -> int | None:
    """Number the agent's next command (locking its row); None when the agent is not registered."""
    command_seq: int | None = await conn.fetchval(
        "UPDATE agents SET last_command_seq = last_command_seq + 1 WHERE agent_id = $1 RETURNING last_command_seq",
        agent_id,
    )
    return command_seq


async def record_replica(db: asyncpg.Connection | asyncpg.Pool, agent_id: str, generation: int, address: str) -> None:
    """The replica at `address` holds the stream of that lease generation (an older one's does not win)."""
    await db.execute(
        "UPDATE agents SET replica_address = $3 WHERE agent_id = $1 AND generation = $2",
        agent_id,
        generation,
        address,
    )


async def replica_address(db: asyncpg.Connection | asyncpg.Pool, agent_id: str) -> str | None:
    address: str | None = await db.fetchval("SELECT replica_address FROM agents WHERE agent_id = $1", agent_id)
    return address


async def expire(conn: asyncpg.Connection, agent_id: str) -> None:
    """End the agent's lease now and supersede its stream (its next heartbeat finds a newer generation)."""
    await conn.execute(
        "UPDATE agents SET generation = generation + 1, lease_expires_at = now() WHERE agent_id = $1", agent_id
    )
