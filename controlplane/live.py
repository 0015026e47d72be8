"""The live tail: wakes watchers when a session's journal grows, and hands them what this replica committed.

A wake-up says "session S now ends at seq N". When this replica committed those events, it also
hands them over as committed (`publish` with `events`), and a watcher that had everything before
them takes them from memory (`Subscription.take`); anything else (a gap, events of another
replica's commit, whose NOTIFY brings only the position, a buffer past its bound, a wake-up with
nothing known) sends it to PostgreSQL, which stays the truth: events are handed over only after
their commit, so what a subscription holds can be missing things but never be wrong, and a watcher
never skips or repeats an event. Wake-ups come from this process's own commits and, through
LISTEN/NOTIFY, from every other replica's.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import NamedTuple, Protocol

import asyncpg
import structlog

from controlplane import database
from serverkit.waits import bounded

log = structlog.get_logger(__name__)


class Numbered(Protocol):
    """What a subscription holds: one committed event, by its place in the journal."""

    @property
    def seq(self) -> int: ...


class Pushed(NamedTuple):
    """A committed event handed to this replica's watchers, with its size (what the bound counts)."""

    event: Numbered
    size: int


# What one subscription holds of events handed over and not yet taken; past either bound it drops
# them all and its watcher reads PostgreSQL instead (a watcher that far behind reads pages anyway).
HELD_EVENTS = 1024
HELD_BYTES = 8 * 1024 * 1024


class Subscription:
    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._held: dict[int, Pushed] = {}
        self._held_bytes = 0
        # The highest position announced (handed over or NOTIFYed).
        self._known = 0
        # Whether the journal may hold events this subscription cannot account for (from the start,
        # after a lost NOTIFY connection, a dropped buffer or a wait without wake-up).
        self._stale = True

    def notify(self) -> None:
        """Wake the watcher without news of the journal (live deltas for it)."""
        self._event.set()

    def grew(self, position: int, events: Sequence[Pushed] = ()) -> None:
        """The journal now ends at `position` at least; `events` are committed events of it."""
        if position <= 0:
            self._stale = True  # a wake-up that says nothing of where the journal ends
        elif position <= self._known and not events:
            return  # news already had: the watcher was woken for it
        self._known = max(self._known, position)
        for pushed in events:
            if pushed.event.seq not in self._held:
                self._held[pushed.event.seq] = pushed
                self._held_bytes += pushed.size
        if len(self._held) > HELD_EVENTS or self._held_bytes > HELD_BYTES:
            self._drop()
        self._event.set()

    def invalidate(self) -> None:
        """Anything may have been committed: the watcher reads PostgreSQL next."""
        self._drop()
        self._event.set()

    def take(self, cursor: int) -> list[Numbered] | None:
        """The events after `cursor` (the last seq the watcher has), in order, when this subscription
        holds every one of them known to be committed ([] when none is known); None when the watcher
        must read them from PostgreSQL instead."""
        for seq in [seq for seq in self._held if seq <= cursor]:
            self._forget(seq)
        if self._stale:  # the watcher reads the journal now, from `cursor`: what is held is of no use
            self._drop()
            self._stale = False
            return None
        taken: list[Numbered] = []
        while (pushed := self._held.get(cursor + 1)) is not None:
            taken.append(pushed.event)
            cursor += 1
            self._forget(cursor)
        return taken if cursor >= self._known else None

    def _forget(self, seq: int) -> None:
        self._held_bytes -= self._held.pop(seq).size

    def _drop(self) -> None:
        self._held.clear()
        self._held_bytes = 0
        self._stale = True

    async def wait(self, timeout: float) -> None:
        """Return when the journal may have grown, or after `timeout` seconds (then the watcher
        reads PostgreSQL: a NOTIFY may have been missed)."""
        # Not wait_for: on Python 3.11 a watcher cancelled just as the event is set would get the
        # wake-up instead of its cancellation, and go on watching for a client that has gone.
        try:
            async with asyncio.timeout(timeout):
                await self._event.wait()
        except TimeoutError:
            self._stale = True
        self._event.clear()


def notice(key: str, position: int) -> str:
    """The NOTIFY payload saying that `key` now ends at `position`."""
    return f"{key}|{position}"


class LiveTail:
    def __init__(self) -> None:
        self._subscribers: dict[str, set[Subscription]] = defaultdict(set)
        # The NOTIFYs of this replica's commits in flight. One may come back through LISTEN before its
        # commit's own hand-over (they travel on different connections): it is ignored, the
        # hand-over that follows says more (the events).
        self._own: collections.Counter[str] = collections.Counter()
        # Keys this replica is committing to in a statement whose positions it learns only from its
        # reply (`publishing`), and the furthest position NOTIFYed for each meanwhile.
        self._publishing: collections.Counter[str] = collections.Counter()
        self._held_back: dict[str, int] = {}

    def expect(self, notices: Sequence[str]) -> None:
        """`notices` are about to be committed by this replica, which publishes them itself."""
        self._own.update(notices)

    def expected(self, notices: Sequence[str]) -> None:
        """`notices`' commit is over: published, or failed (then one that still comes, from a commit
        whose outcome was lost with its connection, wakes the watchers as another replica's would)."""
        for payload in notices:
            if (left := self._own[payload] - 1) > 0:
                self._own[payload] = left
            else:
                self._own.pop(payload, None)

    @contextlib.contextmanager
    def publishing(self, keys: Sequence[str]) -> Iterator[None]:
        """This replica commits to `keys` in a statement that NOTIFYs itself and publishes what it
        committed once its reply comes. Those NOTIFYs can overtake the reply (they travel on another
        connection): any NOTIFY for `keys` arriving meanwhile is held back until the block ends, then
        wakes the watchers only if it says more than was published."""
        self._publishing.update(keys)
        try:
            yield
        finally:
            for key in keys:
                if (left := self._publishing[key] - 1) > 0:
                    self._publishing[key] = left
                    continue
                del self._publishing[key]
                if (position := self._held_back.pop(key, None)) is not None:
                    self.publish(key, position)

    @contextlib.contextmanager
    def subscribe(self, key: str) -> Iterator[Subscription]:
        """Follow `key`: a session id, or `agent:<id>` for an agent's commands."""
        subscription = Subscription()
        self._subscribers[key].add(subscription)
        try:
            yield subscription
        finally:
            self._subscribers[key].discard(subscription)
            if not self._subscribers[key]:
                del self._subscribers[key]

    def watched(self, key: str) -> bool:
        """Whether anyone on this replica follows `key` (whether committed events are worth handing over)."""
        return key in self._subscribers

    def publish(self, key: str, position: int, events: Sequence[Pushed] = ()) -> None:
        """`key` now ends at `position`; `events`: committed events of it, for the watchers to take."""
        for subscription in self._subscribers.get(key, ()):
            subscription.grew(position, events)

    def publish_all(self) -> None:
        """Wake every watcher: after a gap in the NOTIFYs, any journal may have grown."""
        for subscriptions in self._subscribers.values():
            for subscription in subscriptions:
                subscription.invalidate()

    def heard(self, payload: str) -> None:
        """A NOTIFY: wake the watchers of its key, unless it is this replica's own (`expect`) or waits
        for this replica's statement in flight (`publishing`)."""
        if self._own[payload] > 0:
            return
        key, _, position = payload.rpartition("|")
        if key in self._publishing:
            self._held_back[key] = max(self._held_back.get(key, 0), int(position or 0))
            return
        self.publish(key, int(position or 0))

    async def follow_postgres(self, dsn: str, channel: str) -> None:
        """Relay NOTIFYs from other replicas until cancelled; reconnects while the database is away."""
        while True:
            try:
                await self._listen(dsn, channel)
            except database.FAULTS as error:
                log.warning("live_tail_connection_failed", error=type(error).__name__, detail=str(error)[:300])
                await asyncio.sleep(1)

    async def _listen(self, dsn: str, channel: str) -> None:
        """Relay NOTIFYs for as long as one connection lasts."""
        conn = await asyncpg.connect(dsn, timeout=10)
        lost = asyncio.Event()
        conn.add_termination_listener(lambda _c, lost=lost: lost.set())

        try:
            await conn.add_listener(channel, lambda _c, _pid, _channel, payload: self.heard(payload))
            self.publish_all()  # what was committed while nobody listened
            await lost.wait()
            log.warning("live_tail_connection_lost")
        finally:
            with contextlib.suppress(Exception):
                await bounded(conn.close(), 5)
