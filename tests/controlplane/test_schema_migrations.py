"""The schema's migrations are checksummed and a replica refuses a database it does not understand:
an applied migration edited since, or a schema newer than its own, stops it before anything is applied
or served. `astrabox db status` / `astrabox db migrate` show and apply them (real PostgreSQL)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import AsyncIterator
from importlib import import_module
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio

from astrabox_server.commands import DB
from controlplane import database
from controlplane.database import SchemaMismatch, create_pool, migrate
from controlplane.server import serve
from controlplane.settings import ControlPlaneSettings

LATEST = database.migrations()[-1]


@pytest_asyncio.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(database_url, min_size=1, max_size=2)
    try:
        yield pool
    finally:
        await pool.close()


async def test_each_applied_migration_is_recorded_with_its_checksum(pool: asyncpg.Pool) -> None:
    applied = await migrate(pool)
    assert applied == [m.name for m in database.migrations()]
    rows = await pool.fetch("SELECT name, checksum FROM schema_migrations ORDER BY version")
    assert {r["name"]: r["checksum"] for r in rows} == {m.name: m.checksum for m in database.migrations()}
    assert await migrate(pool) == []  # nothing twice


async def test_an_edited_applied_migration_stops_the_start_naming_the_file(
    database_url: str, pool: asyncpg.Pool, bootstrap_key_file: str
) -> None:
    await migrate(pool)
    edited = database.migrations()[3]
    # What the database recorded no longer matches the file: the file was edited after it was applied.
    await pool.execute("UPDATE schema_migrations SET checksum = $2 WHERE version = $1", edited.version, "0" * 64)
    with pytest.raises(SchemaMismatch, match=re.escape(edited.name) + " was edited after it was applied"):
        await migrate(pool)
    settings = ControlPlaneSettings(
        database_url=database_url, listen="127.0.0.1:0", bootstrap_key_file=bootstrap_key_file
    )
    with pytest.raises(SchemaMismatch, match=re.escape(edited.name)):
        async with serve(settings):
            pytest.fail("the control plane served a database whose applied migration was edited")


async def test_a_newer_schema_is_refused_before_anything_is_applied(database_url: str, pool: asyncpg.Pool) -> None:
    # A database some newer control plane has started on, with a migration this one does not know
    # (and, here, before any other: a refusal must apply none of this replica's own).
    async with pool.acquire() as conn:
        await conn.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now(), checksum text)"
        )
        await conn.execute(
            "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
            LATEST.version + 4,
            "9999_from_the_future.sql",
        )
    expected = (
        f"the database's schema is at {LATEST.version + 4:04d} (9999_from_the_future.sql), newer than this "
        f"control plane ({LATEST.version:04d}) understands: upgrade the control plane"
    )
    with pytest.raises(SchemaMismatch, match=re.escape(expected)):
        await migrate(pool)
    assert await pool.fetchval("SELECT to_regclass('sessions')") is None  # never a partial run
    # The process says so and stops, FAILED at start.
    env = {**os.environ, "ASTRABOX_DATABASE_URL": database_url, "ASTRABOX_LISTEN": "127.0.0.1:0"}
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "controlplane"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert expected in done.stderr


async def test_rows_recorded_before_checksums_get_theirs_on_first_start(pool: asyncpg.Pool) -> None:
    await migrate(pool)
    await pool.execute("ALTER TABLE schema_migrations DROP COLUMN checksum")  # as the earlier releases kept it
    before = await database.status(pool)
    assert before.pending == [] and {row["checksum"] for row in before.applied} == {None}
    assert await migrate(pool) == []
    rows = await pool.fetch("SELECT version, checksum FROM schema_migrations ORDER BY version")
    assert [r["checksum"] for r in rows] == [m.checksum for m in database.migrations()]


async def astrabox_db(database_url: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """`astrabox db ...` in a process of its own, as the `astrabox` command runs it (the entry point
    `db`, checked below), with the database URL in the environment."""
    env = {**os.environ, "ASTRABOX_DATABASE_URL": database_url}
    script = "import sys; from astrabox_server.commands import DB; sys.exit(DB.main(sys.argv[1:]))"
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", script, *argv], env=env, capture_output=True, text=True, timeout=120
    )


async def _db(database_url: str, *argv: str) -> str:
    done = await astrabox_db(database_url, *argv)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_db_status_and_migrate_on_a_fresh_and_an_up_to_date_database(database_url: str) -> None:
    every = database.migrations()
    fresh = await _db(database_url, "status")
    assert fresh.splitlines()[0] == f"applied: 0, pending: {len(every)}"
    assert f"  pending  {every[0].name}  {every[0].checksum[:12]}" in fresh
    assert "run `astrabox db migrate`" in fresh
    conn = await asyncpg.connect(database_url)
    try:
        assert await conn.fetchval("SELECT to_regclass('schema_migrations')") is None  # status changed nothing
    finally:
        await conn.close()

    migrated = await _db(database_url, "migrate")
    assert migrated == "".join(f"applied {m.name}\n" for m in every) + f"{len(every)} migration(s) applied\n"

    current = await _db(database_url, "status")
    assert current.splitlines()[0] == f"applied: {len(every)}, pending: 0"
    assert f"  applied  {LATEST.name}  {LATEST.checksum[:12]}" in current
    assert current.splitlines()[-1] == "up to date"
    assert await _db(database_url, "migrate") == "nothing to apply: the schema is up to date\n"


async def test_db_status_stops_on_an_edited_migration(database_url: str, pool: asyncpg.Pool) -> None:
    await migrate(pool)
    await pool.execute("UPDATE schema_migrations SET checksum = $1 WHERE version = $2", "f" * 64, LATEST.version)
    done = await astrabox_db(database_url, "status")
    assert done.returncode == 1 and done.stdout == ""
    assert f"astrabox db: migration {LATEST.name} was edited after it was applied" in done.stderr


def test_astrabox_db_is_a_declared_server_command() -> None:
    """`astrabox db` reaches the server's command through the `astrabox.commands` entry points."""
    declared = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["entry-points"]
    module, _, name = declared["astrabox.commands"]["db"].partition(":")
    command = getattr(import_module(module), name)
    assert command is DB and command.name == "db"
