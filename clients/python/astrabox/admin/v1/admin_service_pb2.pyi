import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_VIEWER: _ClassVar[Role]
    ROLE_DEVELOPER: _ClassVar[Role]
    ROLE_ADMIN: _ClassVar[Role]
ROLE_UNSPECIFIED: Role
ROLE_VIEWER: Role
ROLE_DEVELOPER: Role
ROLE_ADMIN: Role

class Project(_message.Message):
    __slots__ = ("project_id", "name", "operator", "create_time")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    name: str
    operator: bool
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, project_id: _Optional[str] = ..., name: _Optional[str] = ..., operator: _Optional[bool] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ApiKey(_message.Message):
    __slots__ = ("key_id", "project_id", "name", "role", "create_time", "expire_time", "revoke_time", "last_use_time", "created_by")
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    REVOKE_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_USE_TIME_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    key_id: str
    project_id: str
    name: str
    role: Role
    create_time: _timestamp_pb2.Timestamp
    expire_time: _timestamp_pb2.Timestamp
    revoke_time: _timestamp_pb2.Timestamp
    last_use_time: _timestamp_pb2.Timestamp
    created_by: str
    def __init__(self, key_id: _Optional[str] = ..., project_id: _Optional[str] = ..., name: _Optional[str] = ..., role: _Optional[_Union[Role, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., revoke_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_use_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_by: _Optional[str] = ...) -> None: ...

class Caller(_message.Message):
    __slots__ = ("project", "role", "key_id", "subject")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    project: Project
    role: Role
    key_id: str
    subject: str
    def __init__(self, project: _Optional[_Union[Project, _Mapping]] = ..., role: _Optional[_Union[Role, str]] = ..., key_id: _Optional[str] = ..., subject: _Optional[str] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ("caller",)
    CALLER_FIELD_NUMBER: _ClassVar[int]
    caller: Caller
    def __init__(self, caller: _Optional[_Union[Caller, _Mapping]] = ...) -> None: ...

class CreateProjectRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class CreateProjectResponse(_message.Message):
    __slots__ = ("project",)
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    project: Project
    def __init__(self, project: _Optional[_Union[Project, _Mapping]] = ...) -> None: ...

class ListProjectsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListProjectsResponse(_message.Message):
    __slots__ = ("projects",)
    PROJECTS_FIELD_NUMBER: _ClassVar[int]
    projects: _containers.RepeatedCompositeFieldContainer[Project]
    def __init__(self, projects: _Optional[_Iterable[_Union[Project, _Mapping]]] = ...) -> None: ...

class CreateApiKeyRequest(_message.Message):
    __slots__ = ("project_id", "name", "role", "expire_time")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    name: str
    role: Role
    expire_time: _timestamp_pb2.Timestamp
    def __init__(self, project_id: _Optional[str] = ..., name: _Optional[str] = ..., role: _Optional[_Union[Role, str]] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateApiKeyResponse(_message.Message):
    __slots__ = ("key", "secret")
    KEY_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    key: ApiKey
    secret: str
    def __init__(self, key: _Optional[_Union[ApiKey, _Mapping]] = ..., secret: _Optional[str] = ...) -> None: ...

class ListApiKeysRequest(_message.Message):
    __slots__ = ("project_id",)
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    def __init__(self, project_id: _Optional[str] = ...) -> None: ...

class ListApiKeysResponse(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedCompositeFieldContainer[ApiKey]
    def __init__(self, keys: _Optional[_Iterable[_Union[ApiKey, _Mapping]]] = ...) -> None: ...

class RevokeApiKeyRequest(_message.Message):
    __slots__ = ("key_id",)
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    key_id: str
    def __init__(self, key_id: _Optional[str] = ...) -> None: ...

class RevokeApiKeyResponse(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: ApiKey
    def __init__(self, key: _Optional[_Union[ApiKey, _Mapping]] = ...) -> None: ...

class AuditRecord(_message.Message):
    __slots__ = ("record_id", "time", "project_id", "actor", "method", "session_id", "details", "code")
    class DetailsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    record_id: int
    time: _timestamp_pb2.Timestamp
    project_id: str
    actor: str
    method: str
    session_id: str
    details: _containers.ScalarMap[str, str]
    code: str
    def __init__(self, record_id: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., project_id: _Optional[str] = ..., actor: _Optional[str] = ..., method: _Optional[str] = ..., session_id: _Optional[str] = ..., details: _Optional[_Mapping[str, str]] = ..., code: _Optional[str] = ...) -> None: ...

class ListAuditRecordsRequest(_message.Message):
    __slots__ = ("project_id", "session_id", "page_size", "page_token")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    session_id: str
    page_size: int
    page_token: str
    def __init__(self, project_id: _Optional[str] = ..., session_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListAuditRecordsResponse(_message.Message):
    __slots__ = ("records", "next_page_token")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[AuditRecord]
    next_page_token: str
    def __init__(self, records: _Optional[_Iterable[_Union[AuditRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class Agent(_message.Message):
    __slots__ = ("agent_id", "enroll_time", "revoke_time")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ENROLL_TIME_FIELD_NUMBER: _ClassVar[int]
    REVOKE_TIME_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    enroll_time: _timestamp_pb2.Timestamp
    revoke_time: _timestamp_pb2.Timestamp
    def __init__(self, agent_id: _Optional[str] = ..., enroll_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., revoke_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents",)
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[Agent]
    def __init__(self, agents: _Optional[_Iterable[_Union[Agent, _Mapping]]] = ...) -> None: ...

class RevokeAgentRequest(_message.Message):
    __slots__ = ("agent_id",)
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    def __init__(self, agent_id: _Optional[str] = ...) -> None: ...

class RevokeAgentResponse(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: Agent
    def __init__(self, agent: _Optional[_Union[Agent, _Mapping]] = ...) -> None: ...

class DedicateAgentRequest(_message.Message):
    __slots__ = ("agent_id", "project_id")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    project_id: str
    def __init__(self, agent_id: _Optional[str] = ..., project_id: _Optional[str] = ...) -> None: ...

class DedicateAgentResponse(_message.Message):
    __slots__ = ("agent_id", "project_id")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    project_id: str
    def __init__(self, agent_id: _Optional[str] = ..., project_id: _Optional[str] = ...) -> None: ...

class Quotas(_message.Message):
    __slots__ = ("live_sessions", "sessions_per_minute", "message_bytes", "upload_bytes", "concurrent_commands")
    LIVE_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_PER_MINUTE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    CONCURRENT_COMMANDS_FIELD_NUMBER: _ClassVar[int]
    live_sessions: int
    sessions_per_minute: int
    message_bytes: int
    upload_bytes: int
    concurrent_commands: int
    def __init__(self, live_sessions: _Optional[int] = ..., sessions_per_minute: _Optional[int] = ..., message_bytes: _Optional[int] = ..., upload_bytes: _Optional[int] = ..., concurrent_commands: _Optional[int] = ...) -> None: ...

class QuotaUsage(_message.Message):
    __slots__ = ("live_sessions", "sessions_per_minute", "concurrent_commands")
    LIVE_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_PER_MINUTE_FIELD_NUMBER: _ClassVar[int]
    CONCURRENT_COMMANDS_FIELD_NUMBER: _ClassVar[int]
    live_sessions: int
    sessions_per_minute: int
    concurrent_commands: int
    def __init__(self, live_sessions: _Optional[int] = ..., sessions_per_minute: _Optional[int] = ..., concurrent_commands: _Optional[int] = ...) -> None: ...

class GetQuotasRequest(_message.Message):
    __slots__ = ("project_id",)
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    def __init__(self, project_id: _Optional[str] = ...) -> None: ...

class GetQuotasResponse(_message.Message):
    __slots__ = ("project_id", "configured", "effective", "usage")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIGURED_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    configured: Quotas
    effective: Quotas
    usage: QuotaUsage
    def __init__(self, project_id: _Optional[str] = ..., configured: _Optional[_Union[Quotas, _Mapping]] = ..., effective: _Optional[_Union[Quotas, _Mapping]] = ..., usage: _Optional[_Union[QuotaUsage, _Mapping]] = ...) -> None: ...

class SetQuotasRequest(_message.Message):
    __slots__ = ("project_id", "quotas")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    QUOTAS_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    quotas: Quotas
    def __init__(self, project_id: _Optional[str] = ..., quotas: _Optional[_Union[Quotas, _Mapping]] = ...) -> None: ...

class SetQuotasResponse(_message.Message):
    __slots__ = ("project_id", "configured", "effective")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIGURED_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    configured: Quotas
    effective: Quotas
    def __init__(self, project_id: _Optional[str] = ..., configured: _Optional[_Union[Quotas, _Mapping]] = ..., effective: _Optional[_Union[Quotas, _Mapping]] = ...) -> None: ...
