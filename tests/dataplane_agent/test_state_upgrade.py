"""A state database an older agent made opens in this one, its sessions kept, new columns added."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from dataplane_agent.state import AgentState
from dataplane_agent.state_database import Database

# The sessions table as agents made it before sessions kept their agent configuration.
_OLD_SESSIONS = """
CREATE TABLE sessions (
    session_id        TEXT PRIMARY KEY,
    engine            TEXT NOT NULL,
    permission_mode   TEXT NOT NULL,
    model             TEXT NOT NULL,
    engine_session_id TEXT NOT NULL,
    sandbox_json      TEXT NOT NULL,
    turn_id           TEXT NOT NULL DEFAULT ''
) WITHOUT ROWID;
"""


async def test_a_session_an_older_agent_recorded_is_held_with_no_agent_configuration(tmp_path: Path) -> None:
    path = tmp_path / "state" / "agent.db"
    path.parent.mkdir(mode=0o700)
    sandbox = {
        "sandbox_id": "sb-1",
        "driver": "local",
        "session_id": "s-1",
        "workspace": "/w",
        "inner_workspace": "/workspace",
        "home": "/h",
    }
    with sqlite3.connect(path) as old:
        old.executescript(_OLD_SESSIONS)
        old.execute(
            "INSERT INTO sessions VALUES ('s-1', 'claude_code', 'plan', 'm', 'eng-1', ?, '')", (json.dumps(sandbox),)
        )
    db = await Database.open(path)
    try:
        [record] = await AgentState(db).sessions()
        assert (record.session_id, record.permission_mode, record.engine_session_id) == ("s-1", "plan", "eng-1")
        assert record.config == b""
    finally:
        await db.close()
    db = await Database.open(path)  # and again: the column is added once
    await db.close()
