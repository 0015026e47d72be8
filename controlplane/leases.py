"""Agents' leases as the replica holding their streams keeps them: heartbeats first.

A lease must lapse because its agent stopped heartbeating, never because this
process was busy. So:
- renewals go over a PostgreSQL connection of their own, never through the pool
  that client calls, watchers and the sweep share, and each is dated from when
  its heartbeat was heard, not from when the renewal got through;
- while an agent's stream is live here, this replica holds a lock for the
  stream's lease generation on that connection (`store.agents.hold_lease`). The
  sweep of every replica counts a held lease as live whatever its expiry says,
  so a renewal that comes late cannot let a lease lapse under a stream that
  still delivers heartbeats. The lock goes with the connection: a replica that
  dies or loses the database lets go of everything it held (PostgreSQL notices
  a vanished peer within its TCP keepalives, set short here).
The relay lets go of a hold when its stream ends or stays silent for a lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

import asyncpg
import structlog

from controlplane import store
from controlplane.agents import Lease

log = structlog.get_logger(__name__)

T = TypeVar("T")

CONNECT_TIMEOUT_S = 5.0
STATEMENT_TIMEOUT_S = 5.0
# PostgreSQL drops (and unlocks) the connection of a replica that vanished after about 10 + 3 * 5 s.
_SERVER_SETTINGS = {
    "application_name": "astrabox-leases",
    "tcp_keepalives_idle": "10",
    "tcp_keepalives_interval": "5",
    "tcp_keepalives_count": "3",
}


class LeaseStoreUnavailable(ConnectionError):
    """The lease connection failed; the next use opens another and takes this replica's holds again."""


class LeaseKeeper:
    """This replica's hold on the leases of the agent streams it serves, over one connection of its own."""

    def __init__(self, dsn: str, ttl: timedelta) -> None:
        self._dsn = dsn
        self.ttl = ttl
        self._conn: asyncpg.Connection | None = None
        # One statement at a time on the connection; each is short.
        self._lock = asyncio.Lock()
        self._held: set[tuple[str, int]] = set()

    @contextlib.asynccontextmanager
    async def hold(self, agent_id: str, generation: int) -> AsyncIterator[None]:
        """Show the lease held by a live stream for as long as the context lasts. A database that
        cannot be reached does not stop the stream: the hold is taken when the connection is back."""
        try:
            if not await self._use(lambda conn: store.agents.hold_lease(conn, agent_id, generation)):
                log.warning("lease_hold_taken_elsewhere", agent_id=agent_id, generation=generation)
        except LeaseStoreUnavailable as error:
            log.warning("lease_hold_deferred", agent_id=agent_id, generation=generation, error=str(error))
        # Once taken (no await in between): a connection opened from now on takes it again.
        self._held.add((agent_id, generation))
        try:
            yield
        finally:
            self._held.discard((agent_id, generation))
            with contextlib.suppress(LeaseStoreUnavailable):  # a connection that failed holds nothing now
                await self._use(lambda conn: store.agents.release_lease(conn, agent_id, generation))

    async def renew(self, agent_id: str, generation: int, heard_at: float) -> Lease | None:
        """Extend the lease to one ttl after `heard_at` (time.monotonic() when its heartbeat was read);
        None when a newer stream of the agent superseded it. LeaseStoreUnavailable when the database
        cannot be reached."""

        async def renewal(conn: asyncpg.Connection) -> asyncpg.Record | None:
            heard_ago = timedelta(seconds=max(0.0, time.monotonic() - heard_at))
            return await store.agents.renew(conn, agent_id, generation, self.ttl, heard_ago)

        row = await self._use(renewal)
        return Lease(row["generation"], row["lease_expires_at"]) if row else None

    async def close(self) -> None:
        async with self._lock:
            await self._drop()

    async def _use(self, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        async with self._lock:
            try:
                return await work(await self._connection())
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as error:
                await self._drop()
                raise LeaseStoreUnavailable(f"the lease connection failed: {type(error).__name__}") from error

    async def _connection(self) -> asyncpg.Connection:
        if self._conn is not None and not self._conn.is_closed():
            return self._conn
        conn = await asyncpg.connect(
            self._dsn, timeout=CONNECT_TIMEOUT_S, command_timeout=STATEMENT_TIMEOUT_S, server_settings=_SERVER_SETTINGS
        )
        self._conn = conn
        for agent_id, generation in sorted(self._held):
            await store.agents.hold_lease(conn, agent_id, generation)
        if self._held:
            log.info("lease_holds_taken_again", leases=len(self._held))
        return conn

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()  # never waits on a connection that may be what failed
