"""MemoryService from a client: a project's memory stores of versioned text documents
(`client.memory`), and attaching them to sessions.

    await client.memory.create("team-notes", description="what the reviewers learned")
    await client.memory.write("team-notes", "conventions.md", "Use ruff.")
    session = await client.create_session(memory=[attach("team-notes", "read-write")])
    # the session's sandbox has /home/agent/memory/team-notes/conventions.md before its first turn;
    # what a turn changes there is written back as new versions when the turn ends
    async for version in client.memory.versions("team-notes"):   # the audit trail, newest first
        print(version.path, version.version, version.writer, version.session_id, version.turn_id)
    await client.memory.restore("team-notes", yesterday)       # new versions equal to then

Every call has the client's deadline and is retried while the server is away: creates and restores
carry a request id, and a write's retry finds its content already there and writes nothing.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

import grpc
from google.protobuf import timestamp_pb2

from astrabox._definition_calls import pages
from astrabox.administration import Unary
from astrabox.memory.v1 import memory_service_pb2 as api
from astrabox.memory.v1 import memory_service_pb2_grpc as api_grpc

__all__ = ["MODES", "MemoryDocument", "MemoryStore", "MemoryStores", "attach"]

MODES = {"read-only": api.MEMORY_MODE_READ_ONLY, "read-write": api.MEMORY_MODE_READ_WRITE}
"""The attachment modes by their short names (`attach(...)`, the CLI's --memory STORE[:MODE])."""


def attach(store: str, mode: str = "read-only") -> api.MemoryAttachment:
    """A `CreateSessionRequest.memory` entry: the store's name or id, "read-only" or "read-write"."""
    return api.MemoryAttachment(store=store, mode=MODES[mode])


def _time(value: timestamp_pb2.Timestamp) -> datetime:
    return value.ToDatetime(tzinfo=UTC)


def _stamp(value: datetime) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(value if value.tzinfo else value.replace(tzinfo=UTC))
    return stamp


@dataclass(frozen=True, slots=True)
class MemoryStore:
    """A store as the server keeps it (`MemoryStore` in memory_service.proto)."""

    store_id: str
    name: str
    project_id: str
    description: str
    document_count: int
    create_time: datetime
    update_time: datetime

    @classmethod
    def from_proto(cls, message: api.MemoryStore) -> MemoryStore:
        """From the `MemoryStore` message the server sent."""
        return cls(
            message.store_id,
            message.name,
            message.project_id,
            message.description,
            message.document_count,
            _time(message.create_time),
            _time(message.update_time),
        )


@dataclass(frozen=True, slots=True)
class MemoryDocument:
    """One version of a document (`MemoryDocument`); `content` is empty in lists."""

    store_id: str
    path: str
    version: int
    content: str
    deleted: bool
    size_bytes: int
    sha256: str
    writer: str
    """The calling principal (key:ID, oidc:SUBJECT), or "session" for a session's turn."""
    session_id: str
    turn_id: str
    conflicting_version: int
    """A version of another writer this one replaced without having seen it; 0: none."""
    restored_from_time: datetime | None
    create_time: datetime

    @classmethod
    def from_proto(cls, message: api.MemoryDocument) -> MemoryDocument:
        """From the `MemoryDocument` message the server sent."""
        return cls(
            message.store_id,
            message.path,
            message.version,
            message.content,
            message.deleted,
            message.size_bytes,
            message.sha256,
            message.writer,
            message.session_id,
            message.turn_id,
            message.conflicting_version,
            _time(message.restored_from_time) if message.HasField("restored_from_time") else None,
            _time(message.create_time),
        )


class MemoryStores:
    """MemoryService's calls; made by `AstraBoxClient.memory`. `store` arguments take a store's
    name or its id."""

    def __init__(self, channel: grpc.aio.Channel, unary: Unary) -> None:
        self._stub = api_grpc.MemoryServiceStub(channel)  # type: ignore[no-untyped-call]
        self._unary = unary

    async def create(self, name: str, *, description: str = "", request_id: str | None = None) -> MemoryStore:
        """A new store `name`. Idempotent on `request_id` (a new uuid4 by default)."""
        request = api.CreateMemoryStoreRequest(
            request_id=request_id or str(uuid.uuid4()), name=name, description=description
        )
        response: api.CreateMemoryStoreResponse = await self._unary(self._stub.CreateMemoryStore, request)
        return MemoryStore.from_proto(response.store)

    async def get(self, store: str) -> MemoryStore:
        """The store (NOT_FOUND, MEMORY_STORE_NOT_FOUND when the project has none of that name or id)."""
        response: api.GetMemoryStoreResponse = await self._unary(
            self._stub.GetMemoryStore, api.GetMemoryStoreRequest(store=store)
        )
        return MemoryStore.from_proto(response.store)

    async def list(self, *, page_size: int = 0) -> AsyncIterator[MemoryStore]:
        """Every store of the project, by name."""

        async def read(token: str) -> api.ListMemoryStoresResponse:
            request = api.ListMemoryStoresRequest(page_size=page_size, page_token=token)
            page: api.ListMemoryStoresResponse = await self._unary(self._stub.ListMemoryStores, request)
            return page

        async for item in pages(read, lambda page: page.stores):
            yield MemoryStore.from_proto(item)

    async def delete(self, store: str) -> MemoryStore:
        """Deletes the store with its documents and history; the store as it was."""
        response: api.DeleteMemoryStoreResponse = await self._unary(
            self._stub.DeleteMemoryStore, api.DeleteMemoryStoreRequest(store=store)
        )
        return MemoryStore.from_proto(response.store)

    async def write(
        self, store: str, path: str, content: str, *, expected_version: int | None = None
    ) -> MemoryDocument:
        """Writes the document as a new version (without content in the answer); with
        `expected_version` only if that is its latest (0: it must not exist), else ABORTED,
        MEMORY_VERSION_CONFLICT."""
        request = api.WriteMemoryDocumentRequest(store=store, path=path, content=content)
        if expected_version is not None:
            request.expected_version = expected_version
        response: api.WriteMemoryDocumentResponse = await self._unary(self._stub.WriteMemoryDocument, request)
        return MemoryDocument.from_proto(response.document)

    async def delete_document(self, store: str, path: str, *, expected_version: int | None = None) -> MemoryDocument:
        """Deletes the document: a new version marked deleted."""
        request = api.DeleteMemoryDocumentRequest(store=store, path=path)
        if expected_version is not None:
            request.expected_version = expected_version
        response: api.DeleteMemoryDocumentResponse = await self._unary(self._stub.DeleteMemoryDocument, request)
        return MemoryDocument.from_proto(response.document)

    async def read(self, store: str, path: str, *, version: int = 0, at: datetime | None = None) -> MemoryDocument:
        """The document with its content: its latest version, `version`, or the one latest `at`."""
        request = api.GetMemoryDocumentRequest(store=store, path=path, version=version)
        if at is not None:
            request.read_time.CopyFrom(_stamp(at))
        response: api.GetMemoryDocumentResponse = await self._unary(self._stub.GetMemoryDocument, request)
        return MemoryDocument.from_proto(response.document)

    async def documents(
        self, store: str, *, at: datetime | None = None, page_size: int = 0
    ) -> AsyncIterator[MemoryDocument]:
        """The store's documents by path (without content), now or as they were `at`."""

        async def read(token: str) -> api.ListMemoryDocumentsResponse:
            request = api.ListMemoryDocumentsRequest(store=store, page_size=page_size, page_token=token)
            if at is not None:
                request.read_time.CopyFrom(_stamp(at))
            page: api.ListMemoryDocumentsResponse = await self._unary(self._stub.ListMemoryDocuments, request)
            return page

        async for item in pages(read, lambda page: page.documents):
            yield MemoryDocument.from_proto(item)

    async def versions(self, store: str, path: str = "", *, page_size: int = 0) -> AsyncIterator[MemoryDocument]:
        """The store's versions (of `path` when given), newest first: who wrote what, when."""

        async def read(token: str) -> api.ListMemoryDocumentVersionsResponse:
            request = api.ListMemoryDocumentVersionsRequest(
                store=store, path=path, page_size=page_size, page_token=token
            )
            page: api.ListMemoryDocumentVersionsResponse = await self._unary(
                self._stub.ListMemoryDocumentVersions, request
            )
            return page

        async for item in pages(read, lambda page: page.versions):
            yield MemoryDocument.from_proto(item)

    async def restore(
        self, store: str, at: datetime, *, request_id: str | None = None
    ) -> tuple[MemoryStore, builtins.list[MemoryDocument]]:
        """Makes the store what it was `at` by writing new versions; the store and those versions."""
        request = api.RestoreMemoryStoreRequest(
            request_id=request_id or str(uuid.uuid4()), store=store, restore_time=_stamp(at)
        )
        response: api.RestoreMemoryStoreResponse = await self._unary(self._stub.RestoreMemoryStore, request)
        return MemoryStore.from_proto(response.store), [MemoryDocument.from_proto(d) for d in response.written]
