"""The outbox serves the relay what it has just committed from memory: the same bytes SQLite holds,
nothing a rolled-back write stored, within its bound, and SQLite whenever memory cannot answer."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.relay.committed import MAX_BYTES, MAX_OUTPUTS
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.state_database import Database


def _message(n: int) -> pb.EngineMessage:
    return pb.EngineMessage(type_name="AssistantMessage", payload_json=f'{{"n": {n}, "text": "{"x" * (n % 7)}"}}')


def _stored(path: Path) -> list[bytes]:
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute("SELECT body FROM outbox ORDER BY id")]


async def test_outputs_served_from_memory_are_byte_for_byte_what_sqlite_holds(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "agent.db")
    outbox = Outbox(db)
    try:
        assert await outbox.pending({}, 100) == []  # learns that no earlier process left outputs
        reads = db.reads
        outbox.trace_turn("t-1", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        # Appended at once: group-committed together, two sessions interleaved.
        await asyncio.gather(*(outbox.append(f"s-{n % 2}", "t-1", _message(n)) for n in range(1, 41)))
        await outbox.append("s-0", "", pb.RuntimeStarted(sandbox_id="sb-1"))

        served = await outbox.pending({}, 100)

        assert db.reads == reads  # no SQLite read
        assert [o.SerializeToString() for o in served] == _stored(tmp_path / "agent.db")
        assert [o.output_seq for o in served if o.session_id == "s-0"] == list(range(1, 22))
        assert served[0].traceparent.startswith("00-4bf92f35")
    finally:
        await db.close()


async def test_memory_answers_limits_bytes_and_paused_sessions_as_sqlite_does(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "agent.db")
    outbox = Outbox(db)
    try:
        await outbox.pending({}, 1)
        for n in range(1, 31):
            await outbox.append(f"s-{n % 3}", "t-1", _message(n))
        # Another outbox on the same file has nothing in memory: it reads SQLite.
        from_sqlite = Outbox(db)
        after = {"s-0": 2, "s-1": 3}
        size = len(_stored(tmp_path / "agent.db")[0])
        args = (after, 12)
        kwargs = {"skip": {"s-2"}, "max_bytes": 5 * size + 3}
        reads = db.reads
        expected = await from_sqlite.pending(*args, **kwargs)
        assert db.reads > reads

        reads = db.reads
        served = await outbox.pending(*args, **kwargs)

        assert db.reads == reads
        assert [o.SerializeToString() for o in served] == [o.SerializeToString() for o in expected]
        assert [(o.session_id, o.output_seq) for o in served[:3]] == [("s-0", 3), ("s-1", 4), ("s-0", 4)]
        assert 3 <= len(served) < 12  # cut by the bytes
        assert sum(o.ByteSize() for o in served) <= kwargs["max_bytes"]
        # The paused session's outputs are still served from memory when it resumes.
        resumed = await outbox.pending({"s-0": 10, "s-1": 10}, 100)
        assert db.reads == reads
        assert [o.output_seq for o in resumed if o.session_id == "s-2"] == list(range(1, 11))
    finally:
        await db.close()


async def test_asking_again_below_what_memory_handed_out_reads_sqlite(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "agent.db")
    outbox = Outbox(db)
    try:
        await outbox.pending({}, 1)
        for n in range(1, 6):
            await outbox.append("s-1", "t-1", _message(n))
        first = await outbox.pending({}, 100)
        reads = db.reads

        # A stream that starts again from the committed cursor (a refusal, a reconnect).
        again = await outbox.pending({"s-1": 2}, 100)

        assert db.reads == reads + 1
        assert [o.SerializeToString() for o in again] == [o.SerializeToString() for o in first[2:]]
        # Acknowledged through what was handed out: memory answers again.
        await outbox.ack("s-1", 5)
        await outbox.append("s-1", "t-1", _message(6))
        reads = db.reads
        assert [o.output_seq for o in await outbox.pending({"s-1": 5}, 100)] == [6]
        assert db.reads == reads
    finally:
        await db.close()


async def test_a_rolled_back_write_hands_memory_nothing(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "agent.db")
    outbox = Outbox(db)
    try:
        await outbox.pending({}, 1)

        def fails(c: sqlite3.Connection) -> None:
            outbox.append_tx(c, "s-1", "t-1", _message(99))
            raise ValueError("this write fails")

        with pytest.raises(ValueError, match="this write fails"):
            await db.write(fails)
        await outbox.append("s-1", "t-1", _message(1))

        served = await outbox.pending({}, 100)

        assert [o.engine_message.payload_json for o in served] == [_message(1).payload_json]
        assert [o.SerializeToString() for o in served] == _stored(tmp_path / "agent.db")
    finally:
        await db.close()


async def test_outputs_stored_by_an_earlier_process_are_read_from_sqlite(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "agent.db")
    outbox = Outbox(db)
    for n in range(1, 4):
        await outbox.append("s-1", "t-1", _message(n))
    await db.close()

    db = await Database.open(tmp_path / "agent.db")
    outbox = Outbox(db)
    try:
        await outbox.append("s-1", "t-1", _message(4))  # in memory; 1..3 only in SQLite
        served = await outbox.pending({}, 100)
        assert [o.output_seq for o in served] == [1, 2, 3, 4]
        assert [o.SerializeToString() for o in served] == _stored(tmp_path / "agent.db")
    finally:
        await db.close()


async def test_memory_stays_within_its_bound_under_a_backlog(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "agent.db")
    outbox = Outbox(db)
    try:
        for chunk in range(100):

            def tx(c: sqlite3.Connection, chunk: int = chunk) -> None:
                for n in range(chunk * 100, chunk * 100 + 100):
                    outbox.append_tx(c, f"s-{n % 4}", "t-1", _message(n))

            await db.write(tx)
            assert len(outbox.committed) <= MAX_OUTPUTS and outbox.committed.bytes <= MAX_BYTES

        assert len(outbox.committed) == MAX_OUTPUTS
        # Drained as a relay would: everything once, in order, memory's part after SQLite's.
        after: dict[str, int] = {}
        drained: list[bytes] = []
        while batch := await outbox.pending(after, 64):
            drained.extend(o.SerializeToString() for o in batch)
            after.update((o.session_id, o.output_seq) for o in batch)
        assert drained == _stored(tmp_path / "agent.db")
        assert len(drained) == 10_000 and len(outbox.committed) == 0
    finally:
        await db.close()
