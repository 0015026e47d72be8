"""The agent's durable local state: one SQLite database in the state directory.

`Database` owns the connection and the single worker thread every statement
runs on (so the event loop never waits on the disk). `AgentState` owns the
tables about what the agent holds: its sessions (sandbox, engine, the turn in
flight), the inputs queued behind that turn, the interactions a turn is parked
on, the command ids it has applied, the sandboxes of released sessions it
keeps on purpose (`--retain-sandboxes`), the latest lease generation and small
facts such as its own id. Queued inputs and pending interactions are recorded
so that a restarted agent can settle what the previous process left open. The output outbox lives in the same database
(`dataplane_agent.relay.outbox`) so that a command's effect, its outputs and the
record that it was applied commit in one transaction.

WAL with synchronous=FULL: a committed transaction survives SIGKILL and power
loss. Writes that queue up while a transaction commits are committed together in
the next one (`Database.write`: group commit, one fsync for many outputs); each
caller still learns its write is durable only once it is.

The state directory holds every session's output, so it is kept private
(`keep_private`: 0700) and so are the database and its WAL and shared-memory
files (0600), whatever the umask and whatever modes an existing copy had.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
import structlog

from dataplane_agent.errors import StateError
from dataplane_agent.sandboxes.base import Sandbox

log = structlog.get_logger(__name__)

T = TypeVar("T")

# A step of a write transaction, such as the record that a command was applied.
Receipt = Callable[[sqlite3.Connection], None]


def in_order(*steps: Callable[[sqlite3.Connection], object]) -> Receipt:
    """Steps of one write transaction, taken in this order."""

    def take(c: sqlite3.Connection) -> None:
        for step in steps:
            step(c)

    return take


# Applied command ids kept for idempotency; older ones are pruned (the control
# plane never redelivers a command that far back).
_APPLIED_COMMANDS_KEPT = 10_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id  TEXT    NOT NULL,
    output_seq  INTEGER NOT NULL,
    body        BLOB    NOT NULL,
    UNIQUE (session_id, output_seq)
);
CREATE TABLE IF NOT EXISTS output_cursor (
    session_id  TEXT PRIMARY KEY,
    last_seq    INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sessions (
    session_id        TEXT PRIMARY KEY,
    engine            TEXT NOT NULL,
    permission_mode   TEXT NOT NULL,
    model             TEXT NOT NULL,
    engine_session_id TEXT NOT NULL,
    sandbox_json      TEXT NOT NULL,
    turn_id           TEXT NOT NULL DEFAULT '',
    config            BLOB NOT NULL DEFAULT x'',
    tool_grants       BLOB NOT NULL DEFAULT x'',
    environment       BLOB NOT NULL DEFAULT x''
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS applied_commands (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    command_id  TEXT NOT NULL UNIQUE,
    command_seq INTEGER NOT NULL,
    code        INTEGER NOT NULL,
    message     TEXT NOT NULL,
    applied_at  REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS queued_inputs (
    position    INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id  TEXT NOT NULL,
    turn_id     TEXT NOT NULL,
    UNIQUE (session_id, turn_id)
);
CREATE TABLE IF NOT EXISTS interactions (
    interaction_id TEXT PRIMARY KEY,
    session_id     TEXT NOT NULL,
    turn_id        TEXT NOT NULL,
    tool_name      TEXT NOT NULL,
    tool_use_id    TEXT NOT NULL,
    asked_at       REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS retained_sandboxes (
    session_id   TEXT PRIMARY KEY,
    sandbox_json TEXT NOT NULL,
    reason       TEXT NOT NULL,
    retained_at  REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS layer_uses (
    build_digest TEXT PRIMARY KEY,
    last_used    REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS agent_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
"""

# Columns added since a table was first made: a database an older agent made gets them (with
# their defaults) when opened. (table, column, its definition)
_ADDED_COLUMNS = (
    ("sessions", "config", "BLOB NOT NULL DEFAULT x''"),
    ("sessions", "tool_grants", "BLOB NOT NULL DEFAULT x''"),
    ("sessions", "environment", "BLOB NOT NULL DEFAULT x''"),
)


# The most writes one group transaction takes (`Database.write`).
GROUP_LIMIT = 256


@dataclass(frozen=True, slots=True)
class _QueuedWrite:
    fn: Callable[[sqlite3.Connection], Any]
    done: asyncio.Future[Any]


class Database:
    """One SQLite connection for writes, used from one dedicated worker thread, writes group-committed;
    and one read-only connection on a thread of its own, so that a read (the relay's next batch) never
    waits behind a group's fsync: in WAL mode a reader sees every transaction committed before it
    began and blocks no writer."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="agent-db")
        self._reader = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="agent-db-read")
        self._conn: sqlite3.Connection | None = None
        self._read_conn: sqlite3.Connection | None = None
        self._commit_listeners: list[Callable[[], None]] = []
        # Writes waiting for their group transaction, and whether a group job is in the executor and
        # has not taken them yet (`write`, `_commit_group`).
        self._queue_lock = threading.Lock()
        self._queue: list[_QueuedWrite] = []
        self._group_queued = False
        # Write transactions committed (each of one or more writes).
        self.commits = 0

    @classmethod
    async def open(cls, path: Path) -> Database:
        db = cls(path)
        try:
            await db._submit(db._connect)
            await asyncio.get_running_loop().run_in_executor(db._reader, db._connect_reader)
        except (sqlite3.Error, OSError, StateError) as exc:
            db._executor.shutdown(wait=False)
            db._reader.shutdown(wait=False)
            raise StateError(f"cannot open the agent state database {path}: {exc}") from exc
        return db

    def _connect(self) -> None:
        keep_private(self.path.parent)
        _private_database_files(self.path)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA busy_timeout=5000")
        conn.executescript(_SCHEMA)
        _add_missing_columns(conn)
        self._conn = conn

    def _connect_reader(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA query_only=1")
        conn.execute("PRAGMA busy_timeout=5000")
        self._read_conn = conn

    async def close(self) -> None:
        if self._read_conn is not None:
            await asyncio.get_running_loop().run_in_executor(self._reader, self._read_conn.close)
            self._read_conn = None
        self._reader.shutdown(wait=True)
        if self._conn is not None:
            await self._submit(self._conn.close)
            self._conn = None
        self._executor.shutdown(wait=True)

    def on_commit(self, listener: Callable[[], None]) -> None:
        """Call `listener` (on the event loop) after every committed write."""
        self._commit_listeners.append(listener)

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` in a read transaction (one snapshot for all its statements) on the read-only
        connection; it sees every write that had returned before the call."""
        try:
            done = asyncio.get_running_loop().run_in_executor(self._reader, self._read_tx, fn)
        except RuntimeError as error:  # the executor is shut down: closed
            raise StateError("the agent state database is closed") from error
        return await done

    def _read_tx(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._read_conn
        if conn is None:
            raise StateError("the agent state database is closed")
        conn.execute("BEGIN")
        try:
            return fn(conn)
        finally:
            conn.execute("COMMIT")

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` in a write transaction; return once that transaction committed, or raise what `fn`
        raised (its changes rolled back, nobody else's).

        Group commit: writes queued while an earlier transaction was committing share one
        transaction (and one fsync), each inside its own savepoint. A group is whatever is queued
        when the worker thread takes it, at most `GROUP_LIMIT` writes: no write waits for others
        to arrive, so an idle agent commits each write alone at once and a busy one commits many
        per fsync. Writes run in the order they were called, and a read called after a write
        returned sees it. The commit listeners run once per committed group."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        with self._queue_lock:
            self._queue.append(_QueuedWrite(fn, done))
            submit = not self._group_queued
            self._group_queued = True
        if submit:
            try:
                self._executor.submit(self._commit_group, loop)
            except RuntimeError as error:  # shut down: closed
                with self._queue_lock:
                    self._queue.clear()
                    self._group_queued = False
                raise StateError("the agent state database is closed") from error
        result: T = await done
        return result

    def _commit_group(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the worker thread: one transaction for the writes queued now (at most `GROUP_LIMIT`)."""
        with self._queue_lock:
            group, self._queue = self._queue[:GROUP_LIMIT], self._queue[GROUP_LIMIT:]
            if self._queue:
                self._executor.submit(self._commit_group, loop)  # the rest: the next group, at once
            else:
                self._group_queued = False
        outcomes: list[tuple[bool, Any]] = []
        try:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                for write in group:
                    conn.execute("SAVEPOINT write")
                    try:
                        outcomes.append((True, write.fn(conn)))
                    except BaseException as error:
                        if not conn.in_transaction:
                            raise  # SQLite ended the whole transaction (disk full, I/O error): none is stored
                        conn.execute("ROLLBACK TO write")
                        outcomes.append((False, error))
                    conn.execute("RELEASE write")
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            self.commits += 1
        except BaseException as error:
            # No transaction (database closed) or it could not commit: none of the group is stored.
            outcomes = [(False, error)] * len(group)
        try:
            loop.call_soon_threadsafe(self._settle, group, outcomes)
        except RuntimeError:
            pass  # the event loop is closed: nobody waits any more

    def _settle(self, group: list[_QueuedWrite], outcomes: list[tuple[bool, Any]]) -> None:
        for write, (ok, value) in zip(group, outcomes, strict=True):
            if write.done.done():
                continue  # the caller was cancelled; its write stands (or not) all the same
            if ok:
                write.done.set_result(value)
            else:
                write.done.set_exception(value)
        if any(ok for ok, _ in outcomes):
            for listener in self._commit_listeners:
                listener()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StateError("the agent state database is closed")
        return self._conn

    async def _submit(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)


def _add_missing_columns(conn: sqlite3.Connection) -> None:
    for table, column, definition in _ADDED_COLUMNS:
        if column not in {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")
            log.info("state_column_added", table=table, column=column)


def keep_private(directory: Path) -> None:
    """`directory` exists with mode 0700: created so (with any missing parents), or tightened to it,
    logged, when an existing one was open to others. StateError when that is not possible."""
    try:
        missing = [d for d in (directory, *directory.parents) if not d.exists()]
        for created in reversed(missing):
            created.mkdir(mode=0o700, exist_ok=True)
            created.chmod(0o700)  # mkdir's mode passes through the umask
        _tighten(directory, 0o700)
    except OSError as error:
        raise StateError(f"cannot make the agent state directory {directory} private (0700): {error}") from error


def _private_database_files(path: Path) -> None:
    # SQLite creates the WAL and shared-memory files with the database file's own mode, so a
    # database made here 0600 keeps them 0600 whatever the umask; older ones are tightened.
    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
    for file in (path, *(path.with_name(path.name + suffix) for suffix in ("-wal", "-shm", "-journal"))):
        try:
            _tighten(file, 0o600)
        except FileNotFoundError:
            pass


def _tighten(path: Path, private: int) -> None:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode == private:
        return
    path.chmod(private)
    if mode & 0o077:
        log.warning("state_permissions_tightened", path=str(path), mode=oct(mode), now=oct(private))


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
