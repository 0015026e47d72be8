"""Outputs the outbox has just committed and no stream has taken yet, held in memory.

The relay's next batch is usually exactly what the last commit stored: reading it back from
SQLite costs a thread hop, a read transaction and a parse per output. So the outbox hands each
committed output (the very `pb.Output` it stored) here, and `take` serves a stream from memory
when memory holds every stored output the stream has yet to send; otherwise the outbox reads
SQLite, as it always could.

What makes "every" checkable is one number per session, its floor: SQLite may hold outputs of
the session at or below the floor that memory does not. Memory always holds, gap-free, every
committed output of a session above its floor (outputs arrive in commit order, which is
output_seq order), so a stream whose cursor is at or above the floor of every session it sends
is served from memory. Whatever leaves memory other than by acknowledgement raises its
session's floor: an output taken by a stream (a resend after a refusal or a reconnect starts
below it, so it comes from SQLite), one evicted to stay within the bound, one already sent.
Outputs stored before this process started count as below the floor (`load_floors`); an
acknowledgement through the floor clears it, since SQLite no longer holds anything below.

Bounded by count and bytes: under a backlog (no stream, a slow control plane) the oldest are
evicted and are read from SQLite when their turn comes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from astrabox.runner.v1 import runner_service_pb2 as pb

# The default bound: a few seconds of a busy agent's outputs, a small fraction of its memory.
MAX_OUTPUTS = 4096
MAX_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class _Held:
    output: pb.Output
    size: int


class CommittedOutputs:
    """Committed outputs not yet taken by a stream, in commit order, within a bound."""

    def __init__(self, max_outputs: int = MAX_OUTPUTS, max_bytes: int = MAX_BYTES) -> None:
        self._max_outputs = max_outputs
        self._max_bytes = max_bytes
        self._held: deque[_Held] = deque()
        # The output_seqs held per session, lowest first (each session's part of `_held`, in order).
        self._seqs: dict[str, deque[int]] = {}
        self._bytes = 0
        self._floors: dict[str, int] = {}
        self._floors_loaded = False

    def __len__(self) -> int:
        return len(self._held)

    @property
    def bytes(self) -> int:
        """The serialized size of the outputs held."""
        return self._bytes

    @property
    def floors_loaded(self) -> bool:
        """Whether the floors of the outputs stored before this process started are known."""
        return self._floors_loaded

    def load_floors(self, stored: Mapping[str, int]) -> None:
        """The newest output_seq per session SQLite held when read (at any time after this object
        was made): every output up to it counts as possibly not in memory."""
        for session_id, seq in stored.items():
            self._raise_floor(session_id, seq)
        self._floors_loaded = True

    def committed(self, output: pb.Output, size: int) -> None:
        """`output` (`size` bytes serialized) is durable: hold it, evicting the oldest over the bound."""
        self._held.append(_Held(output, size))
        self._seqs.setdefault(output.session_id, deque()).append(output.output_seq)
        self._bytes += size
        while len(self._held) > self._max_outputs or (self._bytes > self._max_bytes and len(self._held) > 1):
            self._drop(self._held.popleft())

    def acknowledged(self, session_id: str, through_seq: int) -> None:
        """SQLite no longer holds the session's outputs through `through_seq`: nor does memory."""
        if self._floors.get(session_id, 0) <= through_seq:
            self._floors.pop(session_id, None)
        seqs = self._seqs.get(session_id)
        if seqs and seqs[0] <= through_seq:  # rare: a stream takes what it sends before it is acknowledged
            kept = [h for h in self._held if h.output.session_id != session_id or h.output.output_seq > through_seq]
            self._held = deque(kept)
            self._bytes = sum(h.size for h in kept)
            while seqs and seqs[0] <= through_seq:
                seqs.popleft()
            if not seqs:
                del self._seqs[session_id]

    def serves(self, after: Mapping[str, int], skip: Collection[str] = ()) -> bool:
        """Whether memory holds every stored output above `after[session]` (0 for a session not
        named) of every session not in `skip`."""
        if not self._floors_loaded:
            return False
        return all(after.get(sid, 0) >= floor for sid, floor in self._floors.items() if sid not in skip)

    def take(
        self, after: Mapping[str, int], limit: int, skip: Collection[str] = (), max_bytes: int | None = None
    ) -> list[pb.Output]:
        """What `Outbox.pending` would read, from memory (only where `serves`), and forget it."""
        taken: list[pb.Output] = []
        skipped: list[_Held] = []
        total = 0
        while self._held and len(taken) < limit:
            held = self._held[0]
            session_id = held.output.session_id
            if session_id in skip:
                skipped.append(self._held.popleft())
                continue
            if held.output.output_seq > after.get(session_id, 0):
                if taken and max_bytes is not None and total + held.size > max_bytes:
                    break
                taken.append(held.output)
                total += held.size
            self._drop(self._held.popleft())  # taken, or sent already
        self._held.extendleft(reversed(skipped))
        return taken

    def _drop(self, held: _Held) -> None:
        """`held`, just taken off the front of `_held`, leaves memory."""
        self._bytes -= held.size
        seqs = self._seqs[held.output.session_id]
        seqs.popleft()
        if not seqs:
            del self._seqs[held.output.session_id]
        self._raise_floor(held.output.session_id, held.output.output_seq)

    def _raise_floor(self, session_id: str, seq: int) -> None:
        if seq > self._floors.get(session_id, 0):
            self._floors[session_id] = seq
