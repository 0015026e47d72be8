"""Deltas (text as the engine writes it) on their way to the control plane: live, never durable.

Unlike outputs, a delta is not stored, acknowledged or resent: it goes out on
the Connect stream when one is open and is dropped when none is (a watcher
that resumes reads the complete messages from the journal). It never delays
an output: the stream's writer takes deltas only when no output, ack or reply
is waiting. While the writer is busy, deltas wait in a bounded buffer where a
new piece of a block that already has one waiting is merged into it, so a
congested stream carries fewer, larger deltas; a piece that neither fits nor
merges is dropped (its complete message still follows as an output).
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from astrabox.runner.v1 import runner_service_pb2 as pb

log = structlog.get_logger(__name__)

MAX_ENTRIES = 256
MAX_BYTES = 256 * 1024
# Bytes of deltas per DeltaBatch.
MAX_BATCH_BYTES = 64 * 1024

_Block = tuple[str, str, int, int]


def _block(delta: pb.Delta) -> _Block:
    return (delta.session_id, delta.message_id, delta.index, delta.kind)


class LiveDeltas:
    """The agent's delta buffer between the engines and the stream's writer."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        # In arrival order; each block appears at most once (later pieces merge into its entry).
        self._waiting: dict[_Block, pb.Delta] = {}
        self._bytes = 0
        self._ready: Callable[[], None] | None = None
        self.dropped = 0

    def open(self, ready: Callable[[], None]) -> None:
        """A stream is open: call `ready` whenever deltas wait to be written."""
        self._ready = ready

    def close(self) -> None:
        """The stream is gone: what waits is dropped, and so is what comes until the next `open`."""
        self._ready = None
        self._waiting.clear()
        self._bytes = 0

    def publish(self, delta: pb.Delta) -> None:
        """Queue `delta` for the stream, merged into a waiting piece of its block; never blocks."""
        if self._ready is None:
            return
        size = len(delta.text.encode())
        if self._bytes + size > self._max_bytes:
            self.dropped += 1
            return
        key = _block(delta)
        waiting = self._waiting.get(key)
        if waiting is not None:
            waiting.text += delta.text
            waiting.after_output_seq = max(waiting.after_output_seq, delta.after_output_seq)
        elif len(self._waiting) >= self._max_entries:
            self.dropped += 1
            return
        else:
            self._waiting[key] = delta
        self._bytes += size
        self._ready()

    def take(self) -> pb.DeltaBatch | None:
        """The oldest waiting deltas, up to a batch's bytes; None when none waits."""
        if not self._waiting:
            return None
        batch = pb.DeltaBatch()
        size = 0
        for key in list(self._waiting):
            delta = self._waiting[key]
            n = len(delta.text.encode())
            if batch.deltas and size + n > MAX_BATCH_BYTES:
                break
            del self._waiting[key]
            batch.deltas.append(delta)
            size += n
        self._bytes -= size
        return batch

    @property
    def waiting(self) -> int:
        return len(self._waiting)
