"""The journal: every session's ordered, gap-free event log in PostgreSQL.

Events are appended inside a `JournalTransaction`, which allocates `seq` from
the session row in the same transaction as the insert (so the primary key
`(session_id, seq)` can never see a gap or a duplicate) and tells the live
tail about new events only after the transaction has committed: the events
themselves for the sessions watched on this replica (as `read_for_clients`
would read them, returned by the insert), the new position for the others.
"""

from __future__ import annotations

import contextlib
import enum
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg

from controlplane import store
from controlplane.identity import callers
from controlplane.live import LiveTail, Pushed, notice
from controlplane.session import SessionRecord

NOTIFY_CHANNEL = "astrabox_journal"


class EventKind(enum.Enum):
    SESSION_CREATED = "session_created"
    STARTUP_REQUESTED = "startup_requested"
    RUNTIME_READY = "runtime_ready"
    RUNTIME_FAILED = "runtime_failed"
    USER_MESSAGE_ACCEPTED = "user_message_accepted"
    ENGINE_MESSAGE = "engine_message"
    TURN_COMPLETED = "turn_completed"
    TURN_FAILED = "turn_failed"
    SESSION_DELETED = "session_deleted"
    INTERACTION_REQUESTED = "interaction_requested"
    INTERACTION_ANSWERED = "interaction_answered"
    INTERACTION_CLOSED = "interaction_closed"
    INTERRUPT_REQUESTED = "interrupt_requested"
    TURN_INTERRUPTED = "turn_interrupted"
    INPUT_DELIVERED = "input_delivered"
    PERMISSION_MODE_CHANGED = "permission_mode_changed"
    SESSION_ARCHIVED = "session_archived"
    STARTUP_PHASE = "startup_phase"
    RUNTIME_LOST = "runtime_lost"
    TASK_STOP_REQUESTED = "task_stop_requested"
    ENGINE_INFO = "engine_info"
    ENGINE_TURN_STARTED = "engine_turn_started"
    SANDBOX_RECONCILED = "sandbox_reconciled"
    RUNTIME_STOP_REQUESTED = "runtime_stop_requested"
    RUNTIME_STOPPED = "runtime_stopped"
    TOOL_CALL_SETTLED = "tool_call_settled"
    BACKGROUND_TASK_LOST = "background_task_lost"
    RUNTIME_DESTROY_FAILED = "runtime_destroy_failed"
    SANDBOX_RETAINED = "sandbox_retained"
    TOOL_GRANTED = "tool_granted"
    TOOL_GRANT_REVOKED = "tool_grant_revoked"
    MCP_SERVER_UNAVAILABLE = "mcp_server_unavailable"
    NETWORK_REQUEST_REFUSED = "network_request_refused"
    MEMORY_SYNCED = "memory_synced"
    SESSION_FORKED = "session_forked"
    SUBAGENT_STARTED = "subagent_started"
    SUBAGENT_FINISHED = "subagent_finished"


# EventKind by value, without EnumMeta.__call__ (done for every event read).
_KIND_OF: dict[str, EventKind] = {kind.value: kind for kind in EventKind}


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event about to be journaled. `payload` is the kind's JSON data."""

    kind: EventKind
    payload: Mapping[str, Any] = field(default_factory=dict)
    turn_id: str = ""
    output_seq: int | None = None
    # When the agent produced the output this event journals; None for the control plane's own.
    produce_time: datetime | None = None


@dataclass(frozen=True, slots=True)
class StoredEvent:
    session_id: str
    seq: int
    at: datetime
    kind: EventKind
    turn_id: str
    payload: Mapping[str, Any]
    output_seq: int | None = None
    produce_time: datetime | None = None
    # An engine message read for clients (`Journal.read_for_clients`): its `message` as the stored
    # JSON text, passed through to them undecoded; `payload` then holds the rest and `message_id`.
    message_json: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> StoredEvent:
        message_json = row.get("message_json")
        payload = row["payload"]
        if message_json is not None:  # read for clients: the rest of the payload in columns
            payload = {k: row[k] for k in ("type_name", "late", "actor", "message_id") if row[k] is not None}
        return cls(
            session_id=str(row["session_id"]),
            seq=row["seq"],
            at=row["at"],
            kind=_KIND_OF[row["kind"]],
            turn_id=row["turn_id"] or "",
            payload=payload,
            output_seq=row["output_seq"],
            produce_time=row["produce_time"],
            message_json=message_json,
        )

    @property
    def message_id(self) -> str:
        """An engine message's model-API message id ("" for none, or another kind)."""
        if self.message_json is not None:
            value = self.payload.get("message_id")
        else:
            message = self.payload.get("message")
            value = message.get("message_id") if isinstance(message, dict) else None
        return value if isinstance(value, str) else ""


@dataclass(frozen=True, slots=True)
class ClientPage:
    """A page of a session's journal as clients are sent it (`store.events.read_for_clients`), kept
    as the rows read: a watcher's catch-up goes to protobuf straight from them
    (`convert.watch_responses`), with no StoredEvent per event; `events()` makes those when asked."""

    rows: Sequence[asyncpg.Record]
    # Whether the journal held more events after these when they were read (a reader behind).
    more: bool = False

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def last_seq(self) -> int:
        seq: int = self.rows[-1]["seq"]
        return seq

    def events(self) -> list[StoredEvent]:
        return [StoredEvent.from_row(row) for row in self.rows]


def _handed_over(
    inserted: Sequence[asyncpg.Record], name: Callable[[asyncpg.Record], str], watched: Callable[[str], bool]
) -> tuple[dict[str, int], dict[str, list[Pushed]]]:
    """From rows an append returned for clients (in seq order per session): each session's new last
    seq, by `name` (how the caller spelled its id), and the events of those `watched` on this replica,
    to hand them over once committed."""
    last: dict[str, int] = {}
    pushed: dict[str, list[Pushed]] = {}
    for row in inserted:
        session_id = name(row)
        last[session_id] = row["seq"]
        if watched(session_id):
            event = StoredEvent.from_row(row)
            size = max(row["payload_bytes"], len(event.message_json or ""))  # what it holds in memory, roughly
            pushed.setdefault(session_id, []).append(Pushed(event, size))
    return last, pushed


class JournalTransaction:
    """One database transaction that may append events to several sessions.

    It never rolls back part of itself (no savepoint around an append): the events it hands to
    watchers once committed are those its appends inserted."""

    def __init__(self, conn: asyncpg.Connection, watched: Callable[[str], bool] = lambda _key: False) -> None:
        self.conn = conn
        self.wakes: dict[str, int] = {}
        # The appended events of the sessions watched on this replica, handed to them after the commit.
        self.pushed: dict[str, list[Pushed]] = {}
        self._watched = watched
        # Run once the transaction has committed (metrics count what happened, not what was tried).
        self.committed: list[Callable[[], None]] = []

    async def append(self, session_id: str, events: Sequence[NewEvent]) -> list[int]:
        """Journal `events` in order; returns their seqs. Events a client's call causes carry who made
        it (`actor`, `key:<id>` or `oidc:<subject>`; never a secret)."""
        return (await self.append_many({session_id: events})).get(session_id, [])

    async def append_many(self, events: Mapping[str, Sequence[NewEvent]]) -> dict[str, list[int]]:
        """`append` for several sessions in one statement (a relay batch); each session's seqs."""
        caller = callers.bound()
        actor = {"actor": caller.who} if caller is not None else {}
        rows = {
            session_id: [
                (e.kind.value, e.turn_id or None, {**e.payload, **actor}, e.output_seq, e.produce_time)
                for e in session_events
            ]
            for session_id, session_events in events.items()
            if session_events
        }
        if not rows:
            return {}
        if any(self._watched(session_id) for session_id in rows):
            last = self._hand_over(rows, await store.events.append_many_for_clients(self.conn, rows))
        else:
            last = await store.events.append_many(self.conn, rows)
        if missing := sorted(set(rows) - set(last)):
            raise LookupError(f"session {missing[0]} does not exist")
        seqs: dict[str, list[int]] = {}
        for session_id, session_last in last.items():
            seqs[session_id] = list(range(session_last - len(rows[session_id]) + 1, session_last + 1))
            self.wake(session_id, session_last)
        return seqs

    def _hand_over(self, appended: Mapping[str, object], inserted: Sequence[asyncpg.Record]) -> dict[str, int]:
        """Keep the inserted rows of watched sessions to hand over after the commit; each session's
        new last seq (its last row's: the rows come in seq order), by its id as `appended` spells it."""
        named = {str(uuid.UUID(session_id)): session_id for session_id in appended}
        last, pushed = _handed_over(inserted, lambda row: named[row["session_id"]], self._watched)
        for session_id, events in pushed.items():
            self.pushed.setdefault(session_id, []).extend(events)
        return last

    def wake(self, key: str, position: int) -> None:
        """Wake whoever follows `key` (a session id, or `agent:<id>`) once this
        transaction commits, on this replica and every other one (`notify`)."""
        self.wakes[key] = max(position, self.wakes.get(key, 0))

    def notices(self) -> list[str]:
        """The NOTIFY payloads of this transaction's wakes."""
        return [notice(key, position) for key, position in self.wakes.items()]

    async def notify(self) -> None:
        """Tell the other replicas of every wake, in one statement, just before the commit
        (PostgreSQL delivers notifications at commit, so sending them last loses nothing)."""
        if self.wakes:
            await self.conn.execute(
                "SELECT pg_notify($1, w) FROM unnest($2::text[]) AS w",
                NOTIFY_CHANNEL,
                self.notices(),
            )


class Journal:
    """Appends and reads session journals."""

    def __init__(self, pool: asyncpg.Pool, live: LiveTail) -> None:
        self._pool = pool
        self._live = live

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[JournalTransaction]:
        """A transaction; its appends reach live watchers once it has committed."""
        async with self._pool.acquire() as conn:
            tx = JournalTransaction(conn, self._live.watched)
            notices: list[str] = []
            try:
                async with conn.transaction():
                    yield tx
                    await tx.notify()
                    notices = tx.notices()
                    self._live.expect(notices)
                # Committed: this replica's watchers are woken (and handed the events) before anything else.
                for key, position in tx.wakes.items():
                    self._live.publish(key, position, tx.pushed.get(key, ()))
            finally:
                self._live.expected(notices)
            for committed in tx.committed:
                committed()

    async def append_outputs(self, agent_id: str, runs: Mapping[str, store.events.OutputRun]) -> dict[str, int]:
        """Journal runs of an agent's outputs that change nothing else (`store.events.append_outputs`:
        one statement, its own transaction, no lock taken first) and wake their watchers, handing the
        events to those on this replica; each session journaled, with its new last seq. Those left
        out need the long way (`transaction`)."""
        watched = [session_id for session_id in runs if self._live.watched(session_id)]
        # The statement's own NOTIFYs may overtake its reply: they wait until its events are handed over.
        with self._live.publishing(watched):
            async with self._pool.acquire() as conn:
                if not watched:
                    last = await store.events.append_outputs(conn, agent_id, runs, NOTIFY_CHANNEL)
                    pushed: dict[str, list[Pushed]] = {}
                else:
                    rows = await store.events.append_outputs_for_clients(conn, agent_id, runs, NOTIFY_CHANNEL)
                    last, pushed = _handed_over(rows, lambda row: row["name"], self._live.watched)
            for session_id, position in last.items():
                self._live.publish(session_id, position, pushed.get(session_id, ()))
        return last

    async def read(self, session_id: str, after_seq: int, limit: int) -> list[StoredEvent]:
        return [StoredEvent.from_row(r) for r in await store.events.read(self._pool, session_id, after_seq, limit)]

    async def read_for_clients(self, session_id: str, after_seq: int, limit: int, max_bytes: int) -> ClientPage:
        """`read` as clients are sent it (engine messages' JSON passed through, as `message_json`),
        kept as rows; no more of them than fit in `max_bytes` of payload, but at least one."""
        rows, more = await store.events.read_for_clients(self._pool, session_id, after_seq, limit, max_bytes)
        return ClientPage(rows, more)

    async def last_output_seq(self, session_id: str, through_seq: int) -> int:
        """Where a watcher that has been sent every event through `through_seq` stands among the
        agent's outputs (what live deltas are ordered by: controlplane.deltas)."""
        return await store.events.last_output_seq(self._pool, session_id, through_seq)

    async def session(self, session_id: str) -> SessionRecord | None:
        """The session with its pending interaction, open tasks and queue."""
        return await store.sessions.view(self._pool, session_id)
