import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MemoryMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMORY_MODE_UNSPECIFIED: _ClassVar[MemoryMode]
    MEMORY_MODE_READ_ONLY: _ClassVar[MemoryMode]
    MEMORY_MODE_READ_WRITE: _ClassVar[MemoryMode]
MEMORY_MODE_UNSPECIFIED: MemoryMode
MEMORY_MODE_READ_ONLY: MemoryMode
MEMORY_MODE_READ_WRITE: MemoryMode

class MemoryAttachment(_message.Message):
    __slots__ = ("store", "mode")
    STORE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    store: str
    mode: MemoryMode
    def __init__(self, store: _Optional[str] = ..., mode: _Optional[_Union[MemoryMode, str]] = ...) -> None: ...

class MemoryStore(_message.Message):
    __slots__ = ("store_id", "name", "project_id", "description", "document_count", "create_time", "update_time")
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    store_id: str
    name: str
    project_id: str
    description: str
    document_count: int
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, store_id: _Optional[str] = ..., name: _Optional[str] = ..., project_id: _Optional[str] = ..., description: _Optional[str] = ..., document_count: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class MemoryDocument(_message.Message):
    __slots__ = ("store_id", "path", "version", "content", "deleted", "size_bytes", "sha256", "writer", "session_id", "turn_id", "conflict", "conflicting_version", "restored_from_time", "create_time")
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    WRITER_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_FIELD_NUMBER: _ClassVar[int]
    CONFLICTING_VERSION_FIELD_NUMBER: _ClassVar[int]
    RESTORED_FROM_TIME_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
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
    conflict: bool
    conflicting_version: int
    restored_from_time: _timestamp_pb2.Timestamp
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, store_id: _Optional[str] = ..., path: _Optional[str] = ..., version: _Optional[int] = ..., content: _Optional[str] = ..., deleted: _Optional[bool] = ..., size_bytes: _Optional[int] = ..., sha256: _Optional[str] = ..., writer: _Optional[str] = ..., session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., conflict: _Optional[bool] = ..., conflicting_version: _Optional[int] = ..., restored_from_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateMemoryStoreRequest(_message.Message):
    __slots__ = ("request_id", "name", "description")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    name: str
    description: str
    def __init__(self, request_id: _Optional[str] = ..., name: _Optional[str] = ..., description: _Optional[str] = ...) -> None: ...

class CreateMemoryStoreResponse(_message.Message):
    __slots__ = ("store",)
    STORE_FIELD_NUMBER: _ClassVar[int]
    store: MemoryStore
    def __init__(self, store: _Optional[_Union[MemoryStore, _Mapping]] = ...) -> None: ...

class GetMemoryStoreRequest(_message.Message):
    __slots__ = ("store",)
    STORE_FIELD_NUMBER: _ClassVar[int]
    store: str
    def __init__(self, store: _Optional[str] = ...) -> None: ...

class GetMemoryStoreResponse(_message.Message):
    __slots__ = ("store",)
    STORE_FIELD_NUMBER: _ClassVar[int]
    store: MemoryStore
    def __init__(self, store: _Optional[_Union[MemoryStore, _Mapping]] = ...) -> None: ...

class ListMemoryStoresRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListMemoryStoresResponse(_message.Message):
    __slots__ = ("stores", "next_page_token")
    STORES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    stores: _containers.RepeatedCompositeFieldContainer[MemoryStore]
    next_page_token: str
    def __init__(self, stores: _Optional[_Iterable[_Union[MemoryStore, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteMemoryStoreRequest(_message.Message):
    __slots__ = ("store",)
    STORE_FIELD_NUMBER: _ClassVar[int]
    store: str
    def __init__(self, store: _Optional[str] = ...) -> None: ...

class DeleteMemoryStoreResponse(_message.Message):
    __slots__ = ("store",)
    STORE_FIELD_NUMBER: _ClassVar[int]
    store: MemoryStore
    def __init__(self, store: _Optional[_Union[MemoryStore, _Mapping]] = ...) -> None: ...

class WriteMemoryDocumentRequest(_message.Message):
    __slots__ = ("store", "path", "content", "expected_version")
    STORE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    store: str
    path: str
    content: str
    expected_version: int
    def __init__(self, store: _Optional[str] = ..., path: _Optional[str] = ..., content: _Optional[str] = ..., expected_version: _Optional[int] = ...) -> None: ...

class WriteMemoryDocumentResponse(_message.Message):
    __slots__ = ("document",)
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    document: MemoryDocument
    def __init__(self, document: _Optional[_Union[MemoryDocument, _Mapping]] = ...) -> None: ...

class DeleteMemoryDocumentRequest(_message.Message):
    __slots__ = ("store", "path", "expected_version")
    STORE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    store: str
    path: str
    expected_version: int
    def __init__(self, store: _Optional[str] = ..., path: _Optional[str] = ..., expected_version: _Optional[int] = ...) -> None: ...

class DeleteMemoryDocumentResponse(_message.Message):
    __slots__ = ("document",)
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    document: MemoryDocument
    def __init__(self, document: _Optional[_Union[MemoryDocument, _Mapping]] = ...) -> None: ...

class GetMemoryDocumentRequest(_message.Message):
    __slots__ = ("store", "path", "version", "read_time")
    STORE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    READ_TIME_FIELD_NUMBER: _ClassVar[int]
    store: str
    path: str
    version: int
    read_time: _timestamp_pb2.Timestamp
    def __init__(self, store: _Optional[str] = ..., path: _Optional[str] = ..., version: _Optional[int] = ..., read_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetMemoryDocumentResponse(_message.Message):
    __slots__ = ("document",)
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    document: MemoryDocument
    def __init__(self, document: _Optional[_Union[MemoryDocument, _Mapping]] = ...) -> None: ...

class ListMemoryDocumentsRequest(_message.Message):
    __slots__ = ("store", "read_time", "page_size", "page_token")
    STORE_FIELD_NUMBER: _ClassVar[int]
    READ_TIME_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    store: str
    read_time: _timestamp_pb2.Timestamp
    page_size: int
    page_token: str
    def __init__(self, store: _Optional[str] = ..., read_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListMemoryDocumentsResponse(_message.Message):
    __slots__ = ("documents", "next_page_token")
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    documents: _containers.RepeatedCompositeFieldContainer[MemoryDocument]
    next_page_token: str
    def __init__(self, documents: _Optional[_Iterable[_Union[MemoryDocument, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListMemoryDocumentVersionsRequest(_message.Message):
    __slots__ = ("store", "path", "page_size", "page_token")
    STORE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    store: str
    path: str
    page_size: int
    page_token: str
    def __init__(self, store: _Optional[str] = ..., path: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListMemoryDocumentVersionsResponse(_message.Message):
    __slots__ = ("versions", "next_page_token")
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedCompositeFieldContainer[MemoryDocument]
    next_page_token: str
    def __init__(self, versions: _Optional[_Iterable[_Union[MemoryDocument, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RestoreMemoryStoreRequest(_message.Message):
    __slots__ = ("request_id", "store", "restore_time")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    RESTORE_TIME_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    store: str
    restore_time: _timestamp_pb2.Timestamp
    def __init__(self, request_id: _Optional[str] = ..., store: _Optional[str] = ..., restore_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RestoreMemoryStoreResponse(_message.Message):
    __slots__ = ("store", "written")
    STORE_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_FIELD_NUMBER: _ClassVar[int]
    store: MemoryStore
    written: _containers.RepeatedCompositeFieldContainer[MemoryDocument]
    def __init__(self, store: _Optional[_Union[MemoryStore, _Mapping]] = ..., written: _Optional[_Iterable[_Union[MemoryDocument, _Mapping]]] = ...) -> None: ...
