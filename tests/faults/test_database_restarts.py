"""PostgreSQL restarted (fast and immediate, as a crash) under what the control plane runs.

The live tail listens again after each restart, and wakes its watchers then. PostgreSQL is the test's
own (`RestartablePostgres`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest_asyncio

from controlplane.journal import NOTIFY_CHANNEL
from controlplane.live import LiveTail
from tests.support.restartable_postgres import RestartablePostgres

RESTARTS = ("fast", "immediate", "fast")


@pytest_asyncio.fixture
async def postgres() -> AsyncIterator[RestartablePostgres]:
    cluster = RestartablePostgres()
    try:
        await cluster.start()
        yield cluster
    finally:
        await cluster.close()


async def test_the_live_tail_listens_again_after_each_restart_and_wakes_its_watchers(
    postgres: RestartablePostgres,
) -> None:
    live = LiveTail()
    follower = asyncio.create_task(live.follow_postgres(postgres.dsn, NOTIFY_CHANNEL))
    try:
        with live.subscribe("session-1") as subscription:
            await asyncio.wait_for(subscription.wait(60), 30)  # listening
            for mode in RESTARTS:
                await postgres.restart(mode)
                # Listening again, it wakes every watcher: any journal may have grown meanwhile.
                await asyncio.wait_for(subscription.wait(60), 30)
            conn = await asyncpg.connect(postgres.dsn)
            try:
                await conn.execute("SELECT pg_notify($1, 'session-1|7')", NOTIFY_CHANNEL)
            finally:
                await conn.close()
            await asyncio.wait_for(subscription.wait(60), 30)  # another replica's commit
        assert not follower.done()
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)
