"""MemoryService: protobuf in, `MemoryStores` calls within the caller's project, protobuf out.

Like ScheduleService its requests are bounded here and in `stores`, not by the edge's table of
fields (`controlplane.validation.FIELDS`).
"""

from __future__ import annotations

from datetime import UTC, datetime

import grpc
from google.protobuf import timestamp_pb2

from astrabox.memory.v1 import memory_service_pb2 as pb
from astrabox.memory.v1 import memory_service_pb2_grpc as pb_grpc
from controlplane.convert import timestamp
from controlplane.errors import InvalidArgument
from controlplane.identity import callers
from controlplane.memory.stores import DocumentRecord, MemoryStores, StoreRecord
from controlplane.status import maps_errors


def store_to_proto(record: StoreRecord) -> pb.MemoryStore:
    return pb.MemoryStore(
        store_id=record.store_id,
        name=record.name,
        project_id=str(record.project_id),
        description=record.description,
        document_count=record.document_count,
        create_time=timestamp(record.created_at),
        update_time=timestamp(record.updated_at),
    )


def document_to_proto(record: DocumentRecord, content: bool = False) -> pb.MemoryDocument:
    document = pb.MemoryDocument(
        store_id=record.store_id,
        path=record.path,
        version=record.version,
        content=record.content if content else "",
        deleted=record.deleted,
        size_bytes=record.size_bytes,
        sha256=record.sha256,
        writer=record.writer,
        session_id=record.session_id,
        turn_id=record.turn_id,
        conflict=bool(record.conflicting_version),
        conflicting_version=record.conflicting_version,
        create_time=timestamp(record.created_at),
    )
    if record.restored_from is not None:
        document.restored_from_time.CopyFrom(timestamp(record.restored_from))
    return document


def _time(value: timestamp_pb2.Timestamp, present: bool) -> datetime | None:
    return value.ToDatetime(tzinfo=UTC) if present else None


class MemoryServicer(pb_grpc.MemoryServiceServicer):
    def __init__(self, stores: MemoryStores) -> None:
        self._stores = stores

    @maps_errors
    async def CreateMemoryStore(
        self, request: pb.CreateMemoryStoreRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateMemoryStoreResponse:
        record = await self._stores.create(
            callers.current().project_id, request.request_id, request.name, request.description
        )
        return pb.CreateMemoryStoreResponse(store=store_to_proto(record))

    @maps_errors
    async def GetMemoryStore(
        self, request: pb.GetMemoryStoreRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetMemoryStoreResponse:
        record = await self._stores.get(callers.current().project_id, request.store)
        return pb.GetMemoryStoreResponse(store=store_to_proto(record))

    @maps_errors
    async def ListMemoryStores(
        self, request: pb.ListMemoryStoresRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListMemoryStoresResponse:
        found, token = await self._stores.list_stores(
            callers.current().project_id, request.page_size, request.page_token
        )
        return pb.ListMemoryStoresResponse(stores=[store_to_proto(s) for s in found], next_page_token=token)

    @maps_errors
    async def DeleteMemoryStore(
        self, request: pb.DeleteMemoryStoreRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteMemoryStoreResponse:
        record = await self._stores.delete(callers.current().project_id, request.store)
        return pb.DeleteMemoryStoreResponse(store=store_to_proto(record))

    @maps_errors
    async def WriteMemoryDocument(
        self, request: pb.WriteMemoryDocumentRequest, context: grpc.aio.ServicerContext
    ) -> pb.WriteMemoryDocumentResponse:
        caller = callers.current()
        expected = request.expected_version if request.HasField("expected_version") else None
        record = await self._stores.write(
            caller.project_id, request.store, request.path, request.content, expected, caller.who
        )
        return pb.WriteMemoryDocumentResponse(document=document_to_proto(record))

    @maps_errors
    async def DeleteMemoryDocument(
        self, request: pb.DeleteMemoryDocumentRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteMemoryDocumentResponse:
        caller = callers.current()
        expected = request.expected_version if request.HasField("expected_version") else None
        record = await self._stores.write(caller.project_id, request.store, request.path, None, expected, caller.who)
        return pb.DeleteMemoryDocumentResponse(document=document_to_proto(record))

    @maps_errors
    async def GetMemoryDocument(
        self, request: pb.GetMemoryDocumentRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetMemoryDocumentResponse:
        record = await self._stores.document(
            callers.current().project_id,
            request.store,
            request.path,
            request.version,
            _time(request.read_time, request.HasField("read_time")),
        )
        return pb.GetMemoryDocumentResponse(document=document_to_proto(record, content=True))

    @maps_errors
    async def ListMemoryDocuments(
        self, request: pb.ListMemoryDocumentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListMemoryDocumentsResponse:
        found, token = await self._stores.documents(
            callers.current().project_id,
            request.store,
            _time(request.read_time, request.HasField("read_time")),
            request.page_size,
            request.page_token,
        )
        return pb.ListMemoryDocumentsResponse(documents=[document_to_proto(d) for d in found], next_page_token=token)

    @maps_errors
    async def ListMemoryDocumentVersions(
        self, request: pb.ListMemoryDocumentVersionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListMemoryDocumentVersionsResponse:
        found, token = await self._stores.versions(
            callers.current().project_id, request.store, request.path, request.page_size, request.page_token
        )
        return pb.ListMemoryDocumentVersionsResponse(
            versions=[document_to_proto(d) for d in found], next_page_token=token
        )

    @maps_errors
    async def RestoreMemoryStore(
        self, request: pb.RestoreMemoryStoreRequest, context: grpc.aio.ServicerContext
    ) -> pb.RestoreMemoryStoreResponse:
        caller = callers.current()
        at = _time(request.restore_time, request.HasField("restore_time"))
        if at is None:
            raise InvalidArgument("restore_time", "restore_time is required: the time whose state to restore")
        record, written = await self._stores.restore(
            caller.project_id, request.request_id, request.store, at, caller.who
        )
        return pb.RestoreMemoryStoreResponse(
            store=store_to_proto(record), written=[document_to_proto(d) for d in written]
        )
