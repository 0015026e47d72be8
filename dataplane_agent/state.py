"""What the agent holds, recorded in its durable state database (`dataplane_agent.state_database`).

`AgentState` owns the tables about what the agent holds: its sessions (sandbox, engine, the turn in
flight), the inputs queued behind that turn, the interactions a turn is parked on, the command ids it
has applied, the sandboxes of released sessions it keeps on purpose (`--retain-sandboxes`), the
latest lease generation and small facts such as its own id. Queued inputs and pending interactions
are recorded so that a restarted agent can settle what the previous process left open. The output
outbox lives in the same database (`dataplane_agent.relay.outbox`) so that a command's effect, its
outputs and the record that it was applied commit in one transaction.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import structlog

from dataplane_agent.sandboxes.base import Sandbox
from dataplane_agent.state_database import Database

log = structlog.get_logger(__name__)


# Applied command ids kept for idempotency; older ones are pruned (the control
# plane never redelivers a command that far back).
_APPLIED_COMMANDS_KEPT = 10_000


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A session the agent holds."""

    session_id: str
    engine: str
    # The session's mode, which a restarted engine starts in; never one turn's own.
    permission_mode: str
    model: str
    engine_session_id: str
    sandbox: Sandbox
    # The turn that was running when last recorded; empty when idle.
    turn_id: str = ""
    # The session's agent configuration (StartRuntime.config, a serialized AgentSpec), applied by
    # every engine start of the session; empty: none.
    config: bytes = b""
    # The session's tool grants in force (the newest StartRuntime's or SetToolGrants' set, a
    # serialized SetToolGrants); empty: none.
    tool_grants: bytes = b""
    # The session's pinned environment (StartRuntime.environment, a serialized RuntimeEnvironment):
    # its network policy is registered with the egress proxy again by every engine start; empty: none.
    environment: bytes = b""


@dataclass(frozen=True, slots=True)
class RetainedSandbox:
    """A released session's sandbox kept on purpose, for inspection: no longer held, never reused."""

    session_id: str
    sandbox: Sandbox
    # Why the session was released (the control plane's DestroyRuntime reason).
    reason: str
    # Wall-clock seconds.
    retained_at: float


@dataclass(frozen=True, slots=True)
class PendingInteraction:
    """A question a turn is parked on, as recorded."""

    interaction_id: str
    session_id: str
    turn_id: str
    tool_name: str
    tool_use_id: str


@dataclass(frozen=True, slots=True)
class CommandOutcome:
    """How an applied command was acknowledged."""

    command_seq: int
    code: grpc.StatusCode
    message: str


class AgentState:
    """Sessions held, commands applied, lease generation, agent facts.

    Methods ending in `_tx` run inside a `Database.write` transaction so a
    caller can combine them with outbox appends atomically.
    """

    def __init__(self, db: Database) -> None:
        self._db = db

    # -- reads -------------------------------------------------------------

    async def sessions(self) -> list[SessionRecord]:
        rows = await self._db.read(lambda c: c.execute(_SELECT_SESSIONS + " ORDER BY session_id").fetchall())
        return [_session_from_row(r) for r in rows]

    async def session(self, session_id: str) -> SessionRecord | None:
        row = await self._db.read(
            lambda c: c.execute(_SELECT_SESSIONS + " WHERE session_id = ?", (session_id,)).fetchone()
        )
        return _session_from_row(row) if row else None

    async def retained(self) -> list[RetainedSandbox]:
        """The sandboxes kept on purpose, oldest first."""
        rows = await self._db.read(lambda c: c.execute(_SELECT_RETAINED + " ORDER BY retained_at").fetchall())
        return [_retained_from_row(r) for r in rows]

    async def retained_session(self, session_id: str) -> RetainedSandbox | None:
        row = await self._db.read(
            lambda c: c.execute(_SELECT_RETAINED + " WHERE session_id = ?", (session_id,)).fetchone()
        )
        return _retained_from_row(row) if row else None

    async def queued_turns(self, session_id: str) -> list[str]:
        """The turn ids of inputs accepted but not yet given to the engine, oldest first."""
        rows = await self._db.read(
            lambda c: c.execute(
                "SELECT turn_id FROM queued_inputs WHERE session_id = ? ORDER BY position", (session_id,)
            ).fetchall()
        )
        return [r[0] for r in rows]

    async def pending_interactions(self, session_id: str) -> list[PendingInteraction]:
        rows = await self._db.read(
            lambda c: c.execute(
                "SELECT interaction_id, session_id, turn_id, tool_name, tool_use_id FROM interactions"
                " WHERE session_id = ? ORDER BY asked_at",
                (session_id,),
            ).fetchall()
        )
        return [PendingInteraction(*r) for r in rows]

    async def applied(self, command_id: str) -> CommandOutcome | None:
        row = await self._db.read(
            lambda c: c.execute(
                "SELECT command_seq, code, message FROM applied_commands WHERE command_id = ?", (command_id,)
            ).fetchone()
        )
        if row is None:
            return None
        return CommandOutcome(command_seq=row[0], code=_status_code(row[1]), message=row[2])

    async def lease_generation(self) -> int:
        return int(await self.meta("lease_generation") or 0)

    # -- environment layers: their last use, for the sweep (environments.layers) --

    async def layer_used(self, build_digest: str, at: float) -> None:
        await self._db.write(
            lambda c: c.execute(
                "INSERT OR REPLACE INTO layer_uses (build_digest, last_used) VALUES (?, ?)", (build_digest, at)
            )
        )

    async def layer_uses(self) -> dict[str, float]:
        rows = await self._db.read(lambda c: c.execute("SELECT build_digest, last_used FROM layer_uses").fetchall())
        return {str(digest): float(at) for digest, at in rows}

    async def forget_layer(self, build_digest: str) -> None:
        await self._db.write(lambda c: c.execute("DELETE FROM layer_uses WHERE build_digest = ?", (build_digest,)))

    async def meta(self, key: str) -> str | None:
        row = await self._db.read(lambda c: c.execute("SELECT value FROM agent_meta WHERE key = ?", (key,)).fetchone())
        return row[0] if row else None

    # -- writes ------------------------------------------------------------

    async def set_meta(self, key: str, value: str) -> None:
        await self._db.write(lambda c: _set_meta(c, key, value))

    async def set_lease_generation(self, generation: int) -> None:
        """Record the generation of the lease the agent now holds."""
        await self._db.write(lambda c: _set_meta(c, "lease_generation", str(generation)))

    async def raise_lease_generation(self, generation: int) -> int:
        """Record `generation` if it is newer; return the current generation."""

        def tx(c: sqlite3.Connection) -> int:
            row = c.execute("SELECT value FROM agent_meta WHERE key = 'lease_generation'").fetchone()
            current = int(row[0]) if row else 0
            if generation > current:
                _set_meta(c, "lease_generation", str(generation))
                return generation
            return current

        return await self._db.write(tx)

    def put_session_tx(self, c: sqlite3.Connection, record: SessionRecord) -> None:
        c.execute(
            "INSERT OR REPLACE INTO sessions"
            " (session_id, engine, permission_mode, model, engine_session_id, sandbox_json, turn_id, config,"
            " tool_grants, environment) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record.session_id,
                record.engine,
                record.permission_mode,
                record.model,
                record.engine_session_id,
                _sandbox_to_json(record.sandbox),
                record.turn_id,
                record.config,
                record.tool_grants,
                record.environment,
            ),
        )

    def delete_session_tx(self, c: sqlite3.Connection, session_id: str) -> None:
        c.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))
        c.execute("DELETE FROM queued_inputs WHERE session_id = ?", (session_id,))
        c.execute("DELETE FROM interactions WHERE session_id = ?", (session_id,))

    def retain_session_tx(self, c: sqlite3.Connection, record: SessionRecord, reason: str) -> None:
        """The session is released, its sandbox kept on purpose: no longer held, recorded as retained."""
        self.delete_session_tx(c, record.session_id)
        c.execute(
            "INSERT OR REPLACE INTO retained_sandboxes (session_id, sandbox_json, reason, retained_at)"
            " VALUES (?, ?, ?, ?)",
            (record.session_id, _sandbox_to_json(record.sandbox), reason, time.time()),
        )

    def queue_input_tx(self, c: sqlite3.Connection, session_id: str, turn_id: str) -> None:
        c.execute("INSERT OR IGNORE INTO queued_inputs (session_id, turn_id) VALUES (?, ?)", (session_id, turn_id))

    def unqueue_input_tx(self, c: sqlite3.Connection, session_id: str, turn_id: str) -> None:
        c.execute("DELETE FROM queued_inputs WHERE session_id = ? AND turn_id = ?", (session_id, turn_id))

    def add_interaction_tx(self, c: sqlite3.Connection, interaction: PendingInteraction) -> None:
        c.execute(
            "INSERT OR REPLACE INTO interactions"
            " (interaction_id, session_id, turn_id, tool_name, tool_use_id, asked_at) VALUES (?, ?, ?, ?, ?, ?)",
            (
                interaction.interaction_id,
                interaction.session_id,
                interaction.turn_id,
                interaction.tool_name,
                interaction.tool_use_id,
                time.time(),
            ),
        )

    def remove_interactions_tx(
        self, c: sqlite3.Connection, session_id: str, *, turn_id: str = "", interaction_id: str = ""
    ) -> None:
        """Forget one interaction, every interaction of a turn, or (naming neither) all of the session's."""
        query, args = "DELETE FROM interactions WHERE session_id = ?", [session_id]
        if turn_id:
            query, args = query + " AND turn_id = ?", [*args, turn_id]
        if interaction_id:
            query, args = query + " AND interaction_id = ?", [*args, interaction_id]
        c.execute(query, args)

    def set_turn_tx(self, c: sqlite3.Connection, session_id: str, turn_id: str) -> None:
        c.execute("UPDATE sessions SET turn_id = ? WHERE session_id = ?", (turn_id, session_id))

    def set_permission_mode_tx(self, c: sqlite3.Connection, session_id: str, permission_mode: str) -> None:
        """Record the session's mode (a turn's own is never recorded: it ends with its turn)."""
        c.execute("UPDATE sessions SET permission_mode = ? WHERE session_id = ?", (permission_mode, session_id))

    def set_tool_grants_tx(self, c: sqlite3.Connection, session_id: str, grants: bytes) -> None:
        """Replace the session's tool grants (a serialized SetToolGrants)."""
        c.execute("UPDATE sessions SET tool_grants = ? WHERE session_id = ?", (grants, session_id))

    def set_sandbox_tx(self, c: sqlite3.Connection, session_id: str, sandbox: Sandbox) -> None:
        c.execute("UPDATE sessions SET sandbox_json = ? WHERE session_id = ?", (_sandbox_to_json(sandbox), session_id))

    def set_engine_session_id_tx(self, c: sqlite3.Connection, session_id: str, engine_session_id: str) -> None:
        c.execute("UPDATE sessions SET engine_session_id = ? WHERE session_id = ?", (engine_session_id, session_id))

    def mark_applied_tx(
        self,
        c: sqlite3.Connection,
        command_id: str,
        command_seq: int,
        code: grpc.StatusCode = grpc.StatusCode.OK,
        message: str = "",
    ) -> None:
        cur = c.execute(
            "INSERT OR IGNORE INTO applied_commands (command_id, command_seq, code, message, applied_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (command_id, command_seq, code.value[0], message, time.time()),
        )
        if cur.lastrowid and cur.lastrowid % 1000 == 0:
            c.execute("DELETE FROM applied_commands WHERE seq <= ?", (cur.lastrowid - _APPLIED_COMMANDS_KEPT,))


_SELECT_SESSIONS = (
    "SELECT session_id, engine, permission_mode, model, engine_session_id, sandbox_json, turn_id, config,"
    " tool_grants, environment FROM sessions"
)


_SELECT_RETAINED = "SELECT session_id, sandbox_json, reason, retained_at FROM retained_sandboxes"


def _retained_from_row(row: tuple[Any, ...]) -> RetainedSandbox:
    return RetainedSandbox(session_id=row[0], sandbox=_sandbox_from_json(row[1]), reason=row[2], retained_at=row[3])


def _session_from_row(row: tuple[Any, ...]) -> SessionRecord:
    return SessionRecord(
        session_id=row[0],
        engine=row[1],
        permission_mode=row[2],
        model=row[3],
        engine_session_id=row[4],
        sandbox=_sandbox_from_json(row[5]),
        turn_id=row[6],
        config=bytes(row[7]),
        tool_grants=bytes(row[8]),
        environment=bytes(row[9]),
    )


def _sandbox_to_json(sandbox: Sandbox) -> str:
    return json.dumps(
        {
            "sandbox_id": sandbox.sandbox_id,
            "driver": sandbox.driver,
            "session_id": sandbox.session_id,
            "workspace": str(sandbox.workspace),
            "inner_workspace": sandbox.inner_workspace,
            "home": str(sandbox.home),
        }
    )


def _sandbox_from_json(text: str) -> Sandbox:
    d = json.loads(text)
    return Sandbox(
        sandbox_id=d["sandbox_id"],
        driver=d["driver"],
        session_id=d["session_id"],
        workspace=Path(d["workspace"]),
        inner_workspace=d["inner_workspace"],
        home=Path(d["home"]),
    )


def _set_meta(c: sqlite3.Connection, key: str, value: str) -> None:
    c.execute("INSERT OR REPLACE INTO agent_meta (key, value) VALUES (?, ?)", (key, value))


def _status_code(value: int) -> grpc.StatusCode:
    for code in grpc.StatusCode:
        if code.value[0] == value:
            return code
    return grpc.StatusCode.UNKNOWN
