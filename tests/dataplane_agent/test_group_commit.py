"""Group commit of the agent's writes (`Database.write`) on real SQLite files: outputs stored close
together share one transaction, each caller still learns its write is durable only once it is, and
the relay sends nothing that is not committed."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from astrabox.backoff import Backoff
from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.claude_code import MANIFEST as CLAUDE_CODE
from dataplane_agent.errors import StateError
from dataplane_agent.relay.client import RelayClient, RelayConfig
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.state import AgentState
from dataplane_agent.state_database import Database
from tests.dataplane_agent.test_relay_client import ControlPlane, serving


def _message(n: int) -> pb.EngineMessage:
    return pb.EngineMessage(type_name="AssistantMessage", payload_json=f'{{"n": {n}}}')


def _stored(path: Path) -> list[tuple[str, int]]:
    """The outputs another connection sees, i.e. the committed ones."""
    with contextlib.closing(sqlite3.connect(path)) as other:
        return other.execute("SELECT session_id, output_seq FROM outbox ORDER BY id").fetchall()


class Gate:
    """A write that holds the database's worker thread inside its transaction until opened."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self._open = threading.Event()

    def write(self, c: sqlite3.Connection) -> None:
        self.entered.set()
        assert self._open.wait(30), "the gate was never opened"

    def open(self) -> None:
        self._open.set()

    async def wait_entered(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, 30)


async def test_a_burst_of_outputs_is_committed_in_far_fewer_transactions_than_outputs(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "agent.db")
    outbox = Outbox(db)
    try:
        before = db.commits
        sessions = [f"s-{k}" for k in range(4)]
        # 200 outputs produced at once, as 4 busy sessions' engines would.
        seqs = await asyncio.gather(*(outbox.append(sessions[i % 4], "t-1", _message(i)) for i in range(200)))
        transactions = db.commits - before
        assert transactions <= 20, f"{transactions} transactions for 200 outputs"
        # Each session's outputs are numbered 1..50 with no gap, in the order they were produced.
        for k, session in enumerate(sessions):
            assert seqs[k::4] == list(range(1, 51))
            stored = await outbox.pending({}, limit=1000, skip=set(sessions) - {session})
            assert [o.output_seq for o in stored] == list(range(1, 51))
            assert [o.engine_message.payload_json for o in stored] == [f'{{"n": {i}}}' for i in range(k, 200, 4)]
        # What each caller was told is stored is committed: another connection sees all of it.
        assert len(_stored(tmp_path / "agent.db")) == 200
    finally:
        await db.close()


async def test_a_write_that_fails_in_a_group_is_rolled_back_alone(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "agent.db")
    outbox = Outbox(db)
    try:
        gate = Gate()
        holding = asyncio.create_task(db.write(gate.write))
        await gate.wait_entered()
        before = db.commits

        def fails(c: sqlite3.Connection) -> None:
            outbox.append_tx(c, "s-1", "t-1", _message(99))
            raise ValueError("this write fails")

        # Queued while the worker is busy: one group, committed in one transaction.
        first = asyncio.create_task(outbox.append("s-1", "t-1", _message(1)))
        failing = asyncio.create_task(db.write(fails))
        second = asyncio.create_task(outbox.append("s-1", "t-1", _message(2)))
        await asyncio.sleep(0)
        gate.open()
        await holding
        assert await first == 1
        with pytest.raises(ValueError, match="this write fails"):
            await failing
        assert await second == 2
        # The held write's transaction, then one for the three.
        assert db.commits - before == 2, "the three writes did not share one transaction"
        stored = await outbox.pending({}, limit=10)
        assert [o.engine_message.payload_json for o in stored] == ['{"n": 1}', '{"n": 2}']
    finally:
        await db.close()


async def test_a_group_whose_transaction_sqlite_ended_fails_as_a_whole(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "agent.db")
    outbox = Outbox(db)
    try:
        gate = Gate()
        holding = asyncio.create_task(db.write(gate.write))
        await gate.wait_entered()

        def ends_the_transaction(c: sqlite3.Connection) -> None:
            c.execute("ROLLBACK")  # as SQLite itself does on a full disk or an I/O error
            raise sqlite3.OperationalError("database or disk is full")

        first = asyncio.create_task(outbox.append("s-1", "t-1", _message(1)))
        failing = asyncio.create_task(db.write(ends_the_transaction))
        await asyncio.sleep(0)
        gate.open()
        await holding
        # Output 1 shared the lost transaction: its producer is not told it is stored.
        for task in (first, failing):
            with pytest.raises(sqlite3.OperationalError, match="disk is full"):
                await task
        assert _stored(tmp_path / "agent.db") == []
        # The database goes on: the next output takes the number 1 never committed.
        assert await outbox.append("s-1", "t-1", _message(2)) == 1
    finally:
        await db.close()


class _NoCommands:
    def submit(self, command: pb.Command, reply: Callable[[pb.CommandAck], None]) -> None:
        raise AssertionError("no command is sent in this test")


@contextlib.asynccontextmanager
async def _relay(db: Database, outbox: Outbox, port: int) -> AsyncIterator[RelayClient]:
    config = RelayConfig(
        target=f"127.0.0.1:{port}",
        agent_id="agent-1",
        enrollment_token="tok",
        instance_id="i-1",
        drivers=("local",),
        engines=(CLAUDE_CODE,),
        backoff=Backoff(initial=0.05, maximum=0.2),
    )
    relay = RelayClient(config, state=AgentState(db), outbox=outbox, commands=_NoCommands())
    task = asyncio.create_task(relay.run())
    try:
        yield relay
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_no_output_is_sent_before_its_group_committed(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    db = await Database.open(path)
    outbox = Outbox(db)
    cp = ControlPlane()
    try:
        async with serving(cp) as port, _relay(db, outbox, port) as relay:
            async with asyncio.timeout(10):
                while not relay.streams_opened:
                    await asyncio.sleep(0.01)
            await outbox.append("s-1", "t-1", _message(1))
            await cp.wait_until(lambda: cp.committed("s-1") == 1)

            # The worker is held; then output 2 and a write that holds its transaction open queue up.
            first_gate, second_gate = Gate(), Gate()
            holding = asyncio.create_task(db.write(first_gate.write))
            await first_gate.wait_entered()
            appended = asyncio.create_task(outbox.append("s-1", "t-1", _message(2)))
            still_open = asyncio.create_task(db.write(second_gate.write))
            await asyncio.sleep(0)
            first_gate.open()
            await holding
            # Output 2 is written in a transaction that has not committed yet.
            await second_gate.wait_entered()
            await asyncio.sleep(0.3)  # room for the relay to misbehave
            assert not appended.done(), "the producer was told output 2 is stored before it was"
            assert ("s-1", 2) not in _stored(path), "output 2 is visible before its transaction committed"
            assert cp.received == [("s-1", 1)], "output 2 was sent before its transaction committed"

            second_gate.open()
            await still_open
            assert await appended == 2
            await cp.wait_until(lambda: cp.committed("s-1") == 2)
            assert cp.received == [("s-1", 1), ("s-1", 2)]
            assert cp.journal["s-1"][1].engine_message.payload_json == '{"n": 2}'
    finally:
        await db.close()


async def test_a_write_after_close_fails_and_does_not_hang(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "agent.db")
    await db.close()
    for _ in range(2):
        with pytest.raises(StateError, match="closed"):
            await asyncio.wait_for(Outbox(db).append("s-1", "t-1", _message(1)), 10)


async def test_committed_outputs_can_be_read_while_a_group_is_still_being_written(tmp_path: Path) -> None:
    """The relay's read of its next batch is not queued behind the writer: it sees what is committed
    and nothing of the transaction still under way."""
    db = await Database.open(tmp_path / "agent.db")
    outbox = Outbox(db)
    gate = Gate()
    try:
        await outbox.append("s-1", "t-1", _message(1))
        held = asyncio.create_task(db.write(gate.write))
        await gate.wait_entered()
        storing = asyncio.create_task(outbox.append("s-1", "t-1", _message(2)))  # queued behind the gate
        async with asyncio.timeout(10):
            pending = await outbox.pending({}, limit=10)
        assert [o.output_seq for o in pending] == [1]
        gate.open()
        await asyncio.gather(held, storing)
        assert [o.output_seq for o in await outbox.pending({}, limit=10)] == [1, 2]
    finally:
        gate.open()
        await db.close()
