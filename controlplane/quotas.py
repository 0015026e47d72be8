"""Quotas: each project's limits, and their enforcement on every replica at once.

    quota                default   checked at                                         RetryInfo
    live_sessions        100       CreateSession: sessions neither archived, deleted   no (archive or delete one)
                                   nor failed
    sessions_per_minute  60        CreateSession: sessions created in the last 60 s    until the window has room
                                   (deleted ones included)
    message_bytes        256 KiB   SendMessage's text; RespondToInteraction's answer   no
    upload_bytes         256 MiB   UploadWorkspaceArchive: the bytes streamed          no
    concurrent_commands  16        RunCommand: commands running at once                1 s (commands end)

A project's quotas are set by an admin of an operator project (AdminService.SetQuotas): they are
the platform's limits on a project, so a project's own admin can read them but not raise them. A
quota of 0 allows none (a project can be frozen). message_bytes and upload_bytes cannot exceed the
bounds every request has anyway (`validation.MAX_TEXT_BYTES`, `validation.MAX_UPLOAD_BYTES`), which
are their defaults.

Everything is counted in PostgreSQL, so the limits hold across replicas:
- CreateSession takes a transaction-scoped advisory lock on the project, then counts the project's
  sessions, then inserts, in one transaction: two replicas creating for one project take turns, and
  each counts the other's session. A retry of a create (its request_id known) is never refused.
- RunCommand holds a row in `command_leases` while it runs (taken under the same kind of lock, per
  project), renewed every LEASE_TTL / 3 and deleted when the command ends, however it ends; a
  replica that dies leaves leases that lapse after LEASE_TTL.
- Sizes are checked against the project's row as the request arrives; an upload is counted chunk
  by chunk and stopped before the first chunk past the limit reaches the agent (which unpacks
  nothing until the last chunk, so nothing is written).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, fields, replace
from datetime import timedelta

import asyncpg
import structlog

from controlplane import database, store
from controlplane.errors import QuotaExceeded
from controlplane.validation import MAX_TEXT_BYTES, MAX_UPLOAD_BYTES

log = structlog.get_logger(__name__)

# The window sessions_per_minute counts in.
RATE_WINDOW = timedelta(seconds=60)
# How long a RunCommand's lease outlives the last renewal of a replica that stopped renewing it.
LEASE_TTL = timedelta(seconds=30)
# What a caller refused for concurrent_commands is asked to wait: commands end on their own.
COMMAND_RETRY_AFTER = timedelta(seconds=1)
# Each database call of a lease's upkeep waits at most this long.
_DB_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Limits:
    """A project's quotas (see the module's table)."""

    live_sessions: int = 100
    sessions_per_minute: int = 60
    message_bytes: int = MAX_TEXT_BYTES
    upload_bytes: int = MAX_UPLOAD_BYTES
    concurrent_commands: int = 16


DEFAULTS = Limits()
NAMES = tuple(f.name for f in fields(Limits))


@dataclass(frozen=True, slots=True)
class ProjectQuotas:
    """What is set for a project (None: the default) and the limits in force."""

    set: dict[str, int | None]
    limits: Limits


def _limits(row: asyncpg.Record | None) -> ProjectQuotas:
    chosen = {name: (row[name] if row is not None else None) for name in NAMES}
    overrides = {name: value for name, value in chosen.items() if value is not None}
    return ProjectQuotas(chosen, replace(DEFAULTS, **overrides))


async def of(db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID) -> ProjectQuotas:
    return _limits(await store.project_quotas.get(db, project_id))


async def limits(db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID) -> Limits:
    return (await of(db, project_id)).limits


async def put(
    db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, values: dict[str, int | None], by: str
) -> ProjectQuotas:
    """Set every quota of the project (None: the default); the values are within their bounds
    (`validation.FIELDS`, checked at the edge)."""
    return _limits(await store.project_quotas.put(db, project_id, values, by))


@dataclass(frozen=True, slots=True)
class Usage:
    """What a project uses of its quotas now (AdminService.GetQuotas)."""

    live_sessions: int
    sessions_per_minute: int
    concurrent_commands: int


async def usage(db: asyncpg.Pool, project_id: uuid.UUID) -> Usage:
    recent, _ = await store.sessions.created_since(db, project_id, RATE_WINDOW, 0)
    return Usage(
        await store.sessions.count_live(db, project_id),
        recent,
        await store.command_leases.count_held(db, project_id),
    )


async def admit_session(conn: asyncpg.Connection, project_id: uuid.UUID, request_id: str) -> None:
    """In the transaction that creates the session: refuse it when the project is at its
    live_sessions or sessions_per_minute quota. Serialises the project's creates until the
    transaction ends. A create retried with a known request_id passes (its insert returns the
    session it created)."""
    await store.sessions.lock_project_creates(conn, project_id)
    if await store.sessions.by_request_id(conn, project_id, request_id) is not None:
        return
    quota = await limits(conn, project_id)
    live = await store.sessions.count_live(conn, project_id)
    if live >= quota.live_sessions:
        raise QuotaExceeded(
            "live_sessions",
            quota.live_sessions,
            live,
            f"the project has {live} live sessions, its quota is {quota.live_sessions};"
            " archive or delete one to make room",
        )
    recent, leaves_in = await store.sessions.created_since(conn, project_id, RATE_WINDOW, quota.sessions_per_minute)
    if recent >= quota.sessions_per_minute:
        wait = f"; retry in {leaves_in.total_seconds():.1f} s" if leaves_in is not None else ""
        raise QuotaExceeded(
            "sessions_per_minute",
            quota.sessions_per_minute,
            recent,
            f"the project created {recent} sessions in the last minute, its quota is {quota.sessions_per_minute}{wait}",
            retry_after=leaves_in,
        )


async def check_message(conn: asyncpg.Connection, project_id: uuid.UUID, size: int, what: str) -> None:
    """Refuse a message or answer of `size` UTF-8 bytes beyond the project's message_bytes."""
    quota = (await limits(conn, project_id)).message_bytes
    if size > quota:
        raise QuotaExceeded(
            "message_bytes", quota, size, f"{what} is {size} bytes; the project's quota is {quota} bytes"
        )


class Quotas:
    """The quotas enforced outside a kernel transaction: uploads and running commands."""

    def __init__(self, pool: asyncpg.Pool, lease_ttl: timedelta = LEASE_TTL) -> None:
        self._pool = pool
        self._lease_ttl = lease_ttl

    async def upload_bytes(self, project_id: uuid.UUID) -> int:
        return (await limits(self._pool, project_id)).upload_bytes

    @contextlib.asynccontextmanager
    async def running_command(self, project_id: uuid.UUID, session_id: str) -> AsyncIterator[None]:
        """Hold one of the project's concurrent_commands while the context is open; QuotaExceeded
        when all are held (on any replica). Released however the context ends, cancellation
        included; if the release cannot reach the database, the lease lapses after the TTL."""
        lease_id = uuid.uuid4()
        async with self._pool.acquire() as conn, conn.transaction():
            await store.command_leases.lock_project(conn, project_id)
            quota = (await limits(conn, project_id)).concurrent_commands
            held = await store.command_leases.count_held(conn, project_id)
            if held >= quota:
                raise QuotaExceeded(
                    "concurrent_commands",
                    quota,
                    held,
                    f"the project runs {held} commands, its quota is {quota}; retry when one has ended",
                    retry_after=COMMAND_RETRY_AFTER,
                )
            await store.command_leases.insert(conn, lease_id, project_id, session_id, self._lease_ttl)
        renewing = asyncio.create_task(self._renew(lease_id))
        try:
            yield
        finally:
            renewing.cancel()
            await asyncio.wait([renewing])
            try:
                async with asyncio.timeout(_DB_TIMEOUT_S):
                    await store.command_leases.delete(self._pool, lease_id)
            except database.FAULTS as error:
                log.warning("command_lease_not_released", lease_id=str(lease_id), error=type(error).__name__)

    async def _renew(self, lease_id: uuid.UUID) -> None:
        while True:
            await asyncio.sleep(self._lease_ttl.total_seconds() / 3)
            try:
                async with asyncio.timeout(_DB_TIMEOUT_S):
                    if not await store.command_leases.renew(self._pool, lease_id, self._lease_ttl):
                        log.warning("command_lease_lapsed", lease_id=str(lease_id))
                        return
            except database.FAULTS as error:
                log.warning("command_lease_not_renewed", lease_id=str(lease_id), error=type(error).__name__)
