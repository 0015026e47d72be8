"""The live tail: wakes watchers when a session's journal grows.

It carries only "session S now ends at seq N"; watchers read the events
themselves from PostgreSQL, so a missed or merged wake-up can delay a watcher
but never make it skip or repeat an event. Wake-ups come from this process's
own commits and, through LISTEN/NOTIFY, from every other replica's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Iterator

import asyncpg
import structlog

from controlplane import database
from serverkit.waits import bounded

log = structlog.get_logger(__name__)


class Subscription:
    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()

    async def wait(self, timeout: float) -> None:
        """Return when the journal may have grown, or after `timeout` seconds."""
        # Not wait_for: on Python 3.11 a watcher cancelled just as the event is set would get the
        # wake-up instead of its cancellation, and go on watching for a client that has gone.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._event.wait()
        self._event.clear()


class LiveTail:
    def __init__(self) -> None:
        self._subscribers: dict[str, set[Subscription]] = defaultdict(set)

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

    def publish(self, key: str, position: int) -> None:
        for subscription in self._subscribers.get(key, ()):
            subscription.notify()

    def publish_all(self) -> None:
        """Wake every watcher: after a gap in the NOTIFYs, any journal may have grown."""
        for subscriptions in self._subscribers.values():
            for subscription in subscriptions:
                subscription.notify()

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

        def on_notify(_c: object, _pid: int, _channel: str, payload: str) -> None:
            key, _, position = payload.rpartition("|")
            self.publish(key, int(position or 0))

        try:
            await conn.add_listener(channel, on_notify)
            self.publish_all()  # what was committed while nobody listened
            await lost.wait()
            log.warning("live_tail_connection_lost")
        finally:
            with contextlib.suppress(Exception):
                await bounded(conn.close(), 5)
