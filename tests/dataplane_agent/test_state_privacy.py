"""The agent's state is private: the directory 0700, its database and the WAL and shared-memory files 0600,
under any umask, and an existing copy with looser modes is tightened (and that is logged once)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.state_database import Database, keep_private


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def _open_and_write(state_dir: Path) -> Database:
    db = await Database.open(state_dir / "agent.db")
    await Outbox(db).append("session-1", "turn-1", pb.RuntimeStarted(sandbox_id="sb", driver="local"))
    return db


async def test_a_new_state_directory_and_database_are_private_under_umask_000(
    tmp_path: Path, permissive_umask: None
) -> None:
    state_dir = tmp_path / "home" / ".astrabox" / "agent"
    keep_private(state_dir)
    db = await _open_and_write(state_dir)
    try:
        files = {path.name: _mode(path) for path in state_dir.iterdir()}
        assert {"agent.db", "agent.db-wal", "agent.db-shm"} <= files.keys()
        assert files == dict.fromkeys(files, 0o600)
        assert _mode(state_dir) == 0o700
        assert _mode(state_dir.parent) == 0o700  # the parents it had to make, too
    finally:
        await db.close()


async def test_an_existing_state_directory_with_loose_modes_is_tightened_and_logged_once(tmp_path: Path) -> None:
    state_dir = tmp_path / "agent"
    state_dir.mkdir(mode=0o777)
    state_dir.chmod(0o777)
    db = await _open_and_write(state_dir)
    await db.close()
    # As an older agent (or a copy from a backup) would have left them.
    state_dir.chmod(0o777)
    loosened = [path.name for path in state_dir.iterdir() if path.name.startswith("agent.db")]
    for name in loosened:
        (state_dir / name).chmod(0o644)

    with structlog.testing.capture_logs() as logged:
        keep_private(state_dir)  # what the agent does at start, before the lock and the database
        db = await _open_and_write(state_dir)
    try:
        assert _mode(state_dir) == 0o700
        modes = {path.name: _mode(path) for path in state_dir.iterdir() if path.name.startswith("agent.db")}
        assert {"agent.db", "agent.db-wal", "agent.db-shm"} <= modes.keys()
        assert modes == dict.fromkeys(modes, 0o600)
        tightened = [(Path(e["path"]).name, e["mode"]) for e in logged if e["event"] == "state_permissions_tightened"]
        assert sorted(tightened) == sorted([("agent", "0o777"), *((name, "0o644") for name in loosened)])
    finally:
        await db.close()
