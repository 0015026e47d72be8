from astrabox.agents.v1 import agent_pb2 as _agent_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateAgentRequest(_message.Message):
    __slots__ = ("request_id", "name", "spec")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    name: str
    spec: _agent_pb2.AgentSpec
    def __init__(self, request_id: _Optional[str] = ..., name: _Optional[str] = ..., spec: _Optional[_Union[_agent_pb2.AgentSpec, _Mapping]] = ...) -> None: ...

class CreateAgentResponse(_message.Message):
    __slots__ = ("agent", "version")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    agent: _agent_pb2.Agent
    version: _agent_pb2.AgentVersion
    def __init__(self, agent: _Optional[_Union[_agent_pb2.Agent, _Mapping]] = ..., version: _Optional[_Union[_agent_pb2.AgentVersion, _Mapping]] = ...) -> None: ...

class GetAgentRequest(_message.Message):
    __slots__ = ("agent", "version")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    agent: str
    version: int
    def __init__(self, agent: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class GetAgentResponse(_message.Message):
    __slots__ = ("agent", "version")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    agent: _agent_pb2.Agent
    version: _agent_pb2.AgentVersion
    def __init__(self, agent: _Optional[_Union[_agent_pb2.Agent, _Mapping]] = ..., version: _Optional[_Union[_agent_pb2.AgentVersion, _Mapping]] = ...) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "show_archived")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SHOW_ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    show_archived: bool
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., show_archived: _Optional[bool] = ...) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents", "next_page_token")
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[_agent_pb2.Agent]
    next_page_token: str
    def __init__(self, agents: _Optional[_Iterable[_Union[_agent_pb2.Agent, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateAgentRequest(_message.Message):
    __slots__ = ("agent", "spec", "expected_version")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    agent: str
    spec: _agent_pb2.AgentSpec
    expected_version: int
    def __init__(self, agent: _Optional[str] = ..., spec: _Optional[_Union[_agent_pb2.AgentSpec, _Mapping]] = ..., expected_version: _Optional[int] = ...) -> None: ...

class UpdateAgentResponse(_message.Message):
    __slots__ = ("agent", "version", "created")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    agent: _agent_pb2.Agent
    version: _agent_pb2.AgentVersion
    created: bool
    def __init__(self, agent: _Optional[_Union[_agent_pb2.Agent, _Mapping]] = ..., version: _Optional[_Union[_agent_pb2.AgentVersion, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class ListAgentVersionsRequest(_message.Message):
    __slots__ = ("agent", "page_size", "page_token")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    agent: str
    page_size: int
    page_token: str
    def __init__(self, agent: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListAgentVersionsResponse(_message.Message):
    __slots__ = ("versions", "next_page_token")
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedCompositeFieldContainer[_agent_pb2.AgentVersion]
    next_page_token: str
    def __init__(self, versions: _Optional[_Iterable[_Union[_agent_pb2.AgentVersion, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ArchiveAgentRequest(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: str
    def __init__(self, agent: _Optional[str] = ...) -> None: ...

class ArchiveAgentResponse(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: _agent_pb2.Agent
    def __init__(self, agent: _Optional[_Union[_agent_pb2.Agent, _Mapping]] = ...) -> None: ...
