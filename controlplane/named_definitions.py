"""What a project's named, versioned definitions (agents, environments) share: their names and how a
request refers to one, version numbers, the canonical form a definition is stored and digested in,
the signed cursors of their listings, and their life in the database (`Definitions`: created
idempotently, read, listed, changed a version at a time, archived), over each kind's two tables.

The definitions differ in what they hold (`agent_definitions.specs`, `environments.specs`); they are
named, referred to, numbered, digested and paged alike, so that one rule serves both.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import asyncpg
import structlog
from google.protobuf.message import Message

from controlplane import validation
from controlplane.errors import InvalidArgument, KernelError, RequestIdReused
from controlplane.page_tokens import PageTokens
from controlplane.validation import echo

log = structlog.get_logger(__name__)

NAME = re.compile(r"[a-z][a-z0-9-]{0,63}")
NAME_RULE = "1-64 characters of [a-z0-9-], starting with a letter"
MAX_VERSION = 2**31 - 1
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500


def new_name(what: str, value: str) -> str:
    """A new definition's name: unique in its project, never of the form of an id (a UUID), so that
    a reference (`ref`) is either unambiguously. `what` is the kind ("agent", "environment")."""
    if not NAME.fullmatch(value) or as_id(value) is not None:
        raise InvalidArgument("name", f"an {what}'s name is {NAME_RULE}, and not a UUID; got {echo(value)}")
    return value


def ref(what: str, value: str, field: str) -> uuid.UUID | str:
    """What a request names a definition by: its id (a UUID) or its name."""
    if not value:
        raise InvalidArgument(field, f"{field} must name the {what}: its name or its id")
    found = as_id(value)
    if found is not None:
        return found
    if not NAME.fullmatch(value):
        raise InvalidArgument(
            field, f"{field} must be an {what}'s name ({NAME_RULE}) or id (a UUID), got {echo(value)}"
        )
    return value


def as_id(value: str) -> uuid.UUID | None:
    if len(value) > 64:  # uuid.UUID would take a braced or urn: form, never longer
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def version(field: str, value: int) -> int:
    """A version a request names: 0 (the newest) or a version number."""
    if not 0 <= value <= MAX_VERSION:
        raise InvalidArgument(field, f"{field} must be 0 (the newest) or a version number, got {value}")
    return value


def canonical(spec: Message) -> bytes:
    """The form a definition is stored and compared in: deterministic, without fields this version
    of the contract does not know (so equal definitions are equal whatever client wrote them)."""
    copy = type(spec)()
    copy.CopyFrom(spec)
    copy.DiscardUnknownFields()
    return copy.SerializeToString(deterministic=True)


def digest(canonical_form: bytes) -> str:
    """A version's spec_digest: the SHA-256 of the canonical form, hex."""
    return hashlib.sha256(canonical_form).hexdigest()


def same_request(what: str, request_id: str, made: tuple[str, str, str], asked: tuple[str, str]) -> None:
    """A create's retry: `made` is the (id, name, first version's spec digest) its request id made,
    `asked` the (name, spec digest) the retry asks for; another name or definition is RequestIdReused."""
    made_id, made_name, made_digest = made
    if (made_name, made_digest) != asked:
        raise RequestIdReused(
            f"request_id {echo(request_id)} was already used to create {what} {made_name}"
            " with another name or definition",
            {"request_id": request_id, f"{what}_id": made_id},
        )


def _page_size(value: int) -> int:
    return validation.page_size(value, default=DEFAULT_PAGE_SIZE, maximum=MAX_PAGE_SIZE)


class Pages:
    """The cursors of a kind's two listings: definitions by name, one definition's versions newest first."""

    def __init__(self, page_tokens: PageTokens, kind: str) -> None:
        self._tokens = page_tokens
        self._kind = kind

    def _scope(self, project_id: uuid.UUID, show_archived: bool) -> str:
        return f"{self._kind}s/{project_id}/{'all' if show_archived else 'active'}"

    def after_name(self, project_id: uuid.UUID, show_archived: bool, token: str) -> str:
        """The name a listing's page token resumes after ("" for the first page)."""
        value = self._read(self._scope(project_id, show_archived), token, "after", str)
        return value if isinstance(value, str) else ""

    def next_by_name(self, project_id: uuid.UUID, show_archived: bool, last_name: str | None) -> str:
        return self._tokens.issue(self._scope(project_id, show_archived), {"after": last_name}) if last_name else ""

    def before_version(self, definition_id: object, token: str) -> int | None:
        """The version a versions listing's page token resumes before (None for the first page)."""
        value = self._read(f"{self._kind}-versions/{definition_id}", token, "before", int)
        return value if isinstance(value, int) else None

    def next_by_version(self, definition_id: object, last_version: int | None) -> str:
        if last_version is None:
            return ""
        return self._tokens.issue(f"{self._kind}-versions/{definition_id}", {"before": last_version})

    def _read(self, scope: str, token: str, key: str, kind: type) -> object | None:
        if not token:
            return None
        validation.FIELDS["page_token"]("page_token", token)
        value = self._tokens.read(scope, token).get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise validation.page_token_invalid()
        return value


class DefinitionsTable(Protocol):
    """A kind's table of named definitions (`store.agent_definitions`, `store.environments`): every
    statement names the project."""

    async def insert(
        self, conn: asyncpg.Connection, definition_id: uuid.UUID, project_id: uuid.UUID, name: str, request_id: str
    ) -> asyncpg.Record | None: ...

    async def by_request_id(
        self, db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, request_id: str
    ) -> asyncpg.Record | None: ...

    async def find(
        self, db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, ref: uuid.UUID | str, lock: bool = False
    ) -> asyncpg.Record | None: ...

    async def page(
        self,
        db: asyncpg.Connection | asyncpg.Pool,
        project_id: uuid.UUID,
        after_name: str,
        show_archived: bool,
        limit: int,
    ) -> list[asyncpg.Record]: ...

    async def set_latest(self, conn: asyncpg.Connection, definition_id: uuid.UUID, version: int) -> asyncpg.Record: ...

    async def archive(self, conn: asyncpg.Connection, definition_id: uuid.UUID) -> asyncpg.Record: ...


class VersionsTable(Protocol):
    """A kind's table of immutable versions, reached through their definition."""

    async def get(
        self, db: asyncpg.Connection | asyncpg.Pool, definition_id: uuid.UUID, version: int
    ) -> asyncpg.Record | None: ...

    async def page(
        self, db: asyncpg.Connection | asyncpg.Pool, definition_id: uuid.UUID, before: int | None, limit: int
    ) -> list[asyncpg.Record]: ...


@dataclass(frozen=True, slots=True)
class Kind:
    """A kind of definition: what it is called, where it is kept, and its answers to a refusal."""

    name: str  # "agent": in messages and page tokens
    id_column: str  # "agent_id"
    log_name: str  # "agent_definition": log events are `<log_name>_created`, …
    definitions: DefinitionsTable
    versions: VersionsTable
    not_found: Callable[[str], KernelError]
    version_not_found: Callable[[str, int, int], KernelError]
    exists: Callable[[str], KernelError]
    archived: Callable[[str, str], KernelError]
    conflict: Callable[[str, int, int], KernelError]


# Stores a new version (number given) of the definition; the kind's own columns are its business.
InsertVersion = Callable[[asyncpg.Connection, uuid.UUID, int], Awaitable[asyncpg.Record]]
# A kind's check of a definition against what only the database knows (an agent's engines), made
# only when a version is about to be stored.
CheckIn = Callable[[asyncpg.Connection], Awaitable[None]]


async def _nothing_to_check(conn: asyncpg.Connection) -> None:
    return None


class Definitions:
    """The life of a kind's definitions, as rows: created with their first version (idempotent on
    the request id), read, listed, changed (a new version unless equal to the newest; a stale
    `expected_version` is the kind's conflict) and archived. Each change is one transaction on
    the definition's locked row, so versions are numbered without gaps and nothing is half-stored."""

    def __init__(self, pool: asyncpg.Pool, page_tokens: PageTokens, kind: Kind) -> None:
        self._pool = pool
        self._kind = kind
        self._pages = Pages(page_tokens, kind.name)

    def ref(self, value: str, field: str | None = None) -> uuid.UUID | str:
        return ref(self._kind.name, value, field or self._kind.name)

    async def create(
        self,
        project_id: uuid.UUID,
        request_id: str,
        name: str,
        digest_of_spec: str,
        insert_version: InsertVersion,
        check: CheckIn = _nothing_to_check,
    ) -> tuple[asyncpg.Record, asyncpg.Record]:
        """The new definition and its version 1 (or, for a retry, the ones the request made)."""
        kind = self._kind
        validation.client_id("request_id", request_id)
        new_name(kind.name, name)
        async with self._pool.acquire() as conn, conn.transaction():
            known = await kind.definitions.by_request_id(conn, project_id, request_id)
            if known is None:
                await check(conn)
                row = await kind.definitions.insert(conn, uuid.uuid4(), project_id, name, request_id)
                if row is not None:
                    first = await insert_version(conn, row[kind.id_column], 1)
                    log.info(f"{kind.log_name}_created", id=str(row[kind.id_column]), name=name)
                    return row, first
                # A concurrent create took the name, or the request id (a retry running alongside).
                known = await kind.definitions.by_request_id(conn, project_id, request_id)
                if known is None:
                    raise kind.exists(name)
            first = await kind.versions.get(conn, known[kind.id_column], 1)
            assert first is not None
            made = (str(known[kind.id_column]), known["name"], first["spec_digest"])
            same_request(kind.name, request_id, made, (name, digest_of_spec))
            return known, first

    async def read(
        self, project_id: uuid.UUID, key: uuid.UUID | str, number: int, conn: asyncpg.Connection | None = None
    ) -> tuple[asyncpg.Record, asyncpg.Record]:
        """The definition `key` (an id or a name) and its version `number` (0: the newest)."""
        kind, db = self._kind, conn or self._pool
        row = await kind.definitions.find(db, project_id, key)
        if row is None:
            raise kind.not_found(str(key))
        wanted = number or row["latest_version"]
        found = await kind.versions.get(db, row[kind.id_column], wanted)
        if found is None:
            raise kind.version_not_found(row["name"], wanted, row["latest_version"])
        return row, found

    async def page(
        self, project_id: uuid.UUID, page_size: int, page_token: str, show_archived: bool
    ) -> tuple[list[asyncpg.Record], str]:
        """A page of the project's definitions by name, and the next page's token."""
        size = _page_size(page_size)
        after = self._pages.after_name(project_id, show_archived, page_token)
        rows = await self._kind.definitions.page(self._pool, project_id, after, show_archived, size + 1)
        last = rows[size - 1]["name"] if len(rows) > size else None
        return rows[:size], self._pages.next_by_name(project_id, show_archived, last)

    async def update(
        self,
        project_id: uuid.UUID,
        value: str,
        digest_of_spec: str,
        expected_version: int,
        insert_version: InsertVersion,
        check: CheckIn = _nothing_to_check,
    ) -> tuple[asyncpg.Record, asyncpg.Record, bool]:
        """The definition, its newest version, and whether that was made now (not when equal to the
        newest); with `expected_version`, only if that is still the newest."""
        kind, key = self._kind, self.ref(value)
        version("expected_version", expected_version)
        async with self._pool.acquire() as conn, conn.transaction():
            row = await kind.definitions.find(conn, project_id, key, lock=True)
            if row is None:
                raise kind.not_found(value)
            if row["archived"]:
                raise kind.archived(row["name"], f"takes no new version (create another {kind.name})")
            latest = row["latest_version"]
            newest = await kind.versions.get(conn, row[kind.id_column], latest)
            assert newest is not None
            if newest["spec_digest"] == digest_of_spec:
                return row, newest, False
            if expected_version and expected_version != latest:
                raise kind.conflict(row["name"], expected_version, latest)
            await check(conn)
            made = await insert_version(conn, row[kind.id_column], latest + 1)
            changed = await kind.definitions.set_latest(conn, row[kind.id_column], latest + 1)
        log.info(f"{kind.log_name}_updated", id=str(row[kind.id_column]), version=latest + 1)
        return changed, made, True

    async def versions(
        self, project_id: uuid.UUID, value: str, page_size: int, page_token: str
    ) -> tuple[list[asyncpg.Record], str]:
        """A page of the definition's versions, newest first, and the next page's token."""
        kind, key = self._kind, self.ref(value)
        size = _page_size(page_size)
        row = await kind.definitions.find(self._pool, project_id, key)
        if row is None:
            raise kind.not_found(value)
        before = self._pages.before_version(row[kind.id_column], page_token)
        rows = await kind.versions.page(self._pool, row[kind.id_column], before, size + 1)
        last = rows[size - 1]["version"] if len(rows) > size else None
        return rows[:size], self._pages.next_by_version(row[kind.id_column], last)

    async def archive(self, project_id: uuid.UUID, value: str) -> asyncpg.Record:
        """Archive the definition: it starts no new session. Idempotent."""
        kind, key = self._kind, self.ref(value)
        async with self._pool.acquire() as conn, conn.transaction():
            row = await kind.definitions.find(conn, project_id, key, lock=True)
            if row is None:
                raise kind.not_found(value)
            if row["archived"]:
                return row
            archived = await kind.definitions.archive(conn, row[kind.id_column])
        log.info(f"{kind.log_name}_archived", id=str(row[kind.id_column]))
        return archived
