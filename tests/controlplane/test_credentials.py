"""The verified-key cache, and a database that cannot be reached while a key is checked.

The pool here is the real one with one fault injected: `fetchrow` fails as a refused connection
does, for as long as the test says (stopping the shared PostgreSQL would take every other test's
database with it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from controlplane.database import create_pool, migrate
from controlplane.errors import CredentialsUnverifiable, Unauthenticated
from controlplane.identity import keys, store
from controlplane.identity.authenticator import Credentials
from controlplane.identity.callers import Role


class FlakyPool:
    """A pool whose reads fail with `fault` while `down`."""

    def __init__(self, pool: asyncpg.Pool, fault: Exception) -> None:
        self._pool = pool
        self._fault = fault
        self.down = False
        self.reads = 0

    async def fetchrow(self, *args: Any) -> Any:
        self.reads += 1
        if self.down:
            raise self._fault
        return await self._pool.fetchrow(*args)

    async def execute(self, *args: Any) -> Any:
        return await self._pool.execute(*args)


@pytest_asyncio.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(database_url, min_size=1, max_size=2)
    await migrate(pool)
    try:
        yield pool
    finally:
        await pool.close()


async def a_key(pool: asyncpg.Pool, role: Role = Role.VIEWER) -> keys.NewKey:
    new = keys.new_key()
    async with pool.acquire() as conn:
        project = await store.operator_project(conn)
    await store.insert_key(
        pool,
        key_id=new.key_id,
        project_id=project.project_id,
        name="t",
        role=role,
        secret_sha256=new.secret_sha256,
        created_by="test",
        expires_at=None,
    )
    return new


@pytest.mark.parametrize(
    "fault",
    [
        ConnectionRefusedError(111, "Connection refused"),
        TimeoutError(),
        asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
        # What a pooled connection whose server went away mid-statement raises.
        asyncpg.exceptions.InternalClientError("cannot switch to state 12; another operation (2) is in progress"),
    ],
    ids=lambda fault: type(fault).__name__,
)
async def test_a_database_that_cannot_be_reached_is_unavailable_and_never_remembered(pool, fault) -> None:
    key = await a_key(pool)
    flaky = FlakyPool(pool, fault)
    now = [0.0]
    credentials = Credentials(flaky, ttl=2.0, clock=lambda: now[0])  # type: ignore[arg-type]
    flaky.down = True
    with pytest.raises(CredentialsUnverifiable):
        await credentials.verify(key.secret)
    flaky.down = False  # back: the next call checks again rather than answering from a cached failure
    assert (await credentials.verify(key.secret)).key_id == key.key_id
    # Verified: trusted for the ttl without a query, even through an outage ...
    flaky.down, reads = True, flaky.reads
    now[0] += 1.9
    assert (await credentials.verify(key.secret)).role is Role.VIEWER and flaky.reads == reads
    # ... and checked again once it has passed.
    now[0] += 0.2
    with pytest.raises(CredentialsUnverifiable):
        await credentials.verify(key.secret)


async def test_a_revoked_key_is_refused_once_the_cached_verdict_is_older_than_the_ttl(pool) -> None:
    key = await a_key(pool)
    now = [0.0]
    credentials = Credentials(pool, ttl=2.0, clock=lambda: now[0])
    await credentials.verify(key.secret)
    await store.revoke_key(pool, key.key_id, None)
    now[0] += 1.0
    assert (await credentials.verify(key.secret)).key_id == key.key_id  # within the ttl: still trusted
    now[0] += 1.0
    with pytest.raises(Unauthenticated) as refused:
        await credentials.verify(key.secret)
    assert refused.value.reason == "CREDENTIALS_REVOKED"
    # A wrong secret for a real key id is refused like an unknown key, and cached as a refusal.
    forged = f"abx_{key.key_id}_{'A' * 43}"
    with pytest.raises(Unauthenticated) as unknown:
        await credentials.verify(forged)
    assert unknown.value.reason == "CREDENTIALS_INVALID" and key.key_id not in unknown.value.message
