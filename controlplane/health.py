"""The replica's gRPC health, kept true: NOT_SERVING while PostgreSQL cannot be reached, SERVING again
once it can.

Every call but the agents' stream reads or writes PostgreSQL, so a replica whose database is away
cannot serve and must not say it does (a load balancer or an orchestrator would keep sending it
callers who get only UNAVAILABLE). `HealthMonitor` probes with a cheap `SELECT 1` every
`--health-probe-interval`, each probe bounded by `--health-probe-timeout`, and sets every service
and the overall "" status from the answer. It probes on a connection of its own, not the pool's:
a pool busy with long calls is load, not an outage, and must not take the replica out of service.
Each change is logged once (`database_unreachable` at warning, `database_reachable` at info), not
every probe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta

import asyncpg
import structlog
from grpc_health.v1 import health, health_pb2

from controlplane import database

log = structlog.get_logger(__name__)

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class HealthMonitor:
    """Sets `services` (and "") SERVING or NOT_SERVING on `servicer` from probes of the database."""

    def __init__(
        self,
        dsn: str,
        servicer: health.aio.HealthServicer,
        services: Sequence[str],
        *,
        interval: timedelta,
        timeout: timedelta,
    ) -> None:
        self._dsn = dsn
        self._servicer = servicer
        self._services = ("", *services)
        self._interval = interval.total_seconds()
        self._timeout = timeout.total_seconds()
        self._conn: asyncpg.Connection | None = None
        self.serving: bool | None = None  # None until the first probe has answered

    async def run(self) -> None:
        """Probe until cancelled."""
        try:
            while True:
                await self.check()
                await asyncio.sleep(self._interval)
        finally:
            self._drop()

    async def check(self) -> bool:
        """One probe, and the statuses set from it; whether the database answered."""
        reachable, why = await self._probe()
        if reachable != self.serving:
            if reachable:
                log.info("database_reachable", serving=True)
            else:
                log.warning("database_unreachable", serving=False, error=why)
            self.serving = reachable
            for name in self._services:
                await self._servicer.set(name, SERVING if reachable else NOT_SERVING)
        return reachable

    async def _probe(self) -> tuple[bool, str]:
        try:
            async with asyncio.timeout(self._timeout):
                if self._conn is None or self._conn.is_closed():
                    self._conn = await asyncpg.connect(self._dsn, command_timeout=self._timeout)
                await self._conn.fetchval("SELECT 1")
        except (*database.FAULTS, asyncpg.PostgresError) as error:
            self._drop()
            # The exception's class only: its text names the database's address, and the DSN its password.
            return False, type(error).__name__
        return True, ""

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()  # never waits on a connection that may be what failed
