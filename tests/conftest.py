"""Fixtures shared by every test package.

- `postgres_dsn` (session): a PostgreSQL server for the whole run.
- `database_url` (function): a fresh, empty database on it for one test.
- `api_key` (session, for every test): the admin key every test's control plane is bootstrapped with
  and every client and `astrabox` command finds in the environment (ASTRABOX_API_KEY); the user's
  config directory is a temporary one, so no test reads or writes the real ~/.config/astrabox.
- `_reasons_received` (session): every ErrorInfo reason a test receives through the SDK is recorded,
  and the run fails at its end on one that no service's proto header documents.
- `_released_workspace_images` (every test): the workspace images a test's agents mounted under
  its temporary directories are unmounted when it ends, as `astrabox demo` does with its own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest
import pytest_asyncio

from astrabox.errors import AstraBoxError
from controlplane.embedded_postgres import EmbeddedPostgres, PostgresNotFoundError
from controlplane.identity import keys
from dataplane_agent.sandboxes.disk import release_mounts
from tests.support import reasons

TEST_DATABASE_URL_ENV = "ASTRABOX_TEST_DATABASE_URL"


@pytest.fixture(scope="session", autouse=True)
def api_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The operator admin key of every test's installation (see the module's docstring)."""
    config = tmp_path_factory.mktemp("config")
    key = keys.new_key().secret
    key_file = config / "bootstrap-key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    saved = {
        name: os.environ.get(name) for name in ("ASTRABOX_API_KEY", "ASTRABOX_BOOTSTRAP_KEY_FILE", "XDG_CONFIG_HOME")
    }
    os.environ.update(
        ASTRABOX_API_KEY=key, ASTRABOX_BOOTSTRAP_KEY_FILE=str(key_file), XDG_CONFIG_HOME=str(config / "xdg")
    )
    try:
        yield key
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session")
def bootstrap_key_file(api_key: str) -> str:
    """The file in-process control planes (`ControlPlaneSettings(bootstrap_key_file=...)`) register
    `api_key` from."""
    return os.environ["ASTRABOX_BOOTSTRAP_KEY_FILE"]


@pytest.fixture(scope="session", autouse=True)
def _reasons_received() -> Iterator[None]:
    """Records every ErrorInfo reason a test receives through the SDK (tests.support.reasons.SEEN),
    so that the run fails on one that no service's proto header documents (pytest_sessionfinish)."""
    original = AstraBoxError.from_rpc_error.__func__  # type: ignore[attr-defined]

    def recording(cls: type[AstraBoxError], error: Any) -> AstraBoxError:
        made: AstraBoxError = original(cls, error)
        if made.domain == "astrabox.dev" and made.reason:
            reasons.SEEN.setdefault(made.reason, os.environ.get("PYTEST_CURRENT_TEST", "?"))
        return made

    AstraBoxError.from_rpc_error = classmethod(recording)  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        AstraBoxError.from_rpc_error = classmethod(original)  # type: ignore[method-assign, assignment]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    undocumented = {reason: where for reason, where in reasons.SEEN.items() if reason not in reasons.all_documented()}
    if undocumented:
        lines = [f"  {reason} (first seen in {where})" for reason, where in sorted(undocumented.items())]
        print("\nreasons received that no service's proto header documents:\n" + "\n".join(lines))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _released_workspace_images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    yield
    release_mounts(tmp_path_factory.getbasetemp())


@pytest_asyncio.fixture(scope="session")
async def postgres_dsn() -> AsyncIterator[str]:
    """DSN of a database on a PostgreSQL server shared by the whole test run.

    $ASTRABOX_TEST_DATABASE_URL when set (its role must be allowed to create
    databases); otherwise a throwaway embedded cluster in a temp dir, with
    fsync off, removed at the end. It is shared: a test that stops or kills
    PostgreSQL must start its own `EmbeddedPostgres`. Without PostgreSQL
    installed, the tests that need it skip (and fail under CI, which must
    install it).
    """
    if url := os.environ.get(TEST_DATABASE_URL_ENV):
        yield url
        return
    data_dir = Path(tempfile.mkdtemp(prefix="astrabox-test-pg-"))
    cluster = EmbeddedPostgres(data_dir, fast=True, settings={"max_connections": "200"})
    try:
        dsn = await cluster.start()
    except Exception as exc:
        with contextlib.suppress(Exception):
            await cluster.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
        if not isinstance(exc, PostgresNotFoundError):
            raise
        if os.environ.get("CI"):
            pytest.fail(f"CI must install PostgreSQL: {exc}")
        pytest.skip(f"needs PostgreSQL: {exc}")
    try:
        yield dsn
    finally:
        await cluster.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest_asyncio.fixture
async def database_url(postgres_dsn: str) -> AsyncIterator[str]:
    """DSN of a new empty database (`test_<uuid>`) for one test, dropped after it."""
    name = f"test_{uuid.uuid4().hex}"
    admin = await asyncpg.connect(postgres_dsn, timeout=10)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"', timeout=60)
    finally:
        await admin.close(timeout=10)
    yield urlsplit(postgres_dsn)._replace(path=f"/{name}").geturl()
    admin = await asyncpg.connect(postgres_dsn, timeout=10)
    try:
        # FORCE: a connection the test leaked must not keep its database alive.
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', timeout=60)
    finally:
        await admin.close(timeout=10)
