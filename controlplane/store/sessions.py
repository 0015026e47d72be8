"""The `sessions` table: each session's row, its projection (state, turn, runtime, agent) and its cursors.

Some queries here also read the tables whose rows they answer about a session with: the view of a
session (`view`, `view_page`) reads its pending interaction, open background tasks, queued turns and
its engine's manifest (`agents`); the sweeps read `agents` (lapsed leases), `events` (the time of the
last one), `turns` and `background_tasks` (idleness) and `agent_commands` (destructions to retry).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from controlplane.listing import LabelOperator, SessionFilter
from controlplane.session import SessionRecord, SessionState
from controlplane.usage import EngineTotals, Usage

# Projection columns a transaction may set; anything else is a programming error.
_PROJECTION_COLUMNS = frozenset(
    {
        "state",
        "runtime_available",
        "runtime_stopped",
        "agent_id",
        "current_turn_id",
        "engine_session_id",
        "failure_reason",
        "committed_output_seq",
        "permission_mode",
        "deleted_at",
        "released_at",
        "sandbox_id",
        "slash_commands",
        "interrupt_deadline",
    }
)

# A session row with what GetSession shows beside it, in one round trip. The engine's manifest
# is the one Agents.engine_manifest validates the session's requests against.
_VIEW = """
SELECT s.*,
  (SELECT to_jsonb(i) FROM interactions i
    WHERE i.session_id = s.session_id AND i.state = 'pending') AS pending_interaction,
  (SELECT jsonb_agg(jsonb_build_object('task_id', t.task_id, 'description', t.description,
                                       'started_seq', t.started_seq) ORDER BY t.started_seq)
     FROM background_tasks t WHERE t.session_id = s.session_id AND t.state = 'open') AS background_tasks,
  (SELECT array_agg(q.turn_id ORDER BY q.accepted_seq) FROM turns q
    WHERE q.session_id = s.session_id AND q.state = 'queued') AS queued_turn_ids,
  (SELECT jsonb_agg(to_jsonb(g) ORDER BY g.created_at, g.grant_id) FROM tool_grants g
    WHERE g.session_id = s.session_id AND g.revoked_at IS NULL AND (g.expires_at IS NULL OR g.expires_at > now()))
    AS tool_grants,
  (SELECT jsonb_build_object('session_id', c.parent_session_id, 'interaction_id', c.interaction_id,
                             'tool_use_id', c.tool_use_id, 'depth', c.depth)
     FROM subagent_calls c WHERE c.child_session_id = s.session_id) AS subagent_parent,
  (SELECT a.engine_manifests -> s.engine FROM agents a WHERE a.engine_manifests ? s.engine
    ORDER BY a.agent_id IS NOT DISTINCT FROM s.agent_id DESC, a.lease_expires_at > now() DESC, a.connected_at DESC
    LIMIT 1) AS engine_manifest
FROM sessions s
"""

# Sessions whose runtime runs and has nothing to do (the query's alias: s).
_IDLE = (
    " WHERE s.state = 'ready' AND s.runtime_available AND NOT s.runtime_stopped AND s.current_turn_id IS NULL"
    " AND s.deleted_at IS NULL AND s.agent_id IS NOT NULL"
    " AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.session_id = s.session_id AND t.state = 'queued')"
    " AND NOT EXISTS (SELECT 1 FROM background_tasks b WHERE b.session_id = s.session_id AND b.state = 'open')"
)
# Such sessions whose last event is older than $1.
_IDLE_SINCE = (
    "SELECT s.session_id::text AS session_id, s.agent_id FROM sessions s"
    " JOIN events e ON e.session_id = s.session_id AND e.seq = s.last_seq" + _IDLE + " AND e.at < now() - $1::interval"
)


async def insert(
    conn: asyncpg.Connection,
    session_id: str,
    project_id: uuid.UUID,
    request_id: str,
    request_fingerprint: str,
    engine: str,
    permission_mode: str,
    model: str,
    labels: Mapping[str, str],
    state: SessionState,
    agent_id: str,
) -> bool:
    """Create the session's row; False when the project created a session with `request_id` already."""
    inserted = await conn.fetchval(
        "INSERT INTO sessions (session_id, project_id, request_id, request_fingerprint, engine, permission_mode,"
        " model, labels, state, agent_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
        " ON CONFLICT (project_id, request_id) DO NOTHING RETURNING session_id",
        session_id,
        project_id,
        request_id,
        request_fingerprint,
        engine,
        permission_mode,
        model,
        dict(labels),
        state.value,
        agent_id,
    )
    return inserted is not None


async def set_config(
    conn: asyncpg.Connection,
    session_id: str,
    config: bytes,
    agent: tuple[uuid.UUID, str, int] | None,
    turn_timeout: timedelta | None,
) -> None:
    """The new session's configuration, the agent version it pins (None: none) and its turns'
    time limit (None: none)."""
    agent_id, name, version = agent if agent is not None else (None, None, None)
    await conn.execute(
        "UPDATE sessions SET config = $2, agent_definition_id = $3, agent_name = $4, agent_version = $5,"
        " turn_timeout = $6 WHERE session_id = $1",
        session_id,
        config,
        agent_id,
        name,
        version,
        turn_timeout,
    )


async def set_environment(
    conn: asyncpg.Connection,
    session_id: str,
    environment_id: uuid.UUID,
    name: str,
    version: int,
    build_digest: str,
    spec: bytes,
) -> None:
    """The environment version the new session pins, its spec copied (`controlplane.session_config`)."""
    await conn.execute(
        "UPDATE sessions SET environment_id = $2, environment_name = $3, environment_version = $4,"
        " environment_build_digest = $5, environment_spec = $6 WHERE session_id = $1",
        session_id,
        environment_id,
        name,
        version,
        build_digest,
        spec,
    )


async def set_git_source(conn: asyncpg.Connection, session_id: str, git_source: bytes) -> None:
    """The git repository the new session starts with (a serialized GitSource)."""
    await conn.execute("UPDATE sessions SET git_source = $2 WHERE session_id = $1", session_id, git_source)


async def lock(conn: asyncpg.Connection, session_id: str) -> asyncpg.Record | None:
    """Lock the session row for the rest of the transaction and return it."""
    return await conn.fetchrow("SELECT * FROM sessions WHERE session_id = $1 FOR UPDATE", session_id)


async def lock_many(conn: asyncpg.Connection, session_ids: Sequence[str]) -> dict[str, asyncpg.Record]:
    """`lock` for several sessions in one statement, in the order of their ids (a fixed lock order
    avoids deadlocks); each existing one's row, keyed as the caller spelled its id."""
    if not session_ids:
        return {}
    rows = await conn.fetch(
        "SELECT * FROM sessions WHERE session_id = ANY($1::uuid[]) ORDER BY session_id FOR UPDATE", list(session_ids)
    )
    named = {uuid.UUID(session_id): session_id for session_id in session_ids}
    return {named[row["session_id"]]: row for row in rows}


async def set_committed_output_seqs(conn: asyncpg.Connection, cursors: Mapping[str, int]) -> None:
    """Move the sessions' committed_output_seq to the agent outputs now journaled (one statement)."""
    if not cursors:
        return
    await conn.execute(
        "UPDATE sessions s SET committed_output_seq = c.output_seq, updated_at = now()"
        " FROM unnest($1::uuid[], $2::bigint[]) AS c (session_id, output_seq) WHERE s.session_id = c.session_id",
        list(cursors),
        list(cursors.values()),
    )


async def lock_existing(conn: asyncpg.Connection, session_id: str) -> asyncpg.Record:
    """`lock` for a session whose id was read from its row: session rows are
    never deleted (a deleted session keeps its row), so the row is there."""
    row = await lock(conn, session_id)
    assert row is not None, f"the sessions row of {session_id} is gone"
    return row


async def update(conn: asyncpg.Connection, session_id: str, **columns: Any) -> None:
    """Set projection columns of the session (an enum by its value)."""
    unknown = set(columns) - _PROJECTION_COLUMNS
    if unknown:
        raise ValueError(f"not a projection column: {sorted(unknown)}")
    if "state" in columns and isinstance(columns["state"], enum.Enum):
        columns["state"] = columns["state"].value
    names = list(columns)
    assignments = ", ".join(f"{name} = ${i + 2}" for i, name in enumerate(names))
    await conn.execute(
        f"UPDATE sessions SET {assignments}, updated_at = now() WHERE session_id = $1",
        session_id,
        *(columns[n] for n in names),
    )


async def record_usage(conn: asyncpg.Connection, session_id: str, turn: Usage, engine: EngineTotals) -> None:
    """Add a turn's usage to the session's totals and keep the engine's running totals after it."""
    await conn.execute(
        "UPDATE sessions SET usage_input_tokens = usage_input_tokens + $2,"
        " usage_output_tokens = usage_output_tokens + $3,"
        " usage_cache_creation_input_tokens = usage_cache_creation_input_tokens + $4,"
        " usage_cache_read_input_tokens = usage_cache_read_input_tokens + $5,"
        " usage_cost_usd = usage_cost_usd + $6, usage_turns = usage_turns + $7,"
        " engine_cost_usd = $8, engine_tokens = $9, updated_at = now() WHERE session_id = $1",
        session_id,
        turn.input_tokens,
        turn.output_tokens,
        turn.cache_creation_input_tokens,
        turn.cache_read_input_tokens,
        turn.cost_usd,
        turn.turns,
        engine.cost_usd,
        engine.tokens,
    )


async def set_interrupt_deadline(conn: asyncpg.Connection, session_id: str, after: timedelta) -> None:
    """An interrupt not reported within `after` from now is settled by the sweep."""
    await conn.execute(
        "UPDATE sessions SET interrupt_deadline = now() + $2 WHERE session_id = $1",
        session_id,
        after,
    )


async def by_request_id(
    db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, request_id: str
) -> asyncpg.Record | None:
    """The session the project created with `request_id`."""
    return await db.fetchrow("SELECT * FROM sessions WHERE project_id = $1 AND request_id = $2", project_id, request_id)


# pg_advisory_xact_lock(class, project hash): the class of the locks that serialise one project's creates.
_CREATES_LOCK_CLASS = 0x51554F54  # "QUOT"
# The states of a session that no longer counts as live (for the live_sessions quota).
_ENDED_STATES = ["archived", "deleted", "failed"]


async def lock_project_creates(conn: asyncpg.Connection, project_id: uuid.UUID) -> None:
    """Serialise the project's session creates until the transaction ends (on every replica), so
    that each counts the ones before it."""
    await conn.execute("SELECT pg_advisory_xact_lock($1, hashtext($2::uuid::text))", _CREATES_LOCK_CLASS, project_id)


async def count_live(db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID) -> int:
    """The project's sessions neither archived, deleted nor failed."""
    count: int = await db.fetchval(
        "SELECT count(*) FROM sessions WHERE project_id = $1 AND deleted_at IS NULL AND state <> ALL($2::text[])",
        project_id,
        _ENDED_STATES,
    )
    return count


async def created_since(
    db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, window: timedelta, nth: int
) -> tuple[int, timedelta | None]:
    """How many sessions the project created in the last `window` (deleted ones included), and how
    long until the `nth` newest of them leaves the window (None when there are fewer)."""
    row = await db.fetchrow(
        "SELECT (SELECT count(*) FROM sessions WHERE project_id = $1 AND created_at > now() - $2::interval) AS used,"
        " (SELECT created_at + $2::interval - now() FROM sessions"
        "   WHERE project_id = $1 AND created_at > now() - $2::interval"
        "   ORDER BY created_at DESC OFFSET $3 LIMIT 1) AS leaves_in",
        project_id,
        window,
        max(nth - 1, 0),
    )
    assert row is not None
    return row["used"], row["leaves_in"] if nth > 0 else None


async def project_of(db: asyncpg.Connection | asyncpg.Pool, session_id: uuid.UUID) -> uuid.UUID | None:
    """The project owning the session; None when there is no such session."""
    project: uuid.UUID | None = await db.fetchval("SELECT project_id FROM sessions WHERE session_id = $1", session_id)
    return project


async def credential_holder(db: asyncpg.Connection | asyncpg.Pool, session_id: uuid.UUID) -> asyncpg.Record | None:
    """What ResolveCredentials needs of a live session: its project, the agent it is placed on, its
    pinned environment's spec (NULL: the built-in environment) and its agent's spec (`config`, NULL
    or empty: none stored), and whether that agent is dedicated to the session's project
    (`dedicated_host`); None when there is no such session."""
    return await db.fetchrow(
        "SELECT s.project_id, s.agent_id, s.environment_spec, s.config,"
        " coalesce(a.project_id = s.project_id, false) AS dedicated_host"
        " FROM sessions s LEFT JOIN agents a ON a.agent_id = s.agent_id"
        " WHERE s.session_id = $1 AND s.deleted_at IS NULL",
        session_id,
    )


async def committed_output_seq(conn: asyncpg.Connection, session_id: str) -> int:
    seq: int = await conn.fetchval("SELECT committed_output_seq FROM sessions WHERE session_id = $1", session_id)
    return seq


async def view(db: asyncpg.Connection | asyncpg.Pool, session_id: str) -> SessionRecord | None:
    """The session with its pending interaction, open tasks, queue and engine manifest."""
    row = await db.fetchrow(_VIEW + " WHERE s.session_id = $1", session_id)
    return SessionRecord.from_row(row) if row else None


async def view_page(
    db: asyncpg.Connection | asyncpg.Pool,
    project_id: uuid.UUID,
    listing: SessionFilter,
    limit: int,
    before: tuple[datetime, str] | None,
) -> list[SessionRecord]:
    """Up to `limit` of the project's sessions not deleted that `listing` shows, newest first, after
    the (created_at, session_id) `before`."""
    args: list[Any] = [project_id]

    def arg(value: Any) -> str:
        args.append(value)
        return f"${len(args)}"

    where = ["s.project_id = $1", "s.deleted_at IS NULL"]
    if listing.states:
        where.append(f"s.state = ANY({arg(sorted(state.value for state in listing.states))}::text[])")
    for r in listing.labels:
        value = {r.key: r.value} if r.operator in _VALUED else r.key
        where.append(_LABEL_REQUIREMENTS[r.operator].format(arg(value)))
    if listing.created_after is not None:
        where.append(f"s.created_at >= {arg(listing.created_after)}")
    if listing.created_before is not None:
        where.append(f"s.created_at < {arg(listing.created_before)}")
    if listing.agent:
        where.append(f"s.agent_definition_id = {arg(listing.agent)}::uuid")
    if before is not None:
        where.append(f"(s.created_at, s.session_id) < ({arg(before[0])}, {arg(before[1])}::uuid)")
    rows = await db.fetch(
        _VIEW + " WHERE " + " AND ".join(where) + f" ORDER BY s.created_at DESC, s.session_id DESC LIMIT {arg(limit)}",
        *args,
    )
    return [SessionRecord.from_row(r) for r in rows]


# A label requirement as a condition on the labels jsonb ({}: its parameter), in the forms the
# sessions_labels GIN index serves (@> and ?), negated where the requirement is.
_LABEL_REQUIREMENTS = {
    LabelOperator.EQUALS: "s.labels @> {}::jsonb",
    LabelOperator.NOT_EQUALS: "NOT s.labels @> {}::jsonb",
    LabelOperator.EXISTS: "s.labels ? {}",
    LabelOperator.ABSENT: "NOT s.labels ? {}",
}
_VALUED = frozenset({LabelOperator.EQUALS, LabelOperator.NOT_EQUALS})


async def mark_held_runtimes(db: asyncpg.Connection | asyncpg.Pool, agent_id: str, session_ids: Sequence[str]) -> None:
    """The agent still holds these sessions' runtimes (it reconnected): they are available again,
    unless the agent is being drained (`controlplane.drains`): its sessions go elsewhere."""
    await db.execute(
        "UPDATE sessions SET runtime_available = true, updated_at = now()"
        " WHERE agent_id = $1 AND session_id::text = ANY($2::text[]) AND NOT runtime_available"
        " AND state NOT IN ('creating', 'failed', 'deleted', 'archived')"
        " AND NOT EXISTS (SELECT 1 FROM agents a WHERE a.agent_id = $1 AND a.drain_deadline IS NOT NULL)",
        agent_id,
        list(session_ids),
    )


async def committed_cursors(
    db: asyncpg.Connection | asyncpg.Pool, agent_id: str, session_ids: Sequence[str]
) -> dict[str, int]:
    """Committed output_seq of the sessions placed on the agent or named, by session id (an id that
    names no session is left out)."""
    rows = await db.fetch(
        "SELECT session_id::text AS session_id, committed_output_seq FROM sessions"
        " WHERE agent_id = $1 OR session_id::text = ANY($2::text[])",
        agent_id,
        list(session_ids),
    )
    return {r["session_id"]: r["committed_output_seq"] for r in rows}


async def live_on(db: asyncpg.Connection | asyncpg.Pool, agent_id: str) -> list[str]:
    """Sessions placed on the agent that are neither released (deleted, archived) nor failed."""
    rows = await db.fetch(
        "SELECT session_id::text AS session_id FROM sessions"
        " WHERE agent_id = $1 AND state NOT IN ('deleted', 'archived', 'failed') ORDER BY session_id",
        agent_id,
    )
    return [r["session_id"] for r in rows]


async def forget_sandbox(conn: asyncpg.Connection, session_id: str) -> None:
    """A released session's sandbox is destroyed (or kept on purpose by its agent): the session
    names it no more, nor any failure to destroy it."""
    await conn.execute(
        "UPDATE sessions SET sandbox_id = NULL, destroy_attempts = 0, destroy_failure = '', destroy_retry_at = NULL,"
        " destroy_abandoned_at = NULL, updated_at = now() WHERE session_id = $1 AND state IN ('deleted', 'archived')",
        session_id,
    )


async def destroy_failed(
    conn: asyncpg.Connection, session_id: str, attempts: int, reason: str, retry_in: timedelta | None
) -> None:
    """The destruction of the session's sandbox failed `attempts` times in a row, the last with
    `reason`: try again in `retry_in`, or (None) abandon it now."""
    await conn.execute(
        "UPDATE sessions SET destroy_attempts = $2, destroy_failure = $3,"
        " destroy_retry_at = now() + $4::interval,"
        " destroy_abandoned_at = CASE WHEN $4::interval IS NULL THEN now() END, updated_at = now()"
        " WHERE session_id = $1",
        session_id,
        attempts,
        reason,
        retry_in,
    )


async def on_lapsed_leases(db: asyncpg.Connection | asyncpg.Pool) -> list[asyncpg.Record]:
    """Sessions with a runtime on an agent whose lease lapsed (past its expiry, and no live stream
    holds it: `agents.hold_lease`): session_id, agent_id."""
    rows: list[asyncpg.Record] = await db.fetch(
        "SELECT s.session_id::text AS session_id, s.agent_id FROM sessions s JOIN agents a USING (agent_id)"
        " WHERE s.runtime_available AND s.deleted_at IS NULL AND a.lease_expires_at < now()"
        " AND NOT agent_lease_held(a.agent_id, a.generation)"
    )
    return rows


async def interrupts_overdue(db: asyncpg.Connection | asyncpg.Pool) -> list[str]:
    """Sessions interrupting past their interrupt deadline."""
    rows = await db.fetch(
        "SELECT session_id::text AS session_id FROM sessions WHERE state = 'interrupting' AND interrupt_deadline < now()"
    )
    return [r["session_id"] for r in rows]


async def startups_overdue(db: asyncpg.Connection | asyncpg.Pool, deadline: timedelta) -> list[str]:
    """Sessions still creating `deadline` after they were created."""
    rows = await db.fetch(
        "SELECT session_id::text AS session_id FROM sessions WHERE state = 'creating' AND created_at < now() - $1::interval",
        deadline,
    )
    return [r["session_id"] for r in rows]


async def idle_since(db: asyncpg.Connection | asyncpg.Pool, idle: timedelta) -> list[asyncpg.Record]:
    """Sessions whose runtime runs with nothing to do and nothing journaled for `idle`: session_id, agent_id."""
    rows: list[asyncpg.Record] = await db.fetch(_IDLE_SINCE, idle)
    return rows


async def lock_if_idle_since(conn: asyncpg.Connection, idle: timedelta, session_id: str) -> asyncpg.Record | None:
    """`idle_since` for one session, whose row it locks; None when it is no longer idle."""
    return await conn.fetchrow(_IDLE_SINCE + " AND s.session_id = $2 FOR UPDATE OF s", idle, session_id)


async def destroys_due(db: asyncpg.Connection | asyncpg.Pool, quiet_for: timedelta, limit: int) -> list[asyncpg.Record]:
    """Up to `limit` released sessions still naming a sandbox whose destruction is due again: not
    abandoned, past their backoff, with no command unacknowledged or acknowledged within
    `quiet_for`: session_id, agent_id."""
    rows: list[asyncpg.Record] = await db.fetch(
        "SELECT s.session_id::text AS session_id, s.agent_id FROM sessions s"
        " WHERE s.state IN ('deleted', 'archived') AND s.sandbox_id IS NOT NULL AND s.destroy_abandoned_at IS NULL"
        "  AND (s.destroy_retry_at IS NULL OR s.destroy_retry_at <= now())"
        "  AND NOT EXISTS (SELECT 1 FROM agent_commands c WHERE c.session_id = s.session_id"
        "   AND (c.acked_at IS NULL OR c.acked_at > now() - $1::interval))"
        " ORDER BY s.destroy_retry_at NULLS FIRST LIMIT $2",
        quiet_for,
        limit,
    )
    return rows


async def turns_over_time(db: asyncpg.Connection | asyncpg.Pool) -> list[asyncpg.Record]:
    """Running turns (session_id, turn_id, turn_timeout) dispatched longer ago than their session's
    turn_timeout (`controlplane.session_config`)."""
    rows: list[asyncpg.Record] = await db.fetch(
        "SELECT s.session_id::text AS session_id, t.turn_id, s.turn_timeout FROM sessions s"
        " JOIN turns t ON t.session_id = s.session_id AND t.turn_id = s.current_turn_id"
        " WHERE s.turn_timeout IS NOT NULL AND s.current_turn_id IS NOT NULL AND t.state = 'running'"
        " AND t.dispatched_at < now() - s.turn_timeout ORDER BY t.dispatched_at LIMIT 100"
    )
    return rows


async def lock_forgettable(conn: asyncpg.Connection, released_before: timedelta, limit: int) -> list[str]:
    """Lock up to `limit` sessions retention may forget, oldest first: released (archived or deleted)
    longer than `released_before` ago, their sandbox destroyed or kept by its agent (no sandbox
    named, so no destruction pending or abandoned), and no command for them unacknowledged. Rows
    another replica has locked are skipped: replicas sweeping at once take different sessions."""
    rows = await conn.fetch(
        "SELECT s.session_id::text AS session_id FROM sessions s"
        " WHERE s.state IN ('deleted', 'archived') AND s.sandbox_id IS NULL"
        "  AND s.released_at < now() - $1::interval"
        "  AND NOT EXISTS (SELECT 1 FROM agent_commands c WHERE c.session_id = s.session_id AND c.acked_at IS NULL)"
        " ORDER BY s.released_at LIMIT $2 FOR UPDATE OF s SKIP LOCKED",
        released_before,
        limit,
    )
    return [row["session_id"] for row in rows]


async def forget(conn: asyncpg.Connection, session_ids: Sequence[str]) -> int:
    """Delete the sessions' rows, once every row referring to them is gone; how many."""
    deleted: int = await conn.fetchval(
        "WITH gone AS (DELETE FROM sessions WHERE session_id = ANY($1::uuid[]) RETURNING 1) SELECT count(*) FROM gone",
        list(session_ids),
    )
    return deleted


async def gauges_by_state(db: asyncpg.Connection | asyncpg.Pool) -> list[asyncpg.Record]:
    """Per state (the metrics, in one scan): how many sessions (`n`), the longest one has gone
    without a change (`stalled`, seconds), and released ones whose sandbox is not destroyed yet,
    still retried (`releasing`) or given up on (`abandoned`)."""
    rows: list[asyncpg.Record] = await db.fetch(
        "SELECT state, count(*) AS n, EXTRACT(EPOCH FROM now() - min(updated_at))::float8 AS stalled,"
        " count(*) FILTER (WHERE sandbox_id IS NOT NULL AND state IN ('deleted', 'archived')"
        "   AND destroy_abandoned_at IS NULL) AS releasing,"
        " count(*) FILTER (WHERE sandbox_id IS NOT NULL AND destroy_abandoned_at IS NOT NULL) AS abandoned"
        " FROM sessions GROUP BY state"
    )
    return rows


async def count_by_state(db: asyncpg.Connection | asyncpg.Pool) -> dict[str, int]:
    """How many sessions are in each state (the metrics' sessions gauge; one scan, cached there)."""
    rows = await db.fetch("SELECT state, count(*) AS n FROM sessions GROUP BY state")
    return {row["state"]: row["n"] for row in rows}


# Sessions on agent $1 with a runtime there and nothing to do: ready, no turn, none queued; with $2
# (a drain past its deadline) open background tasks do not hold them (the alias: s).
_MOVABLE = (
    "SELECT s.session_id::text AS session_id FROM sessions s"
    " WHERE s.agent_id = $1 AND s.state = 'ready' AND s.runtime_available AND s.current_turn_id IS NULL"
    " AND s.deleted_at IS NULL"
    " AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.session_id = s.session_id AND t.state = 'queued')"
    " AND ($2 OR NOT EXISTS (SELECT 1 FROM background_tasks b WHERE b.session_id = s.session_id AND b.state = 'open'))"
)


async def movable_on(db: asyncpg.Connection | asyncpg.Pool, agent_id: str, overdue: bool, limit: int) -> list[str]:
    """Up to `limit` sessions a drain of `agent_id` may move now (`_MOVABLE`), running or stopped."""
    rows = await db.fetch(_MOVABLE + " ORDER BY s.session_id LIMIT $3", agent_id, overdue, limit)
    return [row["session_id"] for row in rows]


async def lock_if_movable(conn: asyncpg.Connection, agent_id: str, overdue: bool, session_id: str) -> bool:
    """`movable_on` for one session, whose row it locks; False when it is no longer movable."""
    found = await conn.fetchval(_MOVABLE + " AND s.session_id = $3 FOR UPDATE OF s", agent_id, overdue, session_id)
    return found is not None


async def turns_on(db: asyncpg.Connection | asyncpg.Pool, agent_id: str, limit: int) -> list[asyncpg.Record]:
    """Up to `limit` sessions with a turn running on `agent_id`: session_id, turn_id."""
    rows: list[asyncpg.Record] = await db.fetch(
        "SELECT session_id::text AS session_id, current_turn_id AS turn_id FROM sessions"
        " WHERE agent_id = $1 AND current_turn_id IS NOT NULL AND deleted_at IS NULL ORDER BY session_id LIMIT $2",
        agent_id,
        limit,
    )
    return rows


async def stuck(db: asyncpg.Connection | asyncpg.Pool, startup_deadline: timedelta, limit: int) -> list[asyncpg.Record]:
    """Up to `limit` sessions past a transitional state's deadline, oldest first: creating longer than
    `startup_deadline`, interrupting past their interrupt deadline, or with a runtime on an agent
    whose lease lapsed (what the sweep settles; seen here when it has not): session_id, agent_id,
    state, since, why (creating | interrupting | lease_lapsed)."""
    rows: list[asyncpg.Record] = await db.fetch(
        "(SELECT session_id::text AS session_id, coalesce(agent_id, '') AS agent_id, state, created_at AS since,"
        "  'creating' AS why FROM sessions WHERE state = 'creating' AND created_at < now() - $1::interval"
        "  ORDER BY created_at LIMIT $2)"
        " UNION ALL (SELECT session_id::text, coalesce(agent_id, ''), state, interrupt_deadline, 'interrupting'"
        "  FROM sessions WHERE state = 'interrupting' AND interrupt_deadline < now() ORDER BY interrupt_deadline"
        "  LIMIT $2)"
        " UNION ALL (SELECT s.session_id::text, s.agent_id, s.state, a.lease_expires_at, 'lease_lapsed'"
        "  FROM sessions s JOIN agents a USING (agent_id) WHERE s.runtime_available AND s.deleted_at IS NULL"
        "  AND a.lease_expires_at < now() AND NOT agent_lease_held(a.agent_id, a.generation)"
        "  ORDER BY a.lease_expires_at LIMIT $2)"
        " ORDER BY since LIMIT $2",
        startup_deadline,
        limit,
    )
    return rows


async def output_lag(db: asyncpg.Connection | asyncpg.Pool, agent_ids: Sequence[str]) -> dict[str, timedelta]:
    """Per agent, the longest wait from an output's produce_time on the agent to its commit, among
    the newest output of each session placed there and not released (one of its last 16 events)."""
    rows = await db.fetch(
        "SELECT s.agent_id, max(l.lag) AS lag FROM sessions s, LATERAL (SELECT e.at - e.produce_time AS lag"
        "  FROM events e WHERE e.session_id = s.session_id AND e.seq > s.last_seq - 16"
        "  AND e.produce_time IS NOT NULL ORDER BY e.seq DESC LIMIT 1) l"
        " WHERE s.agent_id = ANY($1::text[]) AND s.state NOT IN ('archived', 'deleted', 'failed')"
        " GROUP BY s.agent_id",
        list(agent_ids),
    )
    return {row["agent_id"]: row["lag"] for row in rows if row["lag"] is not None}
