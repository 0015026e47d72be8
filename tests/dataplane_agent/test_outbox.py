"""The durable outbox on real SQLite files, including a SIGKILLed writer."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.state_database import Database

_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from astrabox.runner.v1 import runner_service_pb2 as pb
    from dataplane_agent.relay.outbox import Outbox
    from dataplane_agent.state_database import Database

    async def main():
        db = await Database.open(Path(sys.argv[1]))
        outbox = Outbox(db)
        i = 0
        while True:
            i += 1
            session = "s-a" if i % 2 else "s-b"
            body = pb.EngineMessage(type_name="AssistantMessage", payload_json='{"n": %d}' % i)
            seq = await outbox.append(session, "t-1", body)
            print(session, seq, flush=True)

    asyncio.run(main())
    """
)


def _message(n: int) -> pb.EngineMessage:
    return pb.EngineMessage(type_name="AssistantMessage", payload_json=f'{{"n": {n}}}')


async def _open(path: Path) -> tuple[Database, Outbox]:
    db = await Database.open(path)
    return db, Outbox(db)


async def test_outputs_appended_before_sigkill_are_all_there_after_reopen(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _WRITER,
        str(path),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    reported: dict[str, int] = {}
    assert child.stdout is not None
    while sum(reported.values()) < 60:
        line = await asyncio.wait_for(child.stdout.readline(), 20)
        assert line, "the writer died on its own"
        session, seq = line.decode().split()
        reported[session] = int(seq)
    child.send_signal(signal.SIGKILL)
    await child.wait()

    db, outbox = await _open(path)
    try:
        for session in ("s-a", "s-b"):
            last = await outbox.last_seq(session)
            # Everything the writer saw committed is there; maybe a little more.
            assert last >= reported[session]
            stored = await outbox.pending({}, limit=10_000, skip={"s-b" if session == "s-a" else "s-a"})
            assert [o.output_seq for o in stored] == list(range(1, last + 1))
            assert all(o.session_id == session and o.turn_id == "t-1" for o in stored)
    finally:
        await db.close()


async def test_only_acknowledgements_trim_and_numbering_survives_trim_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    db, outbox = await _open(path)
    for n in range(1, 6):
        assert await outbox.append("s-1", "t-1", _message(n)) == n
    await outbox.append("s-2", "", pb.RuntimeStarted(sandbox_id="sb", driver="local"))

    # Reading pending and reopening delete nothing.
    assert len(await outbox.pending({}, limit=100)) == 6
    await db.close()
    db, outbox = await _open(path)
    assert len(await outbox.pending({}, limit=100)) == 6

    assert await outbox.ack("s-1", 3) == 3
    remaining = await outbox.pending({}, limit=100)
    assert [(o.session_id, o.output_seq) for o in remaining] == [("s-1", 4), ("s-1", 5), ("s-2", 1)]
    assert remaining[0].engine_message.payload_json == '{"n": 4}'
    assert remaining[2].WhichOneof("body") == "runtime_started"

    # Ack everything: the numbering goes on from 6 even with nothing stored, across a reopen.
    await outbox.ack("s-1", 5)
    await db.close()
    db, outbox = await _open(path)
    assert await outbox.last_seq("s-1") == 5
    assert await outbox.append("s-1", "t-2", _message(6)) == 6
    assert [o.output_seq for o in await outbox.pending({}, limit=100, skip={"s-2"})] == [6]
    await db.close()


async def test_pending_respects_cursors_limit_and_append_order(tmp_path: Path) -> None:
    db, outbox = await _open(tmp_path / "agent.db")
    for n in range(1, 5):
        await outbox.append("s-1", "t", _message(n))
        await outbox.append("s-2", "t", _message(n))
    got = await outbox.pending({"s-1": 2, "s-2": 3}, limit=100)
    assert [(o.session_id, o.output_seq) for o in got] == [("s-1", 3), ("s-1", 4), ("s-2", 4)]
    got = await outbox.pending({}, limit=3)
    assert [(o.session_id, o.output_seq) for o in got] == [("s-1", 1), ("s-2", 1), ("s-1", 2)]
    await db.close()


async def test_committed_cursor_beyond_local_numbering_moves_it_forward(tmp_path: Path) -> None:
    db, outbox = await _open(tmp_path / "agent.db")
    await outbox.ack("s-1", 41)  # the control plane has committed 41; this state dir never saw them
    assert await outbox.append("s-1", "", _message(1)) == 42
    await db.close()


async def test_append_rejects_a_message_that_is_not_an_output_body(tmp_path: Path) -> None:
    db, outbox = await _open(tmp_path / "agent.db")
    with pytest.raises(TypeError):
        await outbox.append("s-1", "", pb.Heartbeat())
    assert await outbox.last_seq("s-1") == 0
    await db.close()


async def test_pending_stops_at_max_bytes_but_always_returns_the_first_output(tmp_path: Path) -> None:
    db, outbox = await _open(tmp_path / "agent.db")
    try:
        big = pb.TranscriptSnapshot(engine_session_id="e", content=b"x" * 5000)
        await outbox.append("s-a", "t-1", big)
        for n in range(3):
            await outbox.append("s-a", "t-1", _message(n))
            await outbox.append("s-b", "t-1", _message(n))
        alone = await outbox.pending({}, limit=64, max_bytes=1000)
        assert [(o.session_id, o.output_seq) for o in alone] == [("s-a", 1)]
        assert alone[0].transcript_snapshot.content == b"x" * 5000
        rest = await outbox.pending({"s-a": 1}, limit=64, max_bytes=200)
        # Each session's part is still a contiguous run from its cursor.
        assert 0 < len(rest) < 6
        for session in ("s-a", "s-b"):
            seqs = [o.output_seq for o in rest if o.session_id == session]
            start = 2 if session == "s-a" else 1
            assert seqs == list(range(start, start + len(seqs)))
        assert len(await outbox.pending({"s-a": 1}, limit=64)) == 6
    finally:
        await db.close()


async def test_an_acknowledgement_naming_many_sessions_trims_them_with_one_commit(tmp_path: Path) -> None:
    db, outbox = await _open(tmp_path / "agent.db")
    for n in range(1, 4):
        for session in ("s-1", "s-2", "s-3"):
            await outbox.append(session, "t", _message(n))
    commits = db.commits
    assert await outbox.ack_many({"s-1": 2, "s-2": 3, "s-3": 0}) == 5
    assert db.commits == commits + 1  # one transaction, one fsync, whatever the number of sessions
    got = await outbox.pending({}, limit=100)
    assert [(o.session_id, o.output_seq) for o in got] == [("s-3", 1), ("s-3", 2), ("s-1", 3), ("s-3", 3)]
    await db.close()


def _synchronous(c) -> int:
    """The synchronous setting the transaction commits with: 1 NORMAL (no fsync in WAL mode), 2 FULL."""
    return int(c.execute("PRAGMA synchronous").fetchone()[0])


async def test_a_group_of_writes_that_may_be_lost_commits_without_an_fsync_and_any_other_with_one(
    tmp_path: Path,
) -> None:
    db = await Database.open(tmp_path / "agent.db")
    assert await db.write(_synchronous, durable=False) == 1
    assert await db.write(_synchronous) == 2
    # Queued together behind a transaction: one group, committed as its most demanding write asks.
    gate = threading.Event()
    first = asyncio.ensure_future(db.write(lambda _c: gate.wait(10)))
    await asyncio.sleep(0.05)  # the worker thread holds the first write
    grouped = [
        asyncio.ensure_future(db.write(_synchronous, durable=False)),
        asyncio.ensure_future(db.write(_synchronous)),
    ]
    gate.set()
    assert await first
    assert await asyncio.gather(*grouped) == [2, 2]
    assert await db.write(_synchronous, durable=False) == 1
    await db.close()


async def test_outputs_are_stored_durably_and_acknowledgements_trim_them_without_waiting_for_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, outbox = await _open(tmp_path / "agent.db")
    asked: list[bool] = []
    write = db.write

    async def spy(fn, *, durable: bool = True):  # type: ignore[no-untyped-def]
        asked.append(durable)
        return await write(fn, durable=durable)

    monkeypatch.setattr(db, "write", spy)
    await outbox.append("s-1", "t", _message(1))
    assert await outbox.ack("s-1", 1) == 1
    assert asked == [True, False]
    await db.close()
    # A trim is still committed: survives reopening (a lost one would only resend what is skipped).
    db, outbox = await _open(tmp_path / "agent.db")
    assert await outbox.pending({}, limit=10) == []
    await db.close()
