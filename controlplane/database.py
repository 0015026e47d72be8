"""The PostgreSQL connection pool and the versioned schema migrations."""

from __future__ import annotations

import json
from importlib import resources

import asyncpg
import structlog

log = structlog.get_logger(__name__)

# Serialises concurrent migrators (several replicas starting at once).
_MIGRATION_LOCK_KEY = 0x41535452  # "ASTR"


async def _init_connection(conn: asyncpg.Connection) -> None:
    # Binary jsonb codec: the format byte 1 followed by the JSON text. Binary
    # is what copy_records_to_table needs, and it is as fast as text.
    await conn.set_type_codec(
        "jsonb",
        encoder=lambda value: b"\x01" + json.dumps(value, separators=(",", ":")).encode(),
        decoder=lambda data: json.loads(data[1:]),
        schema="pg_catalog",
        format="binary",
    )


# What asyncpg and the network raise when the database cannot serve a statement right now: the
# statement may succeed once it is back, so callers are told UNAVAILABLE (`controlplane.status`) and
# long-lived loops try again. Anything else a statement raises is a bug or a constraint, not a fault.
UNAVAILABLE_ERRORS: tuple[type[Exception], ...] = (
    OSError,  # refused, reset, unreachable; TimeoutError (a connect or a statement out of time) is one
    asyncpg.PostgresConnectionError,  # 08xxx: the connection was lost or refused by the server
    asyncpg.InterfaceError,  # a connection or the pool closed under the statement
    asyncpg.exceptions.InternalClientError,  # a connection left mid-operation when its server went
    asyncpg.exceptions.OperatorInterventionError,  # 57xxx: shutting down, starting up, crashed, cancelled
    asyncpg.exceptions.InsufficientResourcesError,  # 53xxx: too many connections, disk or memory full
    asyncpg.exceptions.PostgresSystemError,  # 58xxx: an I/O error on the server
)
# A transaction PostgreSQL rolled back because of another one (40xxx: serialization failure, deadlock):
# nothing was done, and the same request may succeed once the caller has read the new state.
CONFLICT_ERRORS: tuple[type[Exception], ...] = (asyncpg.exceptions.TransactionRollbackError,)
FAULTS = UNAVAILABLE_ERRORS + CONFLICT_ERRORS


class DatabaseUnreachable(Exception):
    """No connection to the database could be made; the message says why, never with the URL (it may
    hold a password)."""


async def create_pool(dsn: str, *, min_size: int = 2, max_size: int = 10) -> asyncpg.Pool:
    """Open a pool whose connections decode jsonb to Python values. DatabaseUnreachable when the
    first connections fail (refused, unknown host, bad password, malformed URL, timeout)."""
    try:
        return await asyncpg.create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            init=_init_connection,
            command_timeout=30,
            timeout=10,
        )
    except (OSError, ValueError, asyncpg.PostgresError, asyncpg.InterfaceError) as error:
        raise DatabaseUnreachable(f"{type(error).__name__}: {error}") from error


def _migrations() -> list[tuple[int, str, str]]:
    found = []
    for entry in resources.files("controlplane.migrations").iterdir():
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            found.append((version, entry.name, entry.read_text()))
    return sorted(found)


async def migrate(pool: asyncpg.Pool) -> list[str]:
    """Apply every migration not yet applied, each in its own transaction."""
    applied_now = []
    async with pool.acquire() as conn:
        await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK_KEY)
        try:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
            for version, name, sql in _migrations():
                if version in done:
                    continue
                async with conn.transaction():
                    await conn.execute(sql)
                    await conn.execute("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", version, name)
                applied_now.append(name)
                log.info("migration_applied", migration=name)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _MIGRATION_LOCK_KEY)
    return applied_now
