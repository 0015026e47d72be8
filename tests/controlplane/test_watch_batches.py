"""WatchSessionEvents' runs of events (max_events_per_response) through a real gRPC server on a real
PostgreSQL: a watcher behind gets several events per response, in order, without a gap or a
duplicate, and resumes where it asks; a watcher that does not ask still gets one per response; deltas
still come between the events before and after them; the stored payload reaches the client intact."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import grpc

from astrabox.client import AstraBoxClient
from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as pb
from controlplane.convert import MAX_RUN_BYTES
from controlplane.journal import EventKind, NewEvent
from controlplane.kernel import CreateSession
from tests.controlplane.conftest import Plane


def message(n: int, message_id: str = "") -> runner_pb2.EngineMessage:
    payload = {"n": n, "message_id": message_id or f"msg_{n}", "content": [{"type": "text", "text": f"née {n} ✓"}]}
    return runner_pb2.EngineMessage(type_name="AssistantMessage", payload_json=json.dumps(payload))


async def session_with_outputs(plane: Plane, outputs: int) -> tuple[str, int]:
    """A ready session whose agent has written `outputs` messages (in commits of 100); its last seq."""
    session = await plane.kernel.create_session(CreateSession("batches", plane.project_id))
    session_id = session.session_id
    await plane.runtime_started(session_id)
    await write(plane, session_id, outputs)
    return session_id, (await plane.kernel.get_session(session_id)).last_seq


async def write(plane: Plane, session_id: str, outputs: int) -> None:
    """`outputs` more engine messages from the session's agent, committed 100 at a time."""
    batch: list[runner_pb2.Output] = []
    for _ in range(outputs):
        seq = plane.next_output[session_id] = plane.next_output.get(session_id, 0) + 1
        batch.append(
            runner_pb2.Output(session_id=session_id, output_seq=seq, turn_id="t1", engine_message=message(seq))
        )
        if len(batch) == 100:
            assert not (await plane.committer.commit("agent-1", batch)).refused
            batch = []
    if batch:
        assert not (await plane.committer.commit("agent-1", batch)).refused


async def responses(client: AstraBoxClient, until_seq: int, **request: object) -> list[pb.WatchSessionEventsResponse]:
    """The responses of one watch stream until it has sent `until_seq` (10 s at most)."""
    call = client._stub.WatchSessionEvents(pb.WatchSessionEventsRequest(**request), metadata=client._metadata)
    got: list[pb.WatchSessionEventsResponse] = []
    try:
        async with asyncio.timeout(10):
            async for response in call:
                got.append(response)
                events = list(response.events) or ([response.event] if response.HasField("event") else [])
                if events and events[-1].seq >= until_seq:
                    return got
    finally:
        call.cancel()
    raise AssertionError("the watch ended")


def seqs(got: list[pb.WatchSessionEventsResponse]) -> list[int]:
    return [e.seq for r in got for e in ([*r.events] or ([r.event] if r.HasField("event") else []))]


async def test_a_watcher_behind_gets_runs_of_events_in_order_and_resumes_where_it_asks(plane, client) -> None:
    session_id, last = await session_with_outputs(plane, 1200)
    got = await responses(client, last, session_id=session_id, max_events_per_response=300)
    assert seqs(got) == list(range(1, last + 1))
    assert all(not r.HasField("event") and 1 <= len(r.events) <= 300 for r in got)
    # 1,200 events came in a handful of responses, not one each.
    assert len(got) <= 10 and max(len(r.events) for r in got) == 300
    # The stored message reaches the client as written.
    listed = await client.list_events(session_id, page_size=1000)
    watched = {e.seq: e for r in got for e in r.events}
    for event in listed.events:
        assert watched[event.seq].kind == event.kind
        if event.HasField("engine_message"):
            sent = json.loads(watched[event.seq].engine_message.payload_json)
            assert sent == json.loads(event.engine_message.payload_json)
            assert sent["content"][0]["text"] == f"née {event.engine_message.output_seq} ✓"
            assert watched[event.seq].engine_message.output_seq == event.engine_message.output_seq
    # A watch resumed after seq 777 starts at 778; one that is up to date gets the next event alone.
    resumed = await responses(client, last, session_id=session_id, after_seq=777, max_events_per_response=300)
    assert seqs(resumed) == list(range(778, last + 1))
    call = client._stub.WatchSessionEvents(
        pb.WatchSessionEventsRequest(session_id=session_id, after_seq=last, max_events_per_response=300),
        metadata=client._metadata,
    )
    await write(plane, session_id, 1)
    async with asyncio.timeout(10):
        response = await call.read()
    call.cancel()
    assert [e.seq for e in response.events] == [last + 1]


async def test_a_watcher_that_does_not_ask_gets_one_event_per_response(plane, client) -> None:
    session_id, last = await session_with_outputs(plane, 600)
    got = await responses(client, last, session_id=session_id)
    assert seqs(got) == list(range(1, last + 1))
    assert all(r.HasField("event") and not r.events for r in got)


async def test_a_too_large_run_is_refused(plane, client) -> None:
    session_id, _ = await session_with_outputs(plane, 1)
    call = client._stub.WatchSessionEvents(
        pb.WatchSessionEventsRequest(session_id=session_id, max_events_per_response=1001), metadata=client._metadata
    )
    try:
        await call.read()
    except grpc.aio.AioRpcError as error:
        assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "max_events_per_response" in (error.details() or "")
    else:
        raise AssertionError("a run of 1001 events was accepted")


async def test_deltas_come_between_the_events_of_a_run(plane, running, client) -> None:
    session_id, last = await session_with_outputs(plane, 3)
    written = plane.next_output[session_id]
    call = client._stub.WatchSessionEvents(
        pb.WatchSessionEventsRequest(
            session_id=session_id, after_seq=last, include_deltas=True, max_events_per_response=300
        ),
        metadata=client._metadata,
    )
    await call.initial_metadata()
    # The watch is up to date and waiting: its delta queue exists once it follows the session.
    async with asyncio.timeout(10):
        while not running.kernel.delta_queues(session_id):
            await asyncio.sleep(0.01)
    # Text of a message written after output written+3 and before written+4 (its complete message).
    running.kernel._deltas.publish(
        "agent-1",
        runner_pb2.DeltaBatch(
            deltas=[
                runner_pb2.Delta(
                    session_id=session_id,
                    turn_id="t1",
                    message_id=f"msg_{written + 4}",
                    kind=runner_pb2.DELTA_KIND_TEXT,
                    text=text,
                    after_output_seq=written + 3,
                )
                for text in ("Hel", "lo")
            ]
        ),
    )
    await write(plane, session_id, 6)  # one commit: the watcher reads all six in one page
    got: list[pb.WatchSessionEventsResponse] = []
    async with asyncio.timeout(10):
        while not got or not got[-1].events or got[-1].events[-1].seq < last + 6:
            got.append(await call.read())
    call.cancel()
    shape = [("delta", r.delta.text) if r.HasField("delta") else ("events", [e.seq for e in r.events]) for r in got]
    assert shape[0] == ("events", [last + 1, last + 2, last + 3])
    assert shape[1][0] == "delta" and "".join(t for kind, t in shape if kind == "delta") == "Hello"
    runs = [s for kind, s in shape if kind == "events"]
    assert [seq for run in runs for seq in run] == list(range(last + 1, last + 7))
    # No delta after the run that holds its message's complete event.
    first_after = next(i for i, (kind, s) in enumerate(shape) if kind == "events" and last + 4 in s)
    assert all(kind == "events" for kind, _ in shape[first_after:])


# Engine messages a hostile or merely unusual agent may write: text in many scripts, escapes that
# JSON keeps (quotes, backslashes, control characters), a message too large for more than one per
# response, late ones, and events of other kinds between them.
HOSTILE_TEXTS = [
    "plain",
    'quo"tes \\ back\\slash \n newline \t tab \u0001 control',
    "née ✓ 漢字 עברית 🚀🚀 \u200b zero-width",
    "",
    "🚀" * 120_000,  # 480,000 bytes of UTF-8 in 120,000 characters (240,000 in JSON's UTF-16 length)
    "\U0001d518\U0001d52b\U0001d526 " * 80_000,  # four-byte letters outside the BMP, and spaces
]


async def test_a_run_read_from_rows_is_what_each_event_alone_would_be_and_stays_within_its_bytes(plane, client) -> None:
    session = await plane.kernel.create_session(CreateSession("corpus", plane.project_id))
    session_id = session.session_id
    produced = datetime(2026, 12, 2, 12, 0, 0, 123456, tzinfo=UTC)
    async with plane.journal.transaction() as tx:
        for n, text in enumerate(HOSTILE_TEXTS * 3, start=1):
            payload = {
                "type_name": "AssistantMessage" if n % 2 else "ResultMessage",
                "message": {"message_id": f"msg_{n}", "content": [{"type": "text", "text": text}]},
                **({"late": True} if n % 3 == 0 else {}),
            }
            await tx.append(
                session_id,
                [
                    NewEvent(
                        EventKind.ENGINE_MESSAGE,
                        payload,
                        turn_id="" if n % 4 == 0 else f"turn-{n % 2}",
                        output_seq=n,
                        produce_time=None if n % 5 == 0 else produced + timedelta(microseconds=n),
                    ),
                    NewEvent(EventKind.PERMISSION_MODE_CHANGED, {"mode": "plan"}),
                ],
            )
    last = (await plane.kernel.get_session(session_id)).last_seq
    # Each event alone: the one-per-response watch, made from a StoredEvent (event_to_proto).
    alone = {e.seq: e for r in await responses(client, last, session_id=session_id) for e in [r.event]}
    runs = await responses(client, last, session_id=session_id, max_events_per_response=1000)
    assert seqs(runs) == list(range(1, last + 1))
    for response in runs:
        for event in response.events:
            assert event == alone[event.seq]
        # A response closes once it holds MAX_RUN_BYTES: only its last event may take it over.
        assert sum(e.ByteSize() for e in response.events[:-1]) < MAX_RUN_BYTES
    assert max(len(r.events) for r in runs) > 1
    engine = [alone[seq] for seq in sorted(alone) if alone[seq].HasField("engine_message")]
    assert [json.loads(e.engine_message.payload_json)["content"][0]["text"] for e in engine] == HOSTILE_TEXTS * 3
    assert [e.engine_message.late for e in engine] == [n % 3 == 0 for n in range(1, len(HOSTILE_TEXTS) * 3 + 1)]
    assert engine[0].produce_time.ToDatetime(tzinfo=UTC) == produced + timedelta(microseconds=1)
    assert not engine[4].HasField("produce_time")  # output 5, made without one
    assert [e.turn_id for e in engine[:4]] == ["turn-1", "turn-0", "turn-1", ""]
