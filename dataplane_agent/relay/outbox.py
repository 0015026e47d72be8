"""The durable outbox: every output the agent produced, until the control plane acknowledges it.

Per session, outputs are numbered 1, 2, 3 … with no gaps. The numbering lives
in its own cursor table, so trimming acknowledged outputs never makes it
restart. Only an acknowledgement (`ack`) deletes; nothing else does. Rows are
the serialized `runner.v1.Output` exactly as it will be sent.

Each output committed is also handed, once its transaction committed, to
`CommittedOutputs` in memory, and `pending` serves the relay from there while
it keeps up (relay/committed.py); SQLite remains what the relay reads after a
reconnect, a refusal, a backlog larger than memory's bound, or a restart.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.relay.committed import MAX_BYTES, MAX_OUTPUTS, CommittedOutputs
from dataplane_agent.state_database import Database

# The `Output.body` oneof field for each body message type.
_BODY_FIELDS: dict[str, str] = {
    field.message_type.full_name: field.name
    for field in pb.Output.DESCRIPTOR.oneofs_by_name["body"].fields
    if field.message_type is not None  # every body is a message
}


@dataclass(frozen=True, slots=True)
class OutboxCursor:
    """What the outbox knows about one session's output sequence."""

    session_id: str
    # The newest output_seq ever assigned.
    last_seq: int
    # How many outputs are still waiting for an acknowledgement.
    pending: int


class Outbox:
    """Append, read pending, trim on acknowledgement."""

    def __init__(self, db: Database, *, memory_outputs: int = MAX_OUTPUTS, memory_bytes: int = MAX_BYTES) -> None:
        self._db = db
        # Committed and not yet taken by a stream: what `pending` serves without reading SQLite.
        self.committed = CommittedOutputs(memory_outputs, memory_bytes)
        # The newest output_seq appended per session by this process: what a live delta follows.
        self._appended: dict[str, int] = {}
        # The traceparent of each running turn's span, carried by the turn's outputs.
        self._traces: dict[str, str] = {}

    def trace_turn(self, turn_id: str, traceparent: str) -> None:
        """Give the outputs appended under `turn_id` from now on `traceparent` (its span's)."""
        if traceparent:
            self._traces[turn_id] = traceparent

    def untrace_turn(self, turn_id: str) -> None:
        """The turn ended: its later outputs (a transcript snapshot) carry no trace."""
        self._traces.pop(turn_id, None)

    def on_append(self, listener: Callable[[], None]) -> None:
        """Call `listener` on the event loop after any commit that may have appended."""
        self._db.on_commit(listener)

    async def append(self, session_id: str, turn_id: str, body: Message) -> int:
        """Store one output; return its output_seq."""
        return await self._db.write(lambda c: self.append_tx(c, session_id, turn_id, body))

    def append_tx(self, c: sqlite3.Connection, session_id: str, turn_id: str, body: Message) -> int:
        """`append` inside a caller's transaction."""
        field = _BODY_FIELDS.get(body.DESCRIPTOR.full_name)
        if field is None:
            raise TypeError(f"{body.DESCRIPTOR.full_name} is not an Output body")
        row = c.execute("SELECT last_seq FROM output_cursor WHERE session_id = ?", (session_id,)).fetchone()
        seq = (row[0] if row else 0) + 1
        produce_time = Timestamp()
        produce_time.GetCurrentTime()
        output = pb.Output(
            session_id=session_id,
            output_seq=seq,
            turn_id=turn_id,
            produce_time=produce_time,
            traceparent=self._traces.get(turn_id, "") if turn_id else "",
        )
        getattr(output, field).CopyFrom(body)
        data = output.SerializeToString()
        c.execute("INSERT INTO outbox (session_id, output_seq, body) VALUES (?, ?, ?)", (session_id, seq, data))
        c.execute(
            "INSERT INTO output_cursor (session_id, last_seq) VALUES (?, ?)"
            " ON CONFLICT (session_id) DO UPDATE SET last_seq = excluded.last_seq",
            (session_id, seq),
        )
        self._appended[session_id] = seq
        size = len(data)
        self._db.after_commit(lambda: self.committed.committed(output, size))
        return seq

    async def appended(self, session_id: str) -> int:
        """The newest output_seq appended for the session (read once from the store after a restart)."""
        seq = self._appended.get(session_id)
        if seq is None:
            seq = self._appended[session_id] = await self.last_seq(session_id)
        return seq

    async def pending(
        self, after: Mapping[str, int], limit: int, skip: Collection[str] = (), max_bytes: int | None = None
    ) -> list[pb.Output]:
        """Up to `limit` stored outputs with output_seq above `after[session]`
        (0 for a session not named), in the order they were appended; each
        session's part is a contiguous run. Sessions in `skip` are left out.
        With `max_bytes`, outputs stop before their serialized sizes exceed
        it (the first one is always included, however large).

        From memory when it holds all of them (the outputs are then forgotten
        there: a later call asking for them again reads SQLite); from SQLite
        otherwise. One caller at a time (the relay's sender)."""
        if not self.committed.floors_loaded:
            self.committed.load_floors(await self._stored_last_seqs())
        if self.committed.serves(after, skip):
            return self.committed.take(after, limit, skip, max_bytes)

        def read(c: sqlite3.Connection) -> list[pb.Output]:
            sessions = [r[0] for r in c.execute("SELECT DISTINCT session_id FROM outbox")]
            rows: list[tuple[int, int]] = []
            for session_id in sessions:
                if session_id in skip:
                    continue
                rows.extend(
                    c.execute(
                        "SELECT id, length(body) FROM outbox WHERE session_id = ? AND output_seq > ?"
                        " ORDER BY output_seq LIMIT ?",
                        (session_id, after.get(session_id, 0), limit),
                    )
                )
            rows.sort()
            chosen: list[int] = []
            total = 0
            for row_id, size in rows[:limit]:
                total += size
                if chosen and max_bytes is not None and total > max_bytes:
                    break
                chosen.append(row_id)
            if not chosen:
                return []
            marks = ",".join("?" * len(chosen))
            bodies = c.execute(f"SELECT body FROM outbox WHERE id IN ({marks}) ORDER BY id", chosen).fetchall()
            return [pb.Output.FromString(body) for (body,) in bodies]

        return await self._db.read(read)

    async def _stored_last_seqs(self) -> dict[str, int]:
        rows = await self._db.read(
            lambda c: c.execute("SELECT session_id, MAX(output_seq) FROM outbox GROUP BY session_id").fetchall()
        )
        return dict(rows)

    async def ack(self, session_id: str, through_seq: int) -> int:
        """Trim every output of the session at or below `through_seq`; return how many.

        A cursor above anything assigned here (the agent lost its state, the
        control plane did not) moves the numbering past it, so new outputs are
        never mistaken for duplicates of committed ones."""
        return await self.ack_many({session_id: through_seq})

    async def ack_many(self, cursors: Mapping[str, int]) -> int:
        """`ack` for every session of an acknowledgement in one transaction (one fsync, however many
        sessions it names); how many outputs were trimmed."""

        def tx(c: sqlite3.Connection) -> int:
            trimmed = 0
            for session_id, through_seq in cursors.items():
                trimmed += c.execute(
                    "DELETE FROM outbox WHERE session_id = ? AND output_seq <= ?", (session_id, through_seq)
                ).rowcount
                c.execute(
                    "INSERT INTO output_cursor (session_id, last_seq) VALUES (?, ?)"
                    " ON CONFLICT (session_id) DO UPDATE SET last_seq = MAX(last_seq, excluded.last_seq)",
                    (session_id, through_seq),
                )
            return trimmed

        for session_id, through_seq in cursors.items():
            self.committed.acknowledged(session_id, through_seq)
        # Not durable: a trim lost with power is only outputs sent again, which the control plane skips.
        return await self._db.write(tx, durable=False) if cursors else 0

    async def last_seq(self, session_id: str) -> int:
        """The newest output_seq assigned for the session (0 if none ever was)."""
        row = await self._db.read(
            lambda c: c.execute("SELECT last_seq FROM output_cursor WHERE session_id = ?", (session_id,)).fetchone()
        )
        return row[0] if row else 0

    async def cursors(self) -> list[OutboxCursor]:
        """Every session that still has unacknowledged outputs."""
        rows = await self._db.read(
            lambda c: c.execute(
                "SELECT o.session_id, k.last_seq, COUNT(*) FROM outbox o"
                " JOIN output_cursor k ON k.session_id = o.session_id GROUP BY o.session_id"
            ).fetchall()
        )
        return [OutboxCursor(session_id=r[0], last_seq=r[1], pending=r[2]) for r in rows]

    async def totals(self) -> tuple[int, int, int]:
        """Outputs stored and not yet acknowledged, their bytes, and of how many sessions (metrics)."""
        row = await self._db.read(
            lambda c: c.execute(
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(body)), 0), COUNT(DISTINCT session_id) FROM outbox"
            ).fetchone()
        )
        return int(row[0]), int(row[1]), int(row[2])

    async def oldest_produce_time(self) -> float | None:
        """When the oldest output still stored was produced (epoch seconds; None: none is stored): how
        far the control plane's commits lag behind this agent, even while no stream is open (metrics)."""
        row = await self._db.read(lambda c: c.execute("SELECT body FROM outbox ORDER BY id LIMIT 1").fetchone())
        if row is None:
            return None
        return float(pb.Output.FromString(row[0]).produce_time.ToMicroseconds() / 1e6)

    async def first_pending_seq(self, session_id: str) -> int | None:
        """The lowest output_seq still stored for the session, if any."""
        row = await self._db.read(
            lambda c: c.execute("SELECT MIN(output_seq) FROM outbox WHERE session_id = ?", (session_id,)).fetchone()
        )
        return row[0] if row else None
