"""A project's memory stores and their versioned documents; what a session mounts of them and what
its turns write back.

Writes to one store take turns under its row lock: a version number is the path's newest plus one
and the count of live documents is right when a new one is added. A session's turn writes back only
the stores it attached READ_WRITE (`sync`), each change attributed to the session and the turn; a
change over a version the session never saw (another writer's, since its copy was taken) is kept:
the session's version becomes the latest and names the one it replaced (`conflicting_version`), so
both stay in the history and the journal's MEMORY_SYNCED event reports it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg

from controlplane import named_definitions, store, validation
from controlplane.errors import (
    InvalidArgument,
    MemoryDocumentLimitReached,
    MemoryDocumentNotFound,
    MemoryStoreExists,
    MemoryStoreFull,
    MemoryStoreLimitReached,
    MemoryStoreNotFound,
    MemoryVersionConflict,
    RequestIdReused,
)
from controlplane.memory import paths
from controlplane.page_tokens import PageTokens
from controlplane.store.memory_versions import NewVersion

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 500
MAX_DESCRIPTION_BYTES = 1024


@dataclass(frozen=True, slots=True)
class Limits:
    # Memory stores a project may have.
    per_project: int = 100
    # Documents (not deleted) a store may hold.
    documents_per_store: int = 500
    # The largest document, in bytes of UTF-8.
    document_bytes: int = 256 * 1024
    # The bytes a store's documents may hold together (a session's start carries them all).
    store_bytes: int = 2 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class StoreRecord:
    store_id: str
    project_id: uuid.UUID
    name: str
    description: str
    document_count: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class DocumentRecord:
    store_id: str
    path: str
    version: int
    content: str
    deleted: bool
    size_bytes: int
    sha256: str
    writer: str
    session_id: str
    turn_id: str
    conflicting_version: int
    restored_from: datetime | None
    created_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> DocumentRecord:
        return cls(
            str(row["store_id"]),
            row["path"],
            row["version"],
            row["content"],
            row["deleted"],
            row["size_bytes"] or 0,
            row["sha256"],
            row["writer"],
            str(row["session_id"] or ""),
            row["turn_id"],
            row["conflicting_version"],
            row["restored_from"],
            row["created_at"],
        )


@dataclass(frozen=True, slots=True)
class Attachment:
    """A store a session attached (CreateSessionRequest.memory), resolved in its project."""

    store_id: uuid.UUID
    name: str
    read_write: bool


def store_name(value: str) -> str:
    if not named_definitions.NAME.fullmatch(value) or named_definitions.as_id(value) is not None:
        raise InvalidArgument(
            "name", f"a memory store's name is {named_definitions.NAME_RULE}; got {validation.echo(value)}"
        )
    return value


def _time(field: str, value: datetime | None) -> datetime | None:
    if value is not None and value > datetime.now(UTC):
        raise InvalidArgument(field, f"{field} {value.isoformat()} is in the future")
    return value


async def put(
    conn: asyncpg.Connection, store_id: uuid.UUID, latest: asyncpg.Record | None, new: NewVersion, limits: Limits
) -> asyncpg.Record:
    """Insert `new` after `latest` (the path's newest version, or None) under the store's lock;
    `latest` itself when it holds the same. MemoryDocumentLimitReached or MemoryStoreFull when the
    store would pass its bounds."""
    if latest is not None and latest["deleted"] == new.deleted and latest["sha256"] == new.sha256:
        return latest
    alive = latest is not None and not latest["deleted"]
    if not new.deleted:
        if not alive and await store.memory_versions.live_count(conn, store_id) >= limits.documents_per_store:
            raise MemoryDocumentLimitReached(limits.documents_per_store)
        replaced = latest["size_bytes"] if alive and latest is not None else 0
        total = await store.memory_versions.live_bytes(conn, store_id) - replaced + len(new.content.encode())
        if total > limits.store_bytes:
            raise MemoryStoreFull(limits.store_bytes, total)
    version = (latest["version"] if latest is not None else 0) + 1
    written = await store.memory_versions.insert(conn, store_id, version, new)
    await store.memory_stores.touch(conn, store_id)
    return written


class MemoryStores:
    def __init__(self, pool: asyncpg.Pool, page_tokens: PageTokens, limits: Limits = Limits()) -> None:
        self._pool = pool
        self._tokens = page_tokens
        self._limits = limits

    async def _record(self, conn: asyncpg.Connection | asyncpg.Pool, row: asyncpg.Record) -> StoreRecord:
        count = await store.memory_versions.live_count(conn, row["store_id"])
        return StoreRecord(
            str(row["store_id"]),
            row["project_id"],
            row["name"],
            row["description"],
            count,
            row["created_at"],
            row["updated_at"],
        )

    async def _find(self, db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, ref: str) -> asyncpg.Record:
        found = named_definitions.ref("memory store", ref, "store")
        row = await store.memory_stores.find(db, project_id, found, lock=isinstance(db, asyncpg.Connection))
        if row is None:
            raise MemoryStoreNotFound(ref)
        return row

    async def create(self, project_id: uuid.UUID, request_id: str, name: str, description: str) -> StoreRecord:
        validation.client_id("request_id", request_id)
        store_name(name)
        if len(description.encode()) > MAX_DESCRIPTION_BYTES:
            raise InvalidArgument("description", f"description is at most {MAX_DESCRIPTION_BYTES} bytes")
        async with self._pool.acquire() as conn, conn.transaction():
            await store.memory_stores.lock_project(conn, project_id)
            known = await store.memory_stores.by_request_id(conn, project_id, request_id)
            if known is not None:
                if (known["name"], known["description"]) != (name, description):
                    raise RequestIdReused(
                        f"request_id {validation.echo(request_id)} was already used to create memory store"
                        f" {known['name']} with another name or description",
                        {"request_id": request_id, "store_id": str(known["store_id"])},
                    )
                return await self._record(conn, known)
            if await store.memory_stores.count(conn, project_id) >= self._limits.per_project:
                raise MemoryStoreLimitReached(self._limits.per_project)
            row = await store.memory_stores.insert(conn, uuid.uuid4(), project_id, name, description, request_id)
            if row is None:
                raise MemoryStoreExists(name)
            return await self._record(conn, row)

    async def get(self, project_id: uuid.UUID, ref: str) -> StoreRecord:
        return await self._record(self._pool, await self._find(self._pool, project_id, ref))

    async def list_stores(
        self, project_id: uuid.UUID, page_size: int, page_token: str
    ) -> tuple[list[StoreRecord], str]:
        size = validation.page_size(page_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        scope = f"memory-stores/{project_id}"
        after = str(self._tokens.read(scope, page_token).get("after", "")) if page_token else ""
        rows = await store.memory_stores.page(self._pool, project_id, after, size + 1)
        records = [await self._record(self._pool, row) for row in rows[:size]]
        token = self._tokens.issue(scope, {"after": records[-1].name}) if len(rows) > size else ""
        return records, token

    async def delete(self, project_id: uuid.UUID, ref: str) -> StoreRecord:
        async with self._pool.acquire() as conn, conn.transaction():
            row = await self._find(conn, project_id, ref)
            record = await self._record(conn, row)
            await store.memory_stores.delete(conn, row["store_id"])
        return record

    async def write(
        self, project_id: uuid.UUID, ref: str, path: str, content: str | None, expected: int | None, writer: str
    ) -> DocumentRecord:
        """Write (or, with `content` None, delete) one document as a new version; the latest version
        unchanged when it holds the same already."""
        paths.document_path(path)
        text = None if content is None else paths.text(content, self._limits.document_bytes)
        async with self._pool.acquire() as conn, conn.transaction():
            row = await self._find(conn, project_id, ref)
            latest = await store.memory_versions.latest(conn, row["store_id"], path)
            latest_version = 0 if latest is None or latest["deleted"] else latest["version"]
            if expected is not None and expected != latest_version:
                raise MemoryVersionConflict(path, expected, latest_version)
            if text is None and latest_version == 0:
                raise MemoryDocumentNotFound(row["name"], path)
            new = NewVersion(path, text or "", text is None, paths.sha256(text) if text is not None else "", writer)
            return DocumentRecord.from_row(await put(conn, row["store_id"], latest, new, self._limits))

    async def document(
        self, project_id: uuid.UUID, ref: str, path: str, version: int, at: datetime | None
    ) -> DocumentRecord:
        paths.document_path(path)
        if version and at is not None:
            raise InvalidArgument("read_time", "name a version or a read_time, not both")
        if version < 0:
            raise InvalidArgument("version", f"version must be 0 (the latest) or a version, got {version}")
        row = await self._find(self._pool, project_id, ref)
        if version:
            found = await store.memory_versions.one(self._pool, row["store_id"], path, version)
            what = f" at version {version}"
        else:
            found = await store.memory_versions.latest(self._pool, row["store_id"], path, _time("read_time", at))
            what = f" at {at.isoformat()}" if at is not None else ""
            if found is not None and found["deleted"]:
                found = None
        if found is None:
            raise MemoryDocumentNotFound(row["name"], path, what)
        return DocumentRecord.from_row(found)

    async def documents(
        self, project_id: uuid.UUID, ref: str, at: datetime | None, page_size: int, page_token: str
    ) -> tuple[list[DocumentRecord], str]:
        size = validation.page_size(page_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        row = await self._find(self._pool, project_id, ref)
        scope = f"memory-documents/{row['store_id']}/{at.isoformat() if at else ''}"
        after = str(self._tokens.read(scope, page_token).get("after", "")) if page_token else ""
        rows = await store.memory_versions.state(
            self._pool, row["store_id"], _time("read_time", at), content=False, after=after, limit=size + 1
        )
        records = [DocumentRecord.from_row(r) for r in rows[:size]]
        token = self._tokens.issue(scope, {"after": records[-1].path}) if len(rows) > size else ""
        return records, token

    async def versions(
        self, project_id: uuid.UUID, ref: str, path: str, page_size: int, page_token: str
    ) -> tuple[list[DocumentRecord], str]:
        """The store's versions (of `path` when given), newest first: its audit trail."""
        if path:
            paths.document_path(path)
        size = validation.page_size(page_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        row = await self._find(self._pool, project_id, ref)
        scope = f"memory-versions/{row['store_id']}/{path}"
        before = None
        if page_token:
            cursor = self._tokens.read(scope, page_token)
            try:
                before = (datetime.fromisoformat(str(cursor["at"])), str(cursor["path"]), int(str(cursor["version"])))
            except (KeyError, ValueError):
                raise validation.page_token_invalid() from None
        rows = await store.memory_versions.history(self._pool, row["store_id"], path, before, size + 1)
        records = [DocumentRecord.from_row(r) for r in rows[:size]]
        token = ""
        if len(rows) > size:
            last = records[-1]
            token = self._tokens.issue(
                scope, {"at": last.created_at.isoformat(), "path": last.path, "version": last.version}
            )
        return records, token

    async def restore(
        self, project_id: uuid.UUID, request_id: str, ref: str, at: datetime, writer: str
    ) -> tuple[StoreRecord, list[DocumentRecord]]:
        """New versions making every document what it was at `at` (absent then: deleted now)."""
        validation.client_id("request_id", request_id)
        _time("restore_time", at)
        async with self._pool.acquire() as conn, conn.transaction():
            row = await self._find(conn, project_id, ref)
            store_id = row["store_id"]
            done = await store.memory_versions.restored(conn, store_id, request_id)
            if done is not None:
                return await self._record(conn, row), [DocumentRecord.from_row(r) for r in done]
            then = {r["path"]: r for r in await store.memory_versions.state(conn, store_id, at, content=True)}
            now = {r["path"]: r for r in await store.memory_versions.all_paths(conn, store_id)}
            written = []
            for path in sorted(set(then) | set(now)):
                old, latest = then.get(path), now.get(path)
                new = NewVersion(
                    path,
                    old["content"] if old is not None else "",
                    old is None,
                    old["sha256"] if old is not None else "",
                    writer,
                    restored_from=at,
                    restore_request_id=request_id,
                )
                if latest is not None and latest["deleted"] and new.deleted:
                    continue
                done = await put(conn, store_id, latest, new, self._limits)
                if done is not latest:
                    written.append(DocumentRecord.from_row(done))
            return await self._record(conn, await store.memory_stores.touch(conn, store_id)), written
