"""The agent's live delta buffer (relay/deltas.py): nothing kept without a stream, pieces of a block
merged while the stream is busy, bounded, and never written ahead of a queued output."""

from __future__ import annotations

import asyncio
from unittest import mock

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.relay.client import _Stream
from dataplane_agent.relay.deltas import LiveDeltas


def piece(text: str, message_id: str = "msg_1", index: int = 0) -> pb.Delta:
    return pb.Delta(session_id="s", message_id=message_id, index=index, kind=pb.DELTA_KIND_TEXT, text=text)


def test_without_a_stream_deltas_are_dropped_and_none_wait() -> None:
    deltas = LiveDeltas()
    deltas.publish(piece("hello"))
    assert deltas.take() is None
    deltas.open(lambda: None)
    deltas.publish(piece("hello"))
    deltas.close()
    assert deltas.take() is None


def test_pieces_of_a_block_merge_while_the_stream_is_busy_within_bounds() -> None:
    deltas = LiveDeltas(max_entries=2, max_bytes=20)
    deltas.open(lambda: None)
    for text in ["Hel", "lo, ", "world"]:
        deltas.publish(piece(text))
    deltas.publish(piece("next", index=1))
    deltas.publish(piece("other", message_id="msg_2"))  # a third block: no room
    deltas.publish(piece("x" * 20, index=1))  # past the bytes
    batch = deltas.take()
    assert batch is not None
    assert [(d.index, d.text) for d in batch.deltas] == [(0, "Hello, world"), (1, "next")]
    assert deltas.dropped == 2 and deltas.take() is None


async def test_a_queued_output_is_written_before_waiting_deltas() -> None:
    deltas = LiveDeltas()
    stream = _Stream(call=mock.Mock(), deltas=deltas)
    deltas.open(stream.writable.set)
    deltas.publish(piece("text"))
    stream.send(pb.ConnectRequest(output_batch=pb.OutputBatch(outputs=[pb.Output(session_id="s", output_seq=1)])))
    first = await asyncio.wait_for(stream.next_to_write(), 1)
    second = await asyncio.wait_for(stream.next_to_write(), 1)
    assert (first.WhichOneof("message"), second.WhichOneof("message")) == ("output_batch", "deltas")
    assert second.deltas.deltas[0].text == "text"
