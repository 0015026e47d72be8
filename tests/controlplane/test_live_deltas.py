"""Live deltas to watchers of this replica (controlplane.deltas through SessionKernel.watch), against a
real PostgreSQL: a delta follows the events before it, never its own complete message; a slow watcher
gets merged deltas within its queue's bounds; a watcher that did not ask gets none."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import pytest_asyncio

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane import deltas as deltas_module
from controlplane.deltas import DeltaHub, LiveDelta
from controlplane.journal import StoredEvent
from controlplane.kernel import CreateSession, SessionKernel
from tests.controlplane.conftest import Plane


@pytest_asyncio.fixture
async def hub_kernel(plane: Plane) -> AsyncIterator[tuple[DeltaHub, SessionKernel]]:
    # The hub the replica's relay would publish to (server.py shares one between relay and kernel).
    hub = DeltaHub()
    plane.kernel._deltas = hub
    yield hub, plane.kernel


async def ready_session(plane: Plane) -> str:
    await plane.connect_agent()
    session = await plane.kernel.create_session(CreateSession("deltas", plane.project_id))
    await plane.report(session.session_id, runtime_started=runner_pb2.RuntimeStarted(sandbox_id="sb"))
    return session.session_id


def pieces(session_id: str, message_id: str, text: str, after: int, size: int = 7) -> runner_pb2.DeltaBatch:
    return runner_pb2.DeltaBatch(
        deltas=[
            runner_pb2.Delta(
                session_id=session_id,
                turn_id="t1",
                message_id=message_id,
                index=0,
                kind=runner_pb2.DELTA_KIND_TEXT,
                text=text[i : i + size],
                after_output_seq=after,
            )
            for i in range(0, len(text), size)
        ]
    )


def assistant(message_id: str, text: str) -> runner_pb2.EngineMessage:
    payload = {"message_id": message_id, "content": [{"type": "text", "text": text}], "model": "m"}
    return runner_pb2.EngineMessage(type_name="AssistantMessage", payload_json=json.dumps(payload))


class Watcher:
    """Reads a watch in the background while `reading` is set; `until_quiet` takes what it read."""

    def __init__(self, watch: AsyncIterator[StoredEvent | LiveDelta]) -> None:
        self.reading = asyncio.Event()
        self.reading.set()
        self._read: asyncio.Queue[StoredEvent | LiveDelta] = asyncio.Queue()
        self._task = asyncio.create_task(self._run(watch))

    async def _run(self, watch: AsyncIterator[StoredEvent | LiveDelta]) -> None:
        async for item in watch:
            self._read.put_nowait(item)
            await self.reading.wait()

    async def until_quiet(self) -> list[StoredEvent | LiveDelta]:
        """What the watch yields until it has nothing more for a moment."""
        items = []
        while True:
            try:
                items.append(await asyncio.wait_for(self._read.get(), 0.5))
            except TimeoutError:
                return items

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def test_a_delta_comes_after_the_events_before_it_and_never_after_its_message(plane, hub_kernel) -> None:
    hub, kernel = hub_kernel
    session_id = await ready_session(plane)
    watch = Watcher(kernel.watch(session_id, 0, include_deltas=True))
    plain = Watcher(kernel.watch(session_id, 0))
    before = await watch.until_quiet()
    await plain.until_quiet()
    written = plane.next_output[session_id]
    # Written after an output the watcher has not been sent yet: held until it has.
    hub.publish("agent-1", pieces(session_id, "msg_1", "Hello there, world.", written + 1))
    assert await watch.until_quiet() == []
    await plane.report(session_id, turn_id="t1", engine_message=runner_pb2.EngineMessage(type_name="SystemMessage"))
    got = await watch.until_quiet()
    assert isinstance(got[0], StoredEvent) and got[0].output_seq == written + 1
    assert "".join(d.text for d in got[1:] if isinstance(d, LiveDelta)) == "Hello there, world."
    # The message is complete and sent: a late delta of it is dropped, not shown after it.
    await plane.report(session_id, turn_id="t1", engine_message=assistant("msg_1", "Hello there, world."))
    await watch.until_quiet()
    hub.publish("agent-1", pieces(session_id, "msg_1", "late", written + 1))
    # Another agent cannot speak for the session.
    hub.publish("agent-2", pieces(session_id, "msg_2", "forged", written + 2))
    assert await watch.until_quiet() == []
    # A watcher that did not ask sees events only, the same ones ListSessionEvents holds.
    plain_items = await plain.until_quiet()
    assert all(isinstance(i, StoredEvent) for i in plain_items)
    listed = (await kernel.list_events(session_id, 0, 1000, ""))[0].events()
    assert [e.seq for e in listed] == list(range(1, len(listed) + 1))
    assert not any(isinstance(i, LiveDelta) for i in before)
    await watch.close()
    await plain.close()


async def test_a_slow_watcher_gets_merged_deltas_and_its_queue_stays_bounded(plane, hub_kernel) -> None:
    hub, kernel = hub_kernel
    session_id = await ready_session(plane)
    watch = Watcher(kernel.watch(session_id, 0, include_deltas=True))
    await watch.until_quiet()
    written = plane.next_output[session_id]
    watch.reading.clear()
    # The watcher reads nothing while 3 messages of 3 blocks each are written in 4-character pieces.
    texts = {
        (m, b): f"message {m} block {b}: " + "lorem ipsum dolor sit amet " * 40 for m in range(3) for b in range(3)
    }
    for (m, b), text in texts.items():
        batch = pieces(session_id, f"msg_{m}", text, written, size=4)
        for delta in batch.deltas:
            delta.index = b
        hub.publish("agent-1", batch)
    [queue] = kernel.delta_queues(session_id)
    assert queue.peak_entries <= deltas_module.MAX_ENTRIES and queue.peak_bytes <= deltas_module.MAX_BYTES
    # Every block's pieces merged into one entry (the one piece the reader took before it paused aside).
    assert len(queue.entries) <= len(texts) and queue.merged >= sum(len(t) // 4 for t in texts.values()) - 2 * len(
        texts
    )
    watch.reading.set()
    got = await watch.until_quiet()
    assert len(got) <= len(texts) + 1 and all(isinstance(d, LiveDelta) for d in got)
    joined: dict[tuple[str, int], str] = {}
    for d in got:
        assert isinstance(d, LiveDelta)
        joined[(d.message_id, d.index)] = joined.get((d.message_id, d.index), "") + d.text
    assert joined == {(f"msg_{m}", b): t for (m, b), t in texts.items()}
    await watch.close()


async def test_a_queue_past_its_bytes_drops_the_rest_of_the_block_not_a_piece_in_the_middle() -> None:
    woken = []
    queue = deltas_module.DeltaQueue(lambda: woken.append(1), max_entries=4, max_bytes=12)
    for i, text in enumerate(["abcd", "efgh", "ijklm", "n"]):
        queue.put(LiveDelta("a", "t", "m", 0, "text", text, 0))
        assert queue.bytes <= 12, i
    assert [d.text for d in queue.entries] == ["abcdefgh"]
    assert queue.dropped == 2
    for i in range(6):
        queue.put(LiveDelta("a", "t", f"m{i}", 0, "text", "x", 0))
    assert len(queue.entries) == 4 and queue.peak_entries == 4
