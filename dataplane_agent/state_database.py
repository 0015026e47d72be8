"""The agent's durable local state: one SQLite database in the state directory.

`Database` owns the connection and the single worker thread every write runs on (so the event
loop never waits on the disk), and a read-only connection on a thread of its own. The tables are
declared here, once, for their owners: what the agent holds (`dataplane_agent.state.AgentState`)
and the output outbox (`dataplane_agent.relay.outbox`).

WAL with synchronous=FULL: a committed transaction survives SIGKILL and power
loss. A write that may be lost (`write(durable=False)`: trimming acknowledged
outputs, which are resent and skipped as duplicates when the trim is lost) is
committed without an fsync when its whole group is such: it still survives
SIGKILL, and power loss can take only a suffix of the transactions (the WAL is
synced in order), never one without those before it. Writes that queue up while a transaction commits are committed together in
the next one (`Database.write`: group commit, one fsync for many outputs); each
caller still learns its write is durable only once it is, and so does whatever a
write asked to be told (`Database.after_commit`: how the outbox hands the relay
what it has just stored, never before it is durable).

The state directory holds every session's output, so it is kept private
(`keep_private`: 0700) and so are the database and its WAL and shared-memory
files (0600), whatever the umask and whatever modes an existing copy had.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sqlite3
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import structlog

from dataplane_agent.errors import StateError

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
    durable: bool


@dataclass(frozen=True, slots=True)
class _Outcome:
    ok: bool
    value: Any
    # What the write asked to run once its transaction committed (`Database.after_commit`).
    committed: tuple[Callable[[], None], ...] = ()


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
        # The connection's synchronous setting, on the worker thread: FULL, or NORMAL for a group of
        # writes that may all be lost.
        self._synced = True
        # `staged`, on the worker thread while a write runs: what it asked to run after its commit
        # (`after_commit`); no other thread sees it.
        self._write_local = threading.local()
        # Write transactions committed (each of one or more writes), and read transactions run.
        self.commits = 0
        self.reads = 0

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

    def after_commit(self, fn: Callable[[], None]) -> None:
        """From inside a write (on the worker thread): call `fn` on the event loop once the write's
        transaction committed, before the commit listeners; never if the write rolled back or its
        transaction did not commit. StateError outside a write."""
        staged: list[Callable[[], None]] | None = getattr(self._write_local, "staged", None)
        if staged is None:
            raise StateError("after_commit is called from inside a write")
        staged.append(fn)

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
        self.reads += 1
        conn.execute("BEGIN")
        try:
            return fn(conn)
        finally:
            conn.execute("COMMIT")

    async def write(self, fn: Callable[[sqlite3.Connection], T], *, durable: bool = True) -> T:
        """Run `fn` in a write transaction; return once that transaction committed, or raise what `fn`
        raised (its changes rolled back, nobody else's).

        Group commit: writes queued while an earlier transaction was committing share one
        transaction (and one fsync), each inside its own savepoint. A group is whatever is queued
        when the worker thread takes it, at most `GROUP_LIMIT` writes: no write waits for others
        to arrive, so an idle agent commits each write alone at once and a busy one commits many
        per fsync. Writes run in the order they were called, and a read called after a write
        returned sees it. The commit listeners run once per committed group.

        `durable=False`: the write may be lost on power loss (never on a crash of this process), and
        with it whatever was committed after it and is not durable either; a group of such writes
        only commits without an fsync."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        with self._queue_lock:
            self._queue.append(_QueuedWrite(fn, done, durable))
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
        outcomes: list[_Outcome] = []
        try:
            conn = self._connection()
            self._sync(conn, any(write.durable for write in group))
            conn.execute("BEGIN IMMEDIATE")
            try:
                for write in group:
                    conn.execute("SAVEPOINT write")
                    staged: list[Callable[[], None]] = []
                    self._write_local.staged = staged
                    try:
                        value = write.fn(conn)
                        outcomes.append(_Outcome(True, value, tuple(staged)))
                    except BaseException as error:
                        if not conn.in_transaction:
                            raise  # SQLite ended the whole transaction (disk full, I/O error): none is stored
                        conn.execute("ROLLBACK TO write")
                        outcomes.append(_Outcome(False, error))
                    finally:
                        self._write_local.staged = None
                    conn.execute("RELEASE write")
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            self.commits += 1
        except BaseException as error:
            # No transaction (database closed) or it could not commit: none of the group is stored.
            outcomes = [_Outcome(False, error)] * len(group)
        try:
            loop.call_soon_threadsafe(self._settle, group, outcomes)
        except RuntimeError:
            pass  # the event loop is closed: nobody waits any more

    def _settle(self, group: list[_QueuedWrite], outcomes: list[_Outcome]) -> None:
        for outcome in outcomes:
            for fn in outcome.committed:
                fn()
        for write, outcome in zip(group, outcomes, strict=True):
            if write.done.done():
                continue  # the caller was cancelled; its write stands (or not) all the same
            if outcome.ok:
                write.done.set_result(outcome.value)
            else:
                write.done.set_exception(outcome.value)
        if any(outcome.ok for outcome in outcomes):
            for listener in self._commit_listeners:
                listener()

    def _sync(self, conn: sqlite3.Connection, durable: bool) -> None:
        """Before a group's transaction: an fsync at its commit (FULL) or not (NORMAL, in WAL mode:
        the WAL is synced by the next FULL commit or checkpoint, in order)."""
        if durable != self._synced:
            conn.execute("PRAGMA synchronous=FULL" if durable else "PRAGMA synchronous=NORMAL")
            self._synced = durable

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
