"""The `events` table: every session's journal, numbered by `seq` with no gap and no duplicate.

One exception to one table per module: `append` also moves `sessions.last_seq` (and the session's
payload total, `sessions.payload_bytes`) on, in the same transaction as the insert and first (the
update locks the session row), because allocating the numbers (and the payloads' offsets) and
inserting the events are one operation; `append_outputs` moves the session's
`committed_output_seq` on with them, for the same reason, and reads `turns` to see that the outputs'
turn has not ended (what marks them late), in the same statement.
"""

from __future__ import annotations

import bisect
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

# An event as a row: kind, turn_id (None for none), payload, output_seq, produce_time (when the agent
# produced the output it journals; None for an event the control plane makes).
EventRow = tuple[str, str | None, dict[str, Any], int | None, datetime | None]
# An agent's output as a row: kind, turn_id (None for none), payload as JSON text, output_seq, produce_time.
OutputRow = tuple[str, str | None, str, int, datetime | None]


@dataclass(frozen=True, slots=True)
class OutputRun:
    """A session's outputs of one relay batch, contiguous in output_seq, that change nothing but the
    journal: their rows, and the one turn they belong to ("" for none)."""

    rows: Sequence[OutputRow]
    turn_id: str


# What clients are sent of an event, in this order (controlplane.convert writes a row by position).
# An engine message's `message` stays the stored JSON text (PostgreSQL renders it: it is passed
# through, never decoded and encoded again here), and its other parts come as columns; any other
# kind's payload is decoded as usual (it is small).
_CLIENT_COLUMNS = (
    "session_id::text AS session_id, seq, at, kind, turn_id, output_seq, produce_time,"
    " CASE WHEN kind = 'engine_message' THEN NULL ELSE payload END AS payload,"
    " CASE WHEN kind = 'engine_message' THEN (payload->'message')::text END AS message_json,"
    " payload->>'type_name' AS type_name, (payload->>'late')::boolean AS late, payload->>'actor' AS actor,"
    " payload->'message'->>'message_id' AS message_id"
)
# Both appends' rows, the arrays `_unnested` makes ($1-$9).
_ROWS = (
    "r AS (SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::bigint[],"
    " $7::timestamptz[], $8::integer[], $9::bigint[]) AS r (session_id, position, kind, turn_id, payload,"
    " output_seq, produce_time, bytes, before))"
)
# How both appends insert them, numbered after their session's old last seq (`b.base`) and placed after
# its old payload total (`b.bytes_base`): the payload's JSON text is parsed once, and its size as
# written and where it starts among the session's payloads are kept beside it (what reads cut pages by).
_INSERT_ROWS = (
    "INSERT INTO events (session_id, seq, kind, turn_id, payload, payload_bytes, payload_offset, output_seq,"
    " produce_time) SELECT r.session_id, b.base + r.position, r.kind, r.turn_id, r.payload::jsonb, r.bytes,"
    " b.bytes_base + r.before, r.output_seq, r.produce_time"
)
# How an append ends: each session's new last seq, or the inserted rows as clients read them.
_LAST_SEQS = ") SELECT session_id, last_seq FROM bumped"
_INSERTED = f" RETURNING {_CLIENT_COLUMNS}, payload_bytes) SELECT * FROM inserted ORDER BY session_id, seq"


async def append(conn: asyncpg.Connection, session_id: str, rows: Sequence[EventRow]) -> int | None:
    """Number `rows` after the session's last seq and insert them; the session's new last seq, None
    (and nothing inserted) when there is no such session."""
    return (await append_many(conn, {session_id: rows})).get(session_id)


async def append_many(conn: asyncpg.Connection, rows: Mapping[str, Sequence[EventRow]]) -> dict[str, int]:
    """`append` for several sessions in one statement (one round trip however many rows and
    sessions: what a relay batch commits); each session's new last seq, a session that does not exist
    left out with nothing of it inserted. Callers lock the sessions first when there are several (in
    a fixed order, against deadlocks)."""
    found = await _append(conn, rows, _LAST_SEQS)
    named = {uuid.UUID(str(session_id)): session_id for session_id in rows}  # as the caller spelled them
    return {named[row["session_id"]]: row["last_seq"] for row in found}


async def append_many_for_clients(
    conn: asyncpg.Connection, rows: Mapping[str, Sequence[EventRow]]
) -> list[asyncpg.Record]:
    """`append_many` returning the inserted rows as `read_for_clients` reads them, in seq order per
    session (`session_id` as text), each with its `payload_bytes`: this replica's watchers are handed
    them after the commit instead of reading them again. The values PostgreSQL makes (`at`, the
    rendered `message_json`) come from the insert itself."""
    return await _append(conn, rows, _INSERTED)


def _unnested(rows: Mapping[str, Sequence[EventRow | OutputRow]]) -> tuple[list[list[Any]], dict[str, int]]:
    """Several sessions' rows as the nine arrays the inserts unnest (`_ROWS`): session, position among
    its session's rows (from 1), kind, turn, payload as JSON text (a dict encoded here, text as
    given), output_seq, produce_time, the payload's size in bytes (UTF-8, as PostgreSQL counts it)
    and the bytes of the session's payloads before it here; and each session's payload bytes."""
    columns: list[list[Any]] = [[], [], [], [], [], [], [], [], []]
    sessions, positions, kinds, turn_ids, payloads, output_seqs, produce_times, sizes, befores = columns
    totals: dict[str, int] = {}
    for session_id, session_rows in rows.items():
        total = 0
        for position, (kind, turn_id, payload, output_seq, produce_time) in enumerate(session_rows, 1):
            text = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
            size = len(text) if text.isascii() else len(text.encode())
            sessions.append(session_id)
            positions.append(position)
            kinds.append(kind)
            turn_ids.append(turn_id)
            payloads.append(text)
            output_seqs.append(output_seq)
            produce_times.append(produce_time)
            sizes.append(size)
            befores.append(total)
            total += size
        totals[session_id] = total
    return columns, totals


async def _append(conn: asyncpg.Connection, rows: Mapping[str, Sequence[EventRow]], then: str) -> list[asyncpg.Record]:
    columns, _ = _unnested(rows)
    if not columns[0]:
        return []
    # The sessions' last_seq and payload total move on by their rows and the rows are numbered after
    # the old values; the payloads travel as JSON text, parsed once by the server.
    found: list[asyncpg.Record] = await conn.fetch(
        f"WITH {_ROWS},"
        " bumped AS (UPDATE sessions s SET last_seq = s.last_seq + c.n, payload_bytes = s.payload_bytes + c.bytes,"
        " updated_at = now() FROM (SELECT session_id, count(*) AS n, sum(bytes) AS bytes FROM r GROUP BY session_id)"
        " c WHERE s.session_id = c.session_id"
        " RETURNING s.session_id, s.last_seq, s.last_seq - c.n AS base, s.payload_bytes - c.bytes AS bytes_base),"
        f" inserted AS ({_INSERT_ROWS} FROM r JOIN bumped b USING (session_id) ORDER BY r.session_id, r.position"
        + then,
        *columns,
    )
    return found


# One autocommitted statement. The agent's sessions are locked in the order of their ids (as
# `sessions.lock_many` does, against deadlocks); each that is not deleted, whose cursor stands just
# before its run, and whose run's turn is current or has not ended (an ended turn's output is
# journaled late, the long way) has its last_seq and cursor moved on, its rows inserted numbered
# after the old last_seq, and its watchers on other replicas notified at the commit. Its row must be
# the version this statement's snapshot read (`xmin`): a transaction that changed it meanwhile (a
# settle ends the turn and clears current_turn_id in one) makes the snapshot's view of its turns
# stale, so the session is left for the long way, which reads them after its lock. A session any
# condition fails for is left untouched. It ends with one of the two endings below.
_APPEND_OUTPUTS = (
    f"WITH {_ROWS},"
    " c AS (SELECT * FROM unnest($10::uuid[], $11::text[], $12::bigint[], $13::bigint[], $14::text[],"
    " $15::bigint[]) AS c (session_id, name, n, through, turn_id, bytes)),"
    " seen AS MATERIALIZED (SELECT session_id, xmin AS version FROM sessions WHERE session_id = ANY($10::uuid[])),"
    " locked AS MATERIALIZED (SELECT session_id FROM sessions WHERE session_id = ANY($10::uuid[])"
    " AND agent_id = $16 ORDER BY session_id FOR UPDATE),"
    " bumped AS (UPDATE sessions s SET last_seq = s.last_seq + c.n, committed_output_seq = c.through,"
    " payload_bytes = s.payload_bytes + c.bytes, updated_at = now()"
    " FROM c JOIN locked USING (session_id) JOIN seen USING (session_id)"
    " WHERE s.session_id = c.session_id AND s.xmin = seen.version AND s.agent_id = $16"
    " AND s.state <> 'deleted' AND s.committed_output_seq = c.through - c.n"
    " AND (c.turn_id = '' OR s.current_turn_id = c.turn_id OR NOT EXISTS (SELECT 1 FROM turns t"
    " WHERE t.session_id = s.session_id AND t.turn_id = c.turn_id AND t.state IN ('completed', 'failed',"
    " 'interrupted')))"
    " RETURNING s.session_id, c.name, s.last_seq, s.last_seq - c.n AS base, s.payload_bytes - c.bytes AS bytes_base),"
    f" inserted AS ({_INSERT_ROWS} FROM r JOIN bumped b USING (session_id) ORDER BY r.session_id, r.position"
)
# Each session done: its name as the caller spelled it and its new last seq.
_OUTPUTS_DONE = ") SELECT b.name, b.last_seq, pg_notify($17, b.name || '|' || b.last_seq) FROM bumped b"
# The inserted rows as `read_for_clients` reads them (with `payload_bytes`), in seq order per session,
# each with its session's name and new last seq (notified once, with its last row).
_OUTPUTS_INSERTED = (
    f" RETURNING {_CLIENT_COLUMNS}, payload_bytes)"
    " SELECT i.*, b.name, b.last_seq, CASE WHEN i.seq = b.last_seq THEN pg_notify($17, b.name || '|' || b.last_seq)"
    " END AS notified FROM inserted i JOIN bumped b ON b.session_id::text = i.session_id ORDER BY i.session_id, i.seq"
)


async def append_outputs(
    conn: asyncpg.Connection, agent_id: str, runs: Mapping[str, OutputRun], channel: str
) -> dict[str, int]:
    """Journal each session's run of outputs and move its committed_output_seq to the run's last, in
    one statement that is its own transaction, notifying `channel` of each; each session done, with
    its new last seq. A session is done only if it is `agent_id`'s, not deleted, its cursor is just
    before the run, the run's turn (if any) has not ended, and no other transaction changed its row
    while this one waited for it; the others are left to the caller."""
    found = await _append_outputs(conn, agent_id, runs, channel, _OUTPUTS_DONE)
    return {row["name"]: row["last_seq"] for row in found}


async def append_outputs_for_clients(
    conn: asyncpg.Connection, agent_id: str, runs: Mapping[str, OutputRun], channel: str
) -> list[asyncpg.Record]:
    """`append_outputs` returning the inserted rows as `append_many_for_clients` does, each with its
    session's `name` (as `runs` spells it) and new `last_seq`: what this replica's watchers are
    handed once the statement (its own transaction) has returned."""
    return await _append_outputs(conn, agent_id, runs, channel, _OUTPUTS_INSERTED)


async def _append_outputs(
    conn: asyncpg.Connection, agent_id: str, runs: Mapping[str, OutputRun], channel: str, then: str
) -> list[asyncpg.Record]:
    columns, totals = _unnested({session_id: run.rows for session_id, run in runs.items()})
    if not columns[0]:
        return []
    names = list(runs)
    found: list[asyncpg.Record] = await conn.fetch(
        _APPEND_OUTPUTS + then,
        *columns,
        names,
        names,
        [len(run.rows) for run in runs.values()],
        [run.rows[-1][3] for run in runs.values()],
        [run.turn_id for run in runs.values()],
        list(totals.values()),
        agent_id,
        channel,
    )
    return found


async def read(
    db: asyncpg.Connection | asyncpg.Pool, session_id: str, after_seq: int, limit: int
) -> list[asyncpg.Record]:
    """Up to `limit` of the session's events after `after_seq`, in order."""
    rows: list[asyncpg.Record] = await db.fetch(
        "SELECT * FROM events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        session_id,
        after_seq,
        limit,
    )
    return rows


# A page: the events after $2, at most $3, in order (read by the index, as the planner does for an
# ORDER BY with a LIMIT), each with `fits`: whether its payload ends within $4 bytes of where the
# first's starts (the first fits whatever its size). One that does not fit comes without its payload
# (never rendered nor sent), and so does every one after it: payloads lie end to end in seq order, so
# the page is cut at the first that does not fit. Events journaled before `payload_offset` existed
# (NULL) fit (paged by count alone), and one that has it does not fit a page that starts among them.
_FOR_CLIENTS = (
    f"SELECT {_CLIENT_COLUMNS}, fits FROM (SELECT session_id, seq, at, kind, turn_id, output_seq, produce_time,"
    " CASE WHEN fits THEN payload END AS payload, fits FROM (SELECT *, coalesce(payload_offset = s.start"
    " OR payload_offset + payload_bytes <= s.start + $4, payload_offset IS NULL) AS fits FROM events,"
    " (SELECT (SELECT payload_offset FROM events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT 1) AS start) s"
    " WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3) e) p"
)


async def read_for_clients(
    db: asyncpg.Connection | asyncpg.Pool, session_id: str, after_seq: int, limit: int, max_bytes: int
) -> tuple[list[asyncpg.Record], bool]:
    """`read`, with an engine message's `message` as JSON text (`message_json`) and the rest of its
    payload as `type_name`, `late`, `actor` and `message_id`: what ListSessionEvents and
    WatchSessionEvents send, in one query per page. The page also ends before the event that would
    take its payloads past `max_bytes` (as journaled: `payload_bytes`), so a page of large events
    stays within what a reader holds, unless its first event alone is larger (it comes all the same,
    alone). Also whether more events follow the page now."""
    rows: list[asyncpg.Record] = await db.fetch(_FOR_CLIENTS, session_id, after_seq, limit + 1, max_bytes)
    # The rows that fit come first (`fits` is the last column): the page is those, `limit` at most.
    cut = min(limit, bisect.bisect_left(rows, True, key=lambda row: not row[-1]))
    return rows[:cut], len(rows) > cut


async def last_output_seq(db: asyncpg.Connection | asyncpg.Pool, session_id: str, through_seq: int) -> int:
    """The output_seq of the session's newest agent output at or before `through_seq` (0: none)."""
    value = await db.fetchval(
        "SELECT output_seq FROM events WHERE session_id = $1 AND seq <= $2 AND output_seq IS NOT NULL"
        " ORDER BY seq DESC LIMIT 1",
        session_id,
        through_seq,
    )
    return int(value or 0)


async def forget_sessions(conn: asyncpg.Connection, session_ids: Sequence[str]) -> int:
    """Delete the sessions' rows (their journal) (retention: `controlplane.retention`); how many."""
    deleted: int = await conn.fetchval(
        "WITH gone AS (DELETE FROM events WHERE session_id = ANY($1::uuid[]) RETURNING 1) SELECT count(*) FROM gone",
        list(session_ids),
    )
    return deleted


async def kind_at(conn: asyncpg.Connection, session_id: str, seq: int) -> tuple[str, str] | None:
    """The kind and turn_id of the session's event `seq` (None: no such event)."""
    row = await conn.fetchrow("SELECT kind, turn_id FROM events WHERE session_id = $1 AND seq = $2", session_id, seq)
    return (row["kind"], row["turn_id"] or "") if row else None


async def last_of_kind(conn: asyncpg.Connection, session_id: str, kind: str) -> tuple[int, str] | None:
    """The seq and turn_id of the session's newest event of `kind` (None: none)."""
    row = await conn.fetchrow(
        "SELECT seq, turn_id FROM events WHERE session_id = $1 AND kind = $2 ORDER BY seq DESC LIMIT 1",
        session_id,
        kind,
    )
    return (int(row["seq"]), row["turn_id"] or "") if row else None


async def turn_end(db: asyncpg.Connection | asyncpg.Pool, session_id: str, turn_id: str) -> asyncpg.Record | None:
    """The event that ended the session's turn (completed, failed or interrupted): its kind and
    payload; None while it goes on."""
    row: asyncpg.Record | None = await db.fetchrow(
        "SELECT kind, payload FROM events WHERE session_id = $1 AND turn_id = $2"
        " AND kind IN ('turn_completed', 'turn_failed', 'turn_interrupted') ORDER BY seq DESC LIMIT 1",
        session_id,
        turn_id,
    )
    return row
