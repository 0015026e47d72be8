"""The PostgreSQL connection pool and the versioned schema migrations."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
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


class ServerNotWritable(ConnectionError):
    """The server a pooled connection reached can no longer take writes: it is (or became) a
    standby, or it was made read-only. The connection is dropped; the next one, made with the URL's
    `target_session_attrs=read-write`, reaches the primary, whichever server that is now."""


def _writable(conn: asyncpg.Connection) -> bool:
    """What the server last reported (PostgreSQL sends these when they change: no round trip)."""
    settings = conn.get_settings()
    return (
        getattr(settings, "in_hot_standby", "off") != "on"
        and getattr(settings, "default_transaction_read_only", "off") != "on"
    )


async def _end_of_lease(conn: asyncpg.Connection) -> None:
    """Nothing to undo when a connection goes back to the pool (asyncpg still ends an open
    transaction first): the pool's connections keep no session state. They LISTEN to nothing (the
    live tail has its own connection), SET nothing, take advisory locks for a transaction only
    (the migration's session lock is released by `migrate` itself), and leave no cursor open past a
    transaction. So asyncpg's default reset query, a round trip before every connection could serve
    again, is skipped.

    A connection to a server that can no longer write (a demoted primary) is not given back:
    raising here makes asyncpg terminate it, and the caller is told UNAVAILABLE (ServerNotWritable
    is an OSError) as for any lost connection."""
    if not _writable(conn):
        raise ServerNotWritable("the database server is no longer the primary")


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
    # 25006: a write reached a server that is a standby now (a failover demoted it). Nothing was
    # written; the connection is dropped (`_end_of_lease`) and the next one reaches the new primary.
    asyncpg.exceptions.ReadOnlySQLTransactionError,
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
            reset=_end_of_lease,
            command_timeout=30,
            timeout=10,
        )
    except (OSError, ValueError, asyncpg.PostgresError, asyncpg.InterfaceError) as error:
        raise DatabaseUnreachable(f"{type(error).__name__}: {error}") from error


class SchemaMismatch(Exception):
    """The database's schema and this control plane's migrations disagree: an applied migration was
    edited since, or the database is newer than this control plane understands. Nothing was applied;
    the message names the file or the versions and what to do."""


@dataclass(frozen=True, slots=True)
class Migration:
    """One numbered SQL file of `controlplane/migrations`, with the SHA-256 of its text."""

    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class SchemaStatus:
    """What `astrabox db status` shows: the migrations applied (name, checksum, when) and pending."""

    applied: list[asyncpg.Record]
    pending: list[Migration]


def migrations() -> list[Migration]:
    """This control plane's migrations, in order."""
    found = []
    for entry in resources.files("controlplane.migrations").iterdir():
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            found.append(Migration(version, entry.name, entry.read_text()))
    return sorted(found, key=lambda migration: migration.version)


# The migrator's bookkeeping, created (and given its checksum column) by the migrator itself: a
# row per applied file, with the SHA-256 of the text that was applied. Rows recorded before
# checksums existed get the checksum of the file as it is when a replica first starts after that.
_BOOKKEEPING = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " version integer PRIMARY KEY, name text NOT NULL,"
    " applied_at timestamptz NOT NULL DEFAULT now());"
    " ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS checksum text"
)


async def _verified(
    conn: asyncpg.Connection, known: list[Migration], has_checksums: bool = True
) -> dict[int, asyncpg.Record]:
    """The applied migrations by version, once checked against `known`. SchemaMismatch when one was
    edited after it was applied, or when the database has one this control plane does not know."""
    checksum = "checksum" if has_checksums else "NULL::text AS checksum"
    applied = {
        row["version"]: row
        for row in await conn.fetch(
            f"SELECT version, name, {checksum}, applied_at FROM schema_migrations ORDER BY version"
        )
    }
    by_version = {migration.version: migration for migration in known}
    highest = max(by_version, default=0)
    unknown = sorted(version for version in applied if version not in by_version)
    if unknown:
        newest = applied[unknown[-1]]
        if unknown[-1] > highest:
            raise SchemaMismatch(
                f"the database's schema is at {unknown[-1]:04d} ({newest['name']}), newer than this control plane "
                f"({highest:04d}) understands: upgrade the control plane (or restore the database it ran with)"
            )
        raise SchemaMismatch(
            f"the database has migration {newest['name']}, which this control plane does not have: "
            "run the control plane version that applied it"
        )
    for version, row in applied.items():
        migration = by_version[version]
        if row["checksum"] is not None and row["checksum"] != migration.checksum:
            raise SchemaMismatch(
                f"migration {migration.name} was edited after it was applied (its SHA-256 {migration.checksum[:12]}… "
                f"differs from the applied {row['checksum'][:12]}…): restore the file as applied and put the "
                "change in a new migration"
            )
    return applied


async def _locked(conn: asyncpg.Connection) -> None:
    await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK_KEY)
    await conn.execute(_BOOKKEEPING)


async def status(pool: asyncpg.Pool) -> SchemaStatus:
    """The applied and pending migrations, the applied ones' checksums verified (SchemaMismatch).
    It changes nothing: on a database never migrated, or migrated before checksums, it says so."""
    known = migrations()
    async with pool.acquire() as conn, conn.transaction(readonly=True):
        if await conn.fetchval("SELECT to_regclass('schema_migrations')") is None:
            applied = {}
        else:
            await conn.execute("SELECT pg_advisory_xact_lock_shared($1)", _MIGRATION_LOCK_KEY)  # not mid-migration
            has_checksums = await conn.fetchval(
                "SELECT EXISTS (SELECT 1 FROM information_schema.columns"
                " WHERE table_name = 'schema_migrations' AND column_name = 'checksum')"
            )
            applied = await _verified(conn, known, has_checksums)
    return SchemaStatus(list(applied.values()), [m for m in known if m.version not in applied])


async def migrate(pool: asyncpg.Pool) -> list[str]:
    """Apply every migration not yet applied, each in its own transaction, recording its checksum.
    Every applied one is verified first: SchemaMismatch, with nothing applied, when one was edited
    since or the database has one this control plane does not know (a newer schema)."""
    known = migrations()
    applied_now = []
    async with pool.acquire() as conn:
        try:
            await _locked(conn)
            applied = await _verified(conn, known)
            for migration in known:
                if migration.version in applied:
                    if applied[migration.version]["checksum"] is None:  # recorded before checksums
                        await conn.execute(
                            "UPDATE schema_migrations SET checksum = $2 WHERE version = $1",
                            migration.version,
                            migration.checksum,
                        )
                    continue
                async with conn.transaction():
                    await conn.execute(migration.sql)
                    await conn.execute(
                        "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                        migration.version,
                        migration.name,
                        migration.checksum,
                    )
                applied_now.append(migration.name)
                log.info("migration_applied", migration=migration.name)
        finally:
            await conn.execute("SELECT pg_advisory_unlock_all()")  # the connection goes back with no lock
    return applied_now
