"""A pooled connection whose server can no longer write (a primary demoted by a failover, or made
read-only) is dropped when it goes back to the pool, and what it refused is UNAVAILABLE, not a bug:
the next connection, made with the URL's `target_session_attrs=read-write`, reaches a primary.

The demotion is played by `SET default_transaction_read_only = on`, which PostgreSQL reports to the
client as it reports `in_hot_standby` on a standby (a real failover: tests/faults/test_postgres_failover.py).
"""

from __future__ import annotations

import asyncpg
import pytest

from controlplane import errors, status
from controlplane.database import ServerNotWritable, create_pool


async def test_a_connection_to_a_server_that_cannot_write_is_dropped_and_the_write_is_unavailable(
    database_url: str,
) -> None:
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        await pool.execute("CREATE TABLE notes (text text)")
        refused: BaseException | None = None
        with pytest.raises(ServerNotWritable):
            async with pool.acquire() as conn:
                first_pid = conn.get_server_pid()
                await conn.execute("SET default_transaction_read_only = on")
                try:
                    await conn.execute("INSERT INTO notes VALUES ('lost?')")
                except asyncpg.PostgresError as error:
                    refused = error
        # The refused write is one the database could not serve now: UNAVAILABLE, retried by callers.
        assert isinstance(refused, asyncpg.exceptions.ReadOnlySQLTransactionError)
        assert isinstance(status.refusal(refused), errors.DatabaseUnavailable)
        assert isinstance(status.refusal(ServerNotWritable("demoted")), errors.DatabaseUnavailable)
        # The next connection is a new one, and it writes.
        async with pool.acquire() as conn:
            assert conn.get_server_pid() != first_pid
            await conn.execute("INSERT INTO notes VALUES ('kept')")
        assert await pool.fetchval("SELECT array_agg(text) FROM notes") == ["kept"]
    finally:
        await pool.close()
