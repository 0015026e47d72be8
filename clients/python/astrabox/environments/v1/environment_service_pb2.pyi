from astrabox.environments.v1 import environment_pb2 as _environment_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateEnvironmentRequest(_message.Message):
    __slots__ = ("request_id", "name", "spec")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    name: str
    spec: _environment_pb2.EnvironmentSpec
    def __init__(self, request_id: _Optional[str] = ..., name: _Optional[str] = ..., spec: _Optional[_Union[_environment_pb2.EnvironmentSpec, _Mapping]] = ...) -> None: ...

class CreateEnvironmentResponse(_message.Message):
    __slots__ = ("environment", "version")
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    environment: _environment_pb2.Environment
    version: _environment_pb2.EnvironmentVersion
    def __init__(self, environment: _Optional[_Union[_environment_pb2.Environment, _Mapping]] = ..., version: _Optional[_Union[_environment_pb2.EnvironmentVersion, _Mapping]] = ...) -> None: ...

class GetEnvironmentRequest(_message.Message):
    __slots__ = ("environment", "version")
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    environment: str
    version: int
    def __init__(self, environment: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class GetEnvironmentResponse(_message.Message):
    __slots__ = ("environment", "version")
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    environment: _environment_pb2.Environment
    version: _environment_pb2.EnvironmentVersion
    def __init__(self, environment: _Optional[_Union[_environment_pb2.Environment, _Mapping]] = ..., version: _Optional[_Union[_environment_pb2.EnvironmentVersion, _Mapping]] = ...) -> None: ...

class ListEnvironmentsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "show_archived")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SHOW_ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    show_archived: bool
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., show_archived: _Optional[bool] = ...) -> None: ...

class ListEnvironmentsResponse(_message.Message):
    __slots__ = ("environments", "next_page_token")
    ENVIRONMENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    environments: _containers.RepeatedCompositeFieldContainer[_environment_pb2.Environment]
    next_page_token: str
    def __init__(self, environments: _Optional[_Iterable[_Union[_environment_pb2.Environment, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateEnvironmentRequest(_message.Message):
    __slots__ = ("environment", "spec", "expected_version")
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    environment: str
    spec: _environment_pb2.EnvironmentSpec
    expected_version: int
    def __init__(self, environment: _Optional[str] = ..., spec: _Optional[_Union[_environment_pb2.EnvironmentSpec, _Mapping]] = ..., expected_version: _Optional[int] = ...) -> None: ...

class UpdateEnvironmentResponse(_message.Message):
    __slots__ = ("environment", "version", "created")
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    environment: _environment_pb2.Environment
    version: _environment_pb2.EnvironmentVersion
    created: bool
    def __init__(self, environment: _Optional[_Union[_environment_pb2.Environment, _Mapping]] = ..., version: _Optional[_Union[_environment_pb2.EnvironmentVersion, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class ListEnvironmentVersionsRequest(_message.Message):
    __slots__ = ("environment", "page_size", "page_token")
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    environment: str
    page_size: int
    page_token: str
    def __init__(self, environment: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListEnvironmentVersionsResponse(_message.Message):
    __slots__ = ("versions", "next_page_token")
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedCompositeFieldContainer[_environment_pb2.EnvironmentVersion]
    next_page_token: str
    def __init__(self, versions: _Optional[_Iterable[_Union[_environment_pb2.EnvironmentVersion, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ArchiveEnvironmentRequest(_message.Message):
    __slots__ = ("environment",)
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    environment: str
    def __init__(self, environment: _Optional[str] = ...) -> None: ...

class ArchiveEnvironmentResponse(_message.Message):
    __slots__ = ("environment",)
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    environment: _environment_pb2.Environment
    def __init__(self, environment: _Optional[_Union[_environment_pb2.Environment, _Mapping]] = ...) -> None: ...

class BuildEnvironmentRequest(_message.Message):
    __slots__ = ("environment", "version", "agent_id")
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    environment: str
    version: int
    agent_id: str
    def __init__(self, environment: _Optional[str] = ..., version: _Optional[int] = ..., agent_id: _Optional[str] = ...) -> None: ...

class BuildEnvironmentResponse(_message.Message):
    __slots__ = ("progress",)
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    progress: _environment_pb2.BuildProgress
    def __init__(self, progress: _Optional[_Union[_environment_pb2.BuildProgress, _Mapping]] = ...) -> None: ...
