"""EmbeddedPostgres: a real cluster is initialised, started, stopped and re-used."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

from controlplane.embedded_postgres import (
    EmbeddedPostgres,
    EmbeddedPostgresError,
    PostgresNotFoundError,
    find_bindir,
)


def _postgres_installed() -> bool:
    try:
        find_bindir()
    except PostgresNotFoundError:
        return False
    return True


needs_postgres = pytest.mark.skipif(
    not _postgres_installed() and not os.environ.get("CI"), reason="PostgreSQL is not installed"
)


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Not tmp_path: pytest's temp root is private to root, and as root the
    # server runs as the postgres user, which must be able to reach the dir.
    parent = Path(tempfile.mkdtemp(prefix="astrabox-pg-test-"))
    parent.chmod(0o755)
    yield parent / "data"
    shutil.rmtree(parent, ignore_errors=True)


@needs_postgres
async def test_data_survives_a_restart_and_a_new_owner_of_the_data_dir(data_dir: Path) -> None:
    cluster = EmbeddedPostgres(data_dir)
    dsn = await cluster.start()
    try:
        assert dsn.startswith("postgresql://") and "@127.0.0.1:" in dsn and dsn.endswith("/astrabox")
        conn = await asyncpg.connect(dsn)
        assert await conn.fetchval("SHOW listen_addresses") == "127.0.0.1"
        assert await conn.fetchval("SHOW fsync") == "on"
        await conn.execute("CREATE TABLE t (v text); INSERT INTO t VALUES ('kept')")
        await conn.close()
        with pytest.raises(asyncpg.InvalidPasswordError):
            await asyncpg.connect(dsn.replace(str(urlsplit(dsn).password), "wrong"))

        await cluster.stop()
        assert cluster.pid is None
        with pytest.raises(OSError):
            await asyncpg.connect(dsn, timeout=5)

        # Same data dir, new object, fast settings: initialised data is re-used
        # and the port it was started on first is kept.
        cluster = EmbeddedPostgres(data_dir, port=cluster.port, fast=True)
        assert await cluster.start() == dsn
        conn = await asyncpg.connect(dsn)
        assert await conn.fetchval("SELECT v FROM t") == "kept"
        assert await conn.fetchval("SHOW fsync") == "off"
        assert await conn.fetchval("SHOW synchronous_commit") == "off"
        await conn.close()
    finally:
        await cluster.stop()


@needs_postgres
async def test_recovers_from_a_crashed_server_and_from_an_orphaned_one(data_dir: Path) -> None:
    cluster = EmbeddedPostgres(data_dir, fast=True)
    dsn = await cluster.start()
    try:
        port, crashed_pid = cluster.port, cluster.pid
        await cluster.stop("immediate")
        # Restart with port=0 given at construction: the picked port stays.
        assert await cluster.start() == dsn
        assert cluster.port == port and cluster.pid != crashed_pid

        # A new owner of a data dir whose server still runs (its process died
        # without stopping it) replaces that server.
        orphan_pid = cluster.pid
        cluster = EmbeddedPostgres(data_dir, fast=True)
        conn = await asyncpg.connect(await cluster.start())
        assert await conn.fetchval("SELECT 1") == 1
        await conn.close()
        assert cluster.pid not in (None, orphan_pid)
    finally:
        await cluster.stop()


async def test_missing_binaries_name_what_to_install(data_dir: Path, tmp_path: Path) -> None:
    cluster = EmbeddedPostgres(data_dir, bindir=tmp_path)
    with pytest.raises(PostgresNotFoundError, match="apt-get install postgresql"):
        await cluster.start()


@needs_postgres
async def test_a_directory_with_other_content_is_refused(data_dir: Path) -> None:
    data_dir.mkdir()
    (data_dir / "notes.txt").write_text("mine")
    with pytest.raises(EmbeddedPostgresError, match="neither empty nor a PostgreSQL data dir"):
        await EmbeddedPostgres(data_dir).start()
    assert (data_dir / "notes.txt").read_text() == "mine"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root hands the cluster to another user")
@needs_postgres
async def test_as_root_an_unreachable_data_dir_is_reported(tmp_path: Path) -> None:
    private = Path(tempfile.mkdtemp())  # mode 0700, owned by root
    try:
        with pytest.raises(EmbeddedPostgresError, match="cannot reach"):
            await EmbeddedPostgres(private / "data").start()
    finally:
        shutil.rmtree(private)


_seen_databases: set[str] = set()


@pytest.mark.parametrize("run", [1, 2])
async def test_each_test_gets_a_fresh_empty_database(database_url: str, run: int) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        name = await conn.fetchval("SELECT current_database()")
        tables = await conn.fetchval(
            "SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
        )
        await conn.execute("CREATE TABLE leftover (v int)")
    finally:
        await conn.close()
    assert name.startswith("test_") and name not in _seen_databases
    assert tables == 0
    _seen_databases.add(name)


@needs_postgres
async def test_the_cluster_and_its_password_are_private_under_a_permissive_umask(data_dir: Path) -> None:
    cluster = EmbeddedPostgres(data_dir, fast=True)
    previous = os.umask(0)
    try:
        await cluster.start()
    finally:
        os.umask(previous)
    try:
        assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE((data_dir / "astrabox.password").stat().st_mode) == 0o600
        # (Its unix socket is 0777, as PostgreSQL makes it, behind the 0700 directory.)
        open_to_others = [p for p in data_dir.rglob("*") if not p.is_socket() and p.stat().st_mode & 0o007]
        assert open_to_others == []
    finally:
        await cluster.stop()
