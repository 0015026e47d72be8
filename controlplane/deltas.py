"""Deltas: pieces of engine messages being written, from an agent's stream to this replica's watchers.

A delta is live only. It never takes a seq, is never journaled and never
listed; the complete message follows as an ordinary journaled event. The
agent's stream hands each delta to the watchers of its session that asked
for deltas on this replica (same-replica only for now: a watcher attached to
another replica than the session's agent gets events only, exactly as
before).

Each watcher has its own bounded queue (`DeltaQueue`): a new piece of the
block at the queue's tail merges into it, so a slow watcher gets fewer,
larger deltas and its memory stays within MAX_ENTRIES and MAX_BYTES; a piece
that does not fit is dropped together with the rest of its block (the watcher
gets the whole text in the complete message).

Ordering (`DeltaOrder`): each delta names the session's last output_seq
before it was written. It is sent only once the watcher has been sent that
output's event (held until then), and dropped if the watcher has already been
sent a later event of the same message: no delta ever arrives after the
message it belongs to, nor before the events that precede it.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane.journal import EventKind, StoredEvent

MAX_ENTRIES = 256
MAX_BYTES = 64 * 1024
# Messages whose completion a watcher remembers (older ones have no deltas coming).
_REMEMBERED_MESSAGES = 1024

KINDS = {
    runner_pb2.DELTA_KIND_TEXT: "text",
    runner_pb2.DELTA_KIND_TOOL_INPUT: "tool_input",
    runner_pb2.DELTA_KIND_THINKING: "thinking",
}


@dataclass(slots=True)
class LiveDelta:
    """A piece of one content block of a message being written; `kind` is a value of KINDS."""

    agent_id: str
    turn_id: str
    message_id: str
    index: int
    kind: str
    text: str
    after_output_seq: int

    def same_block(self, other: LiveDelta) -> bool:
        return (self.agent_id, self.message_id, self.index, self.kind) == (
            other.agent_id,
            other.message_id,
            other.index,
            other.kind,
        )


@dataclass(eq=False)
class DeltaQueue:
    """One watcher's deltas not yet sent: bounded, merged at the tail."""

    wake: Callable[[], None]
    max_entries: int = MAX_ENTRIES
    max_bytes: int = MAX_BYTES
    entries: collections.deque[LiveDelta] = field(default_factory=collections.deque)
    bytes: int = 0
    # The most the queue ever held (for tests and diagnostics).
    peak_entries: int = 0
    peak_bytes: int = 0
    merged: int = 0
    dropped: int = 0
    # Blocks cut short by a full queue: their later pieces are dropped too (no gap in the middle).
    _cut: set[tuple[str, str, int, str]] = field(default_factory=set)

    def put(self, delta: LiveDelta) -> None:
        block = (delta.agent_id, delta.message_id, delta.index, delta.kind)
        size = len(delta.text.encode())
        if block in self._cut or self.bytes + size > self.max_bytes:
            self._cut.add(block)
            self.dropped += 1
            return
        tail = self.entries[-1] if self.entries else None
        if tail is not None and tail.same_block(delta):
            tail.text += delta.text
            tail.after_output_seq = max(tail.after_output_seq, delta.after_output_seq)
            self.merged += 1
        elif len(self.entries) >= self.max_entries:
            self._cut.add(block)
            self.dropped += 1
            return
        else:
            self.entries.append(delta)
        self.bytes += size
        self.peak_entries = max(self.peak_entries, len(self.entries))
        self.peak_bytes = max(self.peak_bytes, self.bytes)
        self.wake()

    def peek(self) -> LiveDelta | None:
        return self.entries[0] if self.entries else None

    def pop(self) -> LiveDelta:
        delta = self.entries.popleft()
        self.bytes -= len(delta.text.encode())
        return delta


class DeltaHub:
    """This replica's watchers that want deltas, by session."""

    def __init__(self) -> None:
        self._queues: dict[str, set[DeltaQueue]] = collections.defaultdict(set)

    @contextlib.contextmanager
    def follow(self, session_id: str, wake: Callable[[], None]) -> Iterator[DeltaQueue]:
        queue = DeltaQueue(wake)
        self._queues[session_id].add(queue)
        try:
            yield queue
        finally:
            self._queues[session_id].discard(queue)
            if not self._queues[session_id]:
                del self._queues[session_id]

    def queues(self, session_id: str) -> list[DeltaQueue]:
        """The queues of the session's watchers here (what tests and diagnostics look at)."""
        return list(self._queues.get(session_id, ()))

    def publish(self, agent_id: str, batch: runner_pb2.DeltaBatch) -> None:
        """Hand an agent's deltas to the watchers of their sessions; never blocks."""
        for delta in batch.deltas:
            queues = self._queues.get(delta.session_id)
            kind = KINDS.get(delta.kind)
            if not queues or kind is None:
                continue
            for queue in queues:
                queue.put(
                    LiveDelta(
                        agent_id,
                        delta.turn_id,
                        delta.message_id,
                        delta.index,
                        kind,
                        delta.text,
                        delta.after_output_seq,
                    )
                )


class DeltaOrder:
    """What one watcher has been sent, deciding for each queued delta: send, hold or drop."""

    def __init__(self, agent_id: str, sent_output_seq: int) -> None:
        # Only the session's own agent speaks for it: another agent's deltas are dropped.
        self.agent_id = agent_id
        self.sent_output_seq = sent_output_seq
        # message_id -> the output_seq of the newest event of that message sent.
        self._sent_messages: collections.OrderedDict[str, int] = collections.OrderedDict()

    def sent(self, event: StoredEvent) -> None:
        """The watcher was sent `event`."""
        output_seq = event.output_seq
        if output_seq is None:
            return
        self.sent_output_seq = max(self.sent_output_seq, output_seq)
        if event.kind is not EventKind.ENGINE_MESSAGE:
            return
        message_id = event.message_id
        if message_id:
            self._sent_messages[message_id] = output_seq
            self._sent_messages.move_to_end(message_id)
            while len(self._sent_messages) > _REMEMBERED_MESSAGES:
                self._sent_messages.popitem(last=False)

    def ready(self, queue: DeltaQueue) -> Iterator[LiveDelta]:
        """The queued deltas that may be sent now, in order; stale ones are dropped, later ones held."""
        while (delta := queue.peek()) is not None:
            if delta.agent_id != self.agent_id or self._sent_messages.get(delta.message_id, 0) > delta.after_output_seq:
                queue.pop()
                continue
            if delta.after_output_seq > self.sent_output_seq:
                return  # its preceding events are not sent yet
            yield queue.pop()
