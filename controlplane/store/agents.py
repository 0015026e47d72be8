"""The `agents` table: data-plane agents, their leases, the engines they declared, their command numbering
and the replica that holds each one's stream; and the locks that show a lease held by a live stream
(migration 0014).

Placement (`pick_for`, `load`, `fleet_load`) also reads `sessions`: an agent's free capacity is its
capacity less the sessions that occupy it (`OCCUPYING`).
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
    version: str = "",
    project_id: uuid.UUID | None = None,
    isolation: str = "",
) -> asyncpg.Record:
    """Insert the agent or renew its row with a new lease generation: generation, lease_expires_at.
    A cordon or drain stays as it is: reconnecting does not lift it. A new row is dedicated to
    `project_id` (the project its join token named) from its first lease on; an existing row keeps
    its dedication, whatever an operator made it since."""
    return await db.fetchrow(
        "INSERT INTO agents (agent_id, generation, lease_expires_at, drivers, engines, engine_manifests, capacity,"
        " instance_id, agent_version, heartbeat_at, project_id, isolation) VALUES ($1, 1, now() + $2, $3, $4, $5, $6,"
        " $7, $8, now(), $9, $10)"
        " ON CONFLICT (agent_id) DO UPDATE SET generation = agents.generation + 1,"
        "  lease_expires_at = EXCLUDED.lease_expires_at, drivers = EXCLUDED.drivers,"
        "  engines = EXCLUDED.engines, engine_manifests = EXCLUDED.engine_manifests, capacity = EXCLUDED.capacity,"
        "  instance_id = EXCLUDED.instance_id, connected_at = now(), agent_version = EXCLUDED.agent_version,"
        "  heartbeat_at = now(), isolation = EXCLUDED.isolation"
        " RETURNING generation, lease_expires_at",
        agent_id,
        lease_ttl,
        list(drivers),
        list(engines),
        dict(engine_manifests),
        capacity,
        instance_id,
        version,
        project_id,
        isolation,
    )


async def renew(
    db: asyncpg.Connection | asyncpg.Pool, agent_id: str, generation: int, lease_ttl: timedelta, heard_ago: timedelta
) -> asyncpg.Record | None:
    """Extend the lease of that generation to `lease_ttl` after its heartbeat was heard (`heard_ago`
    before now), never shortening it: generation, lease_expires_at; None when a newer one replaced it."""
    return await db.fetchrow(
        "UPDATE agents SET lease_expires_at = greatest(lease_expires_at, now() - $4::interval + $3::interval),"
        " heartbeat_at = now() - $4::interval WHERE agent_id = $1 AND generation = $2 RETURNING generation, lease_expires_at",
        agent_id,
        generation,
        lease_ttl,
        heard_ago,
    )


async def hold_lease(conn: asyncpg.Connection, agent_id: str, generation: int) -> bool:
    """Take the lock that shows the lease of that generation held by a live stream (migration 0014),
    for as long as `conn` keeps it; False when another connection holds it."""
    held: bool = await conn.fetchval("SELECT pg_try_advisory_lock(agent_lease_lock_key($1, $2))", agent_id, generation)
    return held


async def release_lease(conn: asyncpg.Connection, agent_id: str, generation: int) -> None:
    """Let go of the lock `hold_lease` took on `conn`."""
    await conn.execute("SELECT pg_advisory_unlock(agent_lease_lock_key($1, $2))", agent_id, generation)


async def lease_lapsed(db: asyncpg.Connection | asyncpg.Pool, agent_id: str) -> bool:
    """The agent's current lease is past its expiry and no live stream holds it."""
    lapsed: bool | None = await db.fetchval(
        "SELECT lease_expires_at < now() AND NOT agent_lease_held(agent_id, generation) FROM agents"
        " WHERE agent_id = $1",
        agent_id,
    )
    return bool(lapsed)


async def engine_manifest(db: asyncpg.Connection | asyncpg.Pool, engine: str, agent_id: str) -> Any:
    """The manifest of `engine` (its JSON) as `agent_id` declared it, else the live agent that connected
    last, else any agent; None when no agent declared it."""
    return await db.fetchval(
        "SELECT engine_manifests -> $1 FROM agents WHERE engine_manifests ? $1"
        " ORDER BY agent_id = $2 DESC, lease_expires_at > now() DESC, connected_at DESC LIMIT 1",
        engine,
        agent_id,
    )


async def declared_manifests(db: asyncpg.Connection | asyncpg.Pool) -> dict[str, Any]:
    """Every engine any agent declared, by kind, with its manifest (its JSON) as `engine_manifest`
    picks it: the live agent that connected last, else any."""
    rows = await db.fetch(
        "SELECT DISTINCT ON (kind) kind, manifest FROM agents, jsonb_each(engine_manifests) AS m(kind, manifest)"
        " ORDER BY kind, lease_expires_at > now() DESC, connected_at DESC"
    )
    return {row["kind"]: row["manifest"] for row in rows}


async def live_engines(db: asyncpg.Connection | asyncpg.Pool) -> list[str]:
    """The kinds of engine the agents with a live lease declared, sorted."""
    kinds: list[str] = await db.fetchval(
        "SELECT coalesce(array_agg(DISTINCT kind ORDER BY kind), '{}')"
        " FROM agents, jsonb_object_keys(engine_manifests) AS kind WHERE lease_expires_at > now()"
    )
    return kinds


# The sessions (alias s) that occupy a slot on their agent: those whose runtime is live there or on
# its way. A session creating, or with a turn in progress (its runtime running, or being started on
# this agent again after a loss or an idle stop), occupies its agent; a ready one only while its
# runtime runs (available and not stopped while idle). Archived, deleted and failed sessions, stopped
# ones and ones whose runtime was lost hold no slot: the agent keeps a stopped sandbox's files, but
# no engine runs for it. The index sessions_occupying (migration 0012) holds exactly these rows: its
# predicate must stay this one, word for word, for the planner to use it.
OCCUPYING = (
    "(s.state IN ('creating', 'running', 'waiting_for_input', 'interrupting')"
    " OR (s.state = 'ready' AND s.runtime_available AND NOT s.runtime_stopped))"
)

# The live agents that could run engine $1 for project $2 (their own, or the shared pool's unless $3:
# the project's own only) whose sandboxes have the isolation $4 (empty: any), each with the number of
# sessions occupying it (o.live); _ELIGIBLE those of them not cordoned.
_RUNNING = (
    " FROM agents a, LATERAL (SELECT count(*) AS live FROM sessions s WHERE s.agent_id = a.agent_id AND "
    + OCCUPYING
    + ") o WHERE a.lease_expires_at > now() AND $1 = ANY(a.engines)"
    " AND (a.project_id = $2 OR (a.project_id IS NULL AND NOT $3)) AND ($4 = '' OR a.isolation = $4)"
)
_ELIGIBLE = _RUNNING + " AND a.cordoned_at IS NULL"


async def pick_for(
    db: asyncpg.Connection | asyncpg.Pool,
    engine: str,
    project_id: uuid.UUID | None,
    dedicated_only: bool = False,
    isolation: str = "",
) -> str | None:
    """The live agent that runs `engine` for the project with the most free capacity: one dedicated to
    the project first, else (unless `dedicated_only`) one of the shared pool, never another
    project's; None when none has a free slot. A read only: `load` claims the slot."""
    agent_id: str | None = await db.fetchval(
        "SELECT a.agent_id"
        + _ELIGIBLE
        + " AND o.live < a.capacity ORDER BY a.project_id IS NULL, a.capacity - o.live DESC, a.agent_id LIMIT 1",
        engine,
        project_id,
        dedicated_only,
        isolation,
    )
    return agent_id


async def fleet_load(
    db: asyncpg.Connection | asyncpg.Pool,
    engine: str,
    project_id: uuid.UUID | None,
    dedicated_only: bool = False,
    isolation: str = "",
) -> tuple[int, int, int]:
    """Of the live agents that may run `engine` for the project: how many, their capacity and the
    sessions occupying them, all summed."""
    row = await db.fetchrow(
        "SELECT count(*) AS agents, coalesce(sum(a.capacity), 0) AS capacity, coalesce(sum(o.live), 0) AS live"
        + _ELIGIBLE,
        engine,
        project_id,
        dedicated_only,
        isolation,
    )
    assert row is not None
    return row["agents"], row["capacity"], row["live"]


async def cordoned_count(
    db: asyncpg.Connection | asyncpg.Pool,
    engine: str,
    project_id: uuid.UUID | None,
    dedicated_only: bool = False,
    isolation: str = "",
) -> int:
    """How many live agents that could run `engine` for the project are cordoned (or draining)."""
    count: int = await db.fetchval(
        "SELECT count(*)" + _RUNNING + " AND a.cordoned_at IS NOT NULL", engine, project_id, dedicated_only, isolation
    )
    return count


async def open_load(conn: asyncpg.Connection, agent_id: str) -> tuple[int, int] | None:
    """`load`, for a new placement: None also when the agent is cordoned. The lock is taken before
    the cordon is read, so a cordon committed while a placement waited for the row is seen."""
    found = await load(conn, agent_id)
    if found is None or await conn.fetchval("SELECT cordoned_at IS NOT NULL FROM agents WHERE agent_id = $1", agent_id):
        return None
    return found


async def load(conn: asyncpg.Connection, agent_id: str) -> tuple[int, int] | None:
    """Lock the agent's row until the transaction ends, then count the sessions occupying it:
    (capacity, live); None when no such agent.

    Two statements, so that the count comes after the lock: a transaction that placed a session on
    the agent holds its row (it queued a command for it) until it commits, and the count taken after
    waiting for it sees that session. Placements on one agent thus take turns and never exceed its
    capacity, on any replica."""
    capacity: int | None = await conn.fetchval("SELECT capacity FROM agents WHERE agent_id = $1 FOR UPDATE", agent_id)
    if capacity is None:
        return None
    live: int = await conn.fetchval("SELECT count(*) FROM sessions s WHERE s.agent_id = $1 AND " + OCCUPYING, agent_id)
    return capacity, live


async def dedicate(db: asyncpg.Connection | asyncpg.Pool, agent_id: str, project_id: uuid.UUID | None) -> bool:
    """Dedicate the agent to the project (None: return it to the shared pool); False when no such agent."""
    done = await db.fetchval(
        "UPDATE agents SET project_id = $2 WHERE agent_id = $1 RETURNING true", agent_id, project_id
    )
    return bool(done)


async def cordon(
    db: asyncpg.Connection | asyncpg.Pool, agent_id: str, drain_for: timedelta | None
) -> asyncpg.Record | None:
    """Cordon the agent (keeping the first cordon's time); with `drain_for`, drain it too, by
    `drain_for` from now unless a drain already runs (its deadline stays). None when no such agent:
    cordoned_at, drain_deadline."""
    return await db.fetchrow(
        "UPDATE agents SET cordoned_at = coalesce(cordoned_at, now()),"
        " drain_deadline = CASE WHEN $2::interval IS NULL THEN drain_deadline"
        "  ELSE coalesce(drain_deadline, now() + $2::interval) END"
        " WHERE agent_id = $1 RETURNING cordoned_at, drain_deadline",
        agent_id,
        drain_for,
    )


async def uncordon(db: asyncpg.Connection | asyncpg.Pool, agent_id: str) -> bool:
    """Lift the agent's cordon and end its drain; False when no such agent."""
    done = await db.fetchval(
        "UPDATE agents SET cordoned_at = NULL, drain_deadline = NULL WHERE agent_id = $1 RETURNING true", agent_id
    )
    return bool(done)


async def draining(db: asyncpg.Connection | asyncpg.Pool) -> list[asyncpg.Record]:
    """The agents being drained: agent_id, overdue (past their drain deadline)."""
    rows: list[asyncpg.Record] = await db.fetch(
        "SELECT agent_id, drain_deadline < now() AS overdue FROM agents WHERE drain_deadline IS NOT NULL"
        " ORDER BY agent_id"
    )
    return rows


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


async def live_agents(db: asyncpg.Connection | asyncpg.Pool) -> list[str]:
    """The agents whose lease has not expired, by id."""
    rows = await db.fetch("SELECT agent_id FROM agents WHERE lease_expires_at > now() ORDER BY agent_id")
    return [str(row["agent_id"]) for row in rows]


async def status_page(db: asyncpg.Connection | asyncpg.Pool, after: str, limit: int) -> list[asyncpg.Record]:
    """Up to `limit` agents by id after `after`, each as the operator's status shows it: its row's
    fields, whether its lease is live or held by a stream (connected), the sessions occupying it
    (live) and those placed on it and not released (placed)."""
    rows: list[asyncpg.Record] = await db.fetch(
        "SELECT a.agent_id, a.agent_version, a.instance_id, a.capacity, a.connected_at, a.heartbeat_at,"
        " a.lease_expires_at, a.cordoned_at, a.drain_deadline, a.project_id::text AS project_id,"
        " (a.lease_expires_at > now() OR agent_lease_held(a.agent_id, a.generation)) AS connected,"
        " (SELECT count(*) FROM sessions s WHERE s.agent_id = a.agent_id AND " + OCCUPYING + ") AS live,"
        " (SELECT count(*) FROM sessions s WHERE s.agent_id = a.agent_id"
        "  AND s.state NOT IN ('archived', 'deleted', 'failed')) AS placed"
        " FROM agents a WHERE a.agent_id > $1 ORDER BY a.agent_id LIMIT $2",
        after,
        limit,
    )
    return rows
