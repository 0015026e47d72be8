"""Committed events handed to this replica's watchers (controlplane.live, Journal.transaction,
SessionKernel.watch), against a real PostgreSQL: what is handed over is what a read of the journal
returns; a caught-up watcher gets it without reading the journal; events handed over out of order,
with a gap or past the bound, and another replica's commits, are read from the journal instead,
every event once and in order."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime

import pytest
import pytest_asyncio

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane import kernel as kernel_module
from controlplane import live as live_module
from controlplane.agent_definitions.definitions import AgentDefinitions
from controlplane.conversation import SendMessage
from controlplane.forwarding import read_cluster_secret
from controlplane.identity import callers
from controlplane.journal import NOTIFY_CHANNEL, ClientPage, EventKind, Journal, NewEvent, StoredEvent
from controlplane.kernel import CreateSession, SessionKernel
from controlplane.live import LiveTail, Pushed
from controlplane.page_tokens import PageTokens
from tests.controlplane.conftest import Plane

DEADLINE = 30.0


@pytest.fixture(autouse=True)
def no_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    # A watcher re-reads the journal when it has heard nothing for WATCH_POLL_SECONDS: never, here,
    # so that every read a test counts is one the events caused.
    monkeypatch.setattr(kernel_module, "WATCH_POLL_SECONDS", 3600.0)


class Reads:
    """Counts the journal reads of watchers (a spy on Journal.read_for_clients)."""

    def __init__(self, journal: Journal) -> None:
        self.count = 0
        read = journal.read_for_clients

        async def counted(session_id: str, after_seq: int, limit: int, max_bytes: int) -> ClientPage:
            self.count += 1
            return await read(session_id, after_seq, limit, max_bytes)

        journal.read_for_clients = counted  # type: ignore[method-assign]


class Watcher:
    """Follows a session's watch in the background, collecting its events."""

    def __init__(self, kernel: SessionKernel, session_id: str, after_seq: int = 0) -> None:
        self.events: list[StoredEvent] = []
        self._grew = asyncio.Event()
        self._task = asyncio.create_task(self._run(kernel.watch(session_id, after_seq, include_deltas=True)))

    async def _run(self, watch: AsyncIterator[object]) -> None:
        async for item in watch:
            if isinstance(item, StoredEvent):
                self.events.append(item)
                self._grew.set()

    async def until(self, seq: int) -> list[StoredEvent]:
        """The events received once the last one is `seq` or later (failing past the deadline)."""
        async with asyncio.timeout(DEADLINE):
            while not self.events or self.events[-1].seq < seq:
                self._grew.clear()
                await self._grew.wait()
        return self.events

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


@pytest_asyncio.fixture
async def session_id(plane: Plane) -> str:
    await plane.connect_agent()
    session = await plane.kernel.create_session(CreateSession("fanout", plane.project_id))
    await plane.runtime_started(session.session_id)
    return session.session_id


def engine(type_name: str, payload: dict) -> runner_pb2.EngineMessage:
    return runner_pb2.EngineMessage(type_name=type_name, payload_json=json.dumps(payload))


async def last_seq(plane: Plane, session_id: str) -> int:
    return int(await plane.pool.fetchval("SELECT last_seq FROM sessions WHERE session_id = $1", session_id))


async def speak(plane: Plane, session_id: str, n: int) -> None:
    """`n` engine messages, one commit each, as an agent reports them one by one."""
    for i in range(n):
        await plane.report(session_id, engine_message=engine("AssistantMessage", {"content": [{"text": f"m{i}"}]}))


async def test_events_handed_over_are_those_a_read_of_the_journal_returns(plane: Plane, session_id: str) -> None:
    with plane.live.subscribe(session_id) as subscription:
        assert subscription.take(0) is None  # nothing known yet: read the journal first
        cursor = await last_seq(plane, session_id)
        token = callers.bind(plane.caller)  # events a client's call causes carry its actor
        try:
            accepted = await plane.conversation.send_message(SendMessage(session_id, "m1", "héllo"))
        finally:
            callers.unbind(token)
        assistant = {
            "message_id": "msg_1",
            "content": [{"type": "text", "text": 'a "quoted" ünïcode\n\ttext \u2028'}],
            "model": "m",
            "big": 2**60,
            "f": 1.5,
            "tiny": 1e-7,
            "nested": {"zz": [1, 2.25, None, True], "a": {}},
        }
        result = {"subtype": "success", "is_error": False, "duration_ms": 12, "result": "done", "session_id": "c"}
        await plane.report(session_id, accepted.turn_id, engine_message=engine("AssistantMessage", assistant))
        await plane.report(session_id, accepted.turn_id, engine_message=engine("ResultMessage", result))
        async with plane.journal.transaction() as tx:
            await tx.append(session_id, [NewEvent(EventKind.PERMISSION_MODE_CHANGED, {"mode": "plan"})])

        taken = subscription.take(cursor)
        read = (await plane.journal.read_for_clients(session_id, cursor, 1000, 1 << 30)).events()
    kinds = {event.kind for event in read}
    assert {EventKind.USER_MESSAGE_ACCEPTED, EventKind.ENGINE_MESSAGE, EventKind.TURN_COMPLETED} <= kinds
    assert EventKind.PERMISSION_MODE_CHANGED in kinds
    assert taken is not None and len(taken) == len(read) >= 5
    for handed, stored in zip(taken, read, strict=True):
        assert handed == stored  # every field: seq, at, kind, turn_id, payload, message_json, output_seq, ...
    messages = [e for e in read if e.kind is EventKind.ENGINE_MESSAGE]
    assert json.loads(messages[0].message_json or "") == assistant
    assert messages[0].output_seq is not None
    assert read[0].payload["actor"]


@contextlib.asynccontextmanager
async def listening(live: LiveTail, database_url: str) -> AsyncIterator[None]:
    """`live` follows the NOTIFYs of every replica (this one's included), as server.py has it."""
    heard = asyncio.Event()
    publish_all = live.publish_all

    def connected() -> None:
        publish_all()
        heard.set()

    live.publish_all = connected  # type: ignore[method-assign]
    task = asyncio.create_task(live.follow_postgres(database_url, NOTIFY_CHANNEL))
    try:
        async with asyncio.timeout(DEADLINE):
            await heard.wait()  # listening, and past the wake-up of everyone that follows connecting
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_caught_up_watcher_gets_new_events_without_reading_the_journal(
    plane: Plane, session_id: str, database_url: str
) -> None:
    reads = Reads(plane.journal)
    async with listening(plane.live, database_url):  # its own commits' NOTIFYs come back to it too
        watcher = Watcher(plane.kernel, session_id)
        try:
            await watcher.until(await last_seq(plane, session_id))
            before = reads.count
            await speak(plane, session_id, 20)
            events = await watcher.until(await last_seq(plane, session_id))
            assert reads.count == before  # all 20 from memory
        finally:
            await watcher.close()
    assert [e.seq for e in events] == list(range(1, events[-1].seq + 1))
    assert events == (await plane.journal.read_for_clients(session_id, 0, 1000, 1 << 30)).events()


async def watched_through(plane: Plane, session_id: str, reads: Reads, scenario: Callable[[], object]) -> int:
    """Run `scenario` (which commits) under a caught-up watcher; check it got every event once, in
    order, as the journal holds them; how many times it read the journal meanwhile."""
    watcher = Watcher(plane.kernel, session_id)
    try:
        await watcher.until(await last_seq(plane, session_id))
        before = reads.count
        await scenario()  # type: ignore[misc]
        events = await watcher.until(await last_seq(plane, session_id))
    finally:
        await watcher.close()
    assert [e.seq for e in events] == list(range(1, events[-1].seq + 1))
    assert events == (await plane.journal.read_for_clients(session_id, 0, 1000, 1 << 30)).events()
    return reads.count - before


class HeldBack:
    """Stands between the journal and the live tail, holding back what `hold` picks of the
    session's hand-overs until `release`: the order (or absence) a race could give them."""

    def __init__(self, live: LiveTail, hold: Callable[[int], bool]) -> None:
        self.held: list[tuple[str, int, Sequence[Pushed]]] = []
        self._publish = live.publish
        self._hold = hold
        self._calls = 0

        def publish(key: str, position: int, events: Sequence[Pushed] = ()) -> None:
            self._calls += 1
            if events and self._hold(self._calls):
                self.held.append((key, position, events))
            else:
                self._publish(key, position, events)

        live.publish = publish  # type: ignore[method-assign]

    def release(self) -> None:
        for key, position, events in self.held:
            self._publish(key, position, events)
        self.held.clear()


async def test_hand_overs_out_of_order_are_read_from_the_journal(plane: Plane, session_id: str) -> None:
    reads = Reads(plane.journal)
    held = HeldBack(plane.live, hold=lambda call: call == 1)

    async def scenario() -> None:
        await speak(plane, session_id, 2)  # the second commit's events are handed over first
        assert len(held.held) == 1
        await speak(plane, session_id, 1)
        held.release()
        await speak(plane, session_id, 3)

    assert await watched_through(plane, session_id, reads, scenario) >= 1


async def test_a_hand_over_missed_is_read_from_the_journal(plane: Plane, session_id: str) -> None:
    reads = Reads(plane.journal)
    HeldBack(plane.live, hold=lambda call: call == 2)  # never handed over, nor its wake-up

    async def scenario() -> None:
        await speak(plane, session_id, 5)

    assert await watched_through(plane, session_id, reads, scenario) >= 1


@pytest.mark.parametrize("bound", ["HELD_EVENTS", "HELD_BYTES"])
async def test_a_hand_over_past_the_bound_is_dropped_and_read_from_the_journal(
    plane: Plane, session_id: str, monkeypatch: pytest.MonkeyPatch, bound: str
) -> None:
    reads = Reads(plane.journal)
    monkeypatch.setattr(live_module, bound, 4 if bound == "HELD_EVENTS" else 600)
    text = "x" * 100

    async def scenario() -> None:
        await speak(plane, session_id, 1)  # within the bound: from memory
        async with plane.journal.transaction() as tx:
            await tx.append(session_id, [NewEvent(EventKind.PERMISSION_MODE_CHANGED, {"mode": text})] * 10)
        await speak(plane, session_id, 1)

    assert await watched_through(plane, session_id, reads, scenario) >= 1


async def test_a_watcher_on_another_replica_gets_every_event_through_notify(
    plane: Plane, session_id: str, database_url: str
) -> None:
    other_live = LiveTail()
    other_journal = Journal(plane.pool, other_live)
    page_tokens = PageTokens.from_cluster_secret(await read_cluster_secret(plane.pool))
    other = SessionKernel(
        plane.pool,
        other_journal,
        plane.agents,
        plane.turns,
        other_live,
        page_tokens,
        AgentDefinitions(plane.pool, plane.agents, page_tokens),
    )
    async with listening(other_live, database_url):
        watcher = Watcher(other, session_id)
        try:
            await watcher.until(await last_seq(plane, session_id))
            await speak(plane, session_id, 10)  # committed on this replica, watched on the other
            events = await watcher.until(await last_seq(plane, session_id))
        finally:
            await watcher.close()
    assert [e.seq for e in events] == list(range(1, events[-1].seq + 1))
    assert events == (await plane.journal.read_for_clients(session_id, 0, 1000, 1 << 30)).events()


def test_a_notify_overtaking_the_reply_of_the_statement_that_sent_it_waits_for_its_hand_over() -> None:
    # The one-statement append NOTIFYs at its commit, on another connection than its reply: the
    # NOTIFY can come first. Heard then, it would send the watcher to the journal for events it is
    # about to be handed; it waits instead, and wakes nobody when it says nothing more.
    live = LiveTail()
    event = StoredEvent("s", 5, datetime.now(UTC), EventKind.ENGINE_MESSAGE, "", {})
    with live.subscribe("s") as subscription:
        assert subscription.take(4) is None  # a new watcher reads the journal first
        with live.publishing(["s"]):
            live.heard("s|5")
            assert subscription.take(4) == []  # not woken to read: nothing is known yet
            live.publish("s", 5, [Pushed(event, 10)])
        assert subscription.take(4) == [event]

        # Another replica's commit heard meanwhile says more: it wakes the watcher once the block ends.
        with live.publishing(["s"]):
            live.heard("s|7")
            live.publish("s", 6, [Pushed(dataclasses.replace(event, seq=6), 10)])
        assert subscription.take(5) is None  # seq 7 is not held: read the journal
