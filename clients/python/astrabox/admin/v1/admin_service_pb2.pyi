import datetime

from google.protobuf import duration_pb2 as _duration_pb2
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

class CredentialHosts(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CREDENTIAL_HOSTS_UNSPECIFIED: _ClassVar[CredentialHosts]
    CREDENTIAL_HOSTS_ANY: _ClassVar[CredentialHosts]
    CREDENTIAL_HOSTS_DEDICATED: _ClassVar[CredentialHosts]

class StuckKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STUCK_KIND_UNSPECIFIED: _ClassVar[StuckKind]
    STUCK_KIND_SESSION_STARTUP_OVERDUE: _ClassVar[StuckKind]
    STUCK_KIND_SESSION_INTERRUPT_OVERDUE: _ClassVar[StuckKind]
    STUCK_KIND_SESSION_ON_LAPSED_AGENT: _ClassVar[StuckKind]
    STUCK_KIND_AGENT_LEASE_LAPSED: _ClassVar[StuckKind]
    STUCK_KIND_RELAY_LAGGING: _ClassVar[StuckKind]
    STUCK_KIND_DRAIN_OVERDUE: _ClassVar[StuckKind]
ROLE_UNSPECIFIED: Role
ROLE_VIEWER: Role
ROLE_DEVELOPER: Role
ROLE_ADMIN: Role
CREDENTIAL_HOSTS_UNSPECIFIED: CredentialHosts
CREDENTIAL_HOSTS_ANY: CredentialHosts
CREDENTIAL_HOSTS_DEDICATED: CredentialHosts
STUCK_KIND_UNSPECIFIED: StuckKind
STUCK_KIND_SESSION_STARTUP_OVERDUE: StuckKind
STUCK_KIND_SESSION_INTERRUPT_OVERDUE: StuckKind
STUCK_KIND_SESSION_ON_LAPSED_AGENT: StuckKind
STUCK_KIND_AGENT_LEASE_LAPSED: StuckKind
STUCK_KIND_RELAY_LAGGING: StuckKind
STUCK_KIND_DRAIN_OVERDUE: StuckKind

class Project(_message.Message):
    __slots__ = ("project_id", "name", "operator", "create_time", "credential_hosts")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_HOSTS_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    name: str
    operator: bool
    create_time: _timestamp_pb2.Timestamp
    credential_hosts: CredentialHosts
    def __init__(self, project_id: _Optional[str] = ..., name: _Optional[str] = ..., operator: _Optional[bool] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., credential_hosts: _Optional[_Union[CredentialHosts, str]] = ...) -> None: ...

class SetCredentialHostsRequest(_message.Message):
    __slots__ = ("project_id", "credential_hosts")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_HOSTS_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    credential_hosts: CredentialHosts
    def __init__(self, project_id: _Optional[str] = ..., credential_hosts: _Optional[_Union[CredentialHosts, str]] = ...) -> None: ...

class SetCredentialHostsResponse(_message.Message):
    __slots__ = ("project",)
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    project: Project
    def __init__(self, project: _Optional[_Union[Project, _Mapping]] = ...) -> None: ...

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
    __slots__ = ("agent_id", "enroll_time", "revoke_time", "admit_time", "admitted_by", "fingerprint", "last_refused_time", "last_peer")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ENROLL_TIME_FIELD_NUMBER: _ClassVar[int]
    REVOKE_TIME_FIELD_NUMBER: _ClassVar[int]
    ADMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    ADMITTED_BY_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    LAST_REFUSED_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_PEER_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    enroll_time: _timestamp_pb2.Timestamp
    revoke_time: _timestamp_pb2.Timestamp
    admit_time: _timestamp_pb2.Timestamp
    admitted_by: str
    fingerprint: str
    last_refused_time: _timestamp_pb2.Timestamp
    last_peer: str
    def __init__(self, agent_id: _Optional[str] = ..., enroll_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., revoke_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., admit_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., admitted_by: _Optional[str] = ..., fingerprint: _Optional[str] = ..., last_refused_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_peer: _Optional[str] = ...) -> None: ...

class AdmitAgentRequest(_message.Message):
    __slots__ = ("agent_id",)
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    def __init__(self, agent_id: _Optional[str] = ...) -> None: ...

class AdmitAgentResponse(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: Agent
    def __init__(self, agent: _Optional[_Union[Agent, _Mapping]] = ...) -> None: ...

class JoinToken(_message.Message):
    __slots__ = ("token_id", "project_id", "create_time", "expire_time", "created_by")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    token_id: str
    project_id: str
    create_time: _timestamp_pb2.Timestamp
    expire_time: _timestamp_pb2.Timestamp
    created_by: str
    def __init__(self, token_id: _Optional[str] = ..., project_id: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_by: _Optional[str] = ...) -> None: ...

class CreateJoinTokenRequest(_message.Message):
    __slots__ = ("ttl", "project_id")
    TTL_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    ttl: _duration_pb2.Duration
    project_id: str
    def __init__(self, ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., project_id: _Optional[str] = ...) -> None: ...

class CreateJoinTokenResponse(_message.Message):
    __slots__ = ("join_token", "token")
    JOIN_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    join_token: JoinToken
    token: str
    def __init__(self, join_token: _Optional[_Union[JoinToken, _Mapping]] = ..., token: _Optional[str] = ...) -> None: ...

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

class GetStatusRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("time", "agents", "next_page_token", "sessions_by_state", "stuck", "stuck_truncated")
    class SessionsByStateEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TIME_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_BY_STATE_FIELD_NUMBER: _ClassVar[int]
    STUCK_FIELD_NUMBER: _ClassVar[int]
    STUCK_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    time: _timestamp_pb2.Timestamp
    agents: _containers.RepeatedCompositeFieldContainer[AgentStatus]
    next_page_token: str
    sessions_by_state: _containers.ScalarMap[str, int]
    stuck: _containers.RepeatedCompositeFieldContainer[StuckItem]
    stuck_truncated: bool
    def __init__(self, time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., agents: _Optional[_Iterable[_Union[AgentStatus, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., sessions_by_state: _Optional[_Mapping[str, int]] = ..., stuck: _Optional[_Iterable[_Union[StuckItem, _Mapping]]] = ..., stuck_truncated: _Optional[bool] = ...) -> None: ...

class AgentStatus(_message.Message):
    __slots__ = ("agent_id", "version", "connected", "connect_time", "last_heartbeat_time", "lease_expire_time", "capacity", "live_sessions", "placed_sessions", "cordon_time", "drain_deadline", "project_id", "pending_commands", "oldest_pending_command_time", "output_lag")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    CONNECT_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_TIME_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    LIVE_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    PLACED_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    CORDON_TIME_FIELD_NUMBER: _ClassVar[int]
    DRAIN_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    PENDING_COMMANDS_FIELD_NUMBER: _ClassVar[int]
    OLDEST_PENDING_COMMAND_TIME_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_LAG_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    version: str
    connected: bool
    connect_time: _timestamp_pb2.Timestamp
    last_heartbeat_time: _timestamp_pb2.Timestamp
    lease_expire_time: _timestamp_pb2.Timestamp
    capacity: int
    live_sessions: int
    placed_sessions: int
    cordon_time: _timestamp_pb2.Timestamp
    drain_deadline: _timestamp_pb2.Timestamp
    project_id: str
    pending_commands: int
    oldest_pending_command_time: _timestamp_pb2.Timestamp
    output_lag: _duration_pb2.Duration
    def __init__(self, agent_id: _Optional[str] = ..., version: _Optional[str] = ..., connected: _Optional[bool] = ..., connect_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_heartbeat_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lease_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., capacity: _Optional[int] = ..., live_sessions: _Optional[int] = ..., placed_sessions: _Optional[int] = ..., cordon_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., drain_deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., project_id: _Optional[str] = ..., pending_commands: _Optional[int] = ..., oldest_pending_command_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., output_lag: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class StuckItem(_message.Message):
    __slots__ = ("kind", "session_id", "agent_id", "reason", "since")
    KIND_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    kind: StuckKind
    session_id: str
    agent_id: str
    reason: str
    since: _timestamp_pb2.Timestamp
    def __init__(self, kind: _Optional[_Union[StuckKind, str]] = ..., session_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., reason: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class AgentHold(_message.Message):
    __slots__ = ("agent_id", "cordon_time", "drain_deadline")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    CORDON_TIME_FIELD_NUMBER: _ClassVar[int]
    DRAIN_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    cordon_time: _timestamp_pb2.Timestamp
    drain_deadline: _timestamp_pb2.Timestamp
    def __init__(self, agent_id: _Optional[str] = ..., cordon_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., drain_deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CordonAgentRequest(_message.Message):
    __slots__ = ("agent_id",)
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    def __init__(self, agent_id: _Optional[str] = ...) -> None: ...

class CordonAgentResponse(_message.Message):
    __slots__ = ("hold",)
    HOLD_FIELD_NUMBER: _ClassVar[int]
    hold: AgentHold
    def __init__(self, hold: _Optional[_Union[AgentHold, _Mapping]] = ...) -> None: ...

class UncordonAgentRequest(_message.Message):
    __slots__ = ("agent_id",)
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    def __init__(self, agent_id: _Optional[str] = ...) -> None: ...

class UncordonAgentResponse(_message.Message):
    __slots__ = ("hold",)
    HOLD_FIELD_NUMBER: _ClassVar[int]
    hold: AgentHold
    def __init__(self, hold: _Optional[_Union[AgentHold, _Mapping]] = ...) -> None: ...

class DrainAgentRequest(_message.Message):
    __slots__ = ("agent_id", "timeout_seconds")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    timeout_seconds: int
    def __init__(self, agent_id: _Optional[str] = ..., timeout_seconds: _Optional[int] = ...) -> None: ...

class DrainAgentResponse(_message.Message):
    __slots__ = ("hold",)
    HOLD_FIELD_NUMBER: _ClassVar[int]
    hold: AgentHold
    def __init__(self, hold: _Optional[_Union[AgentHold, _Mapping]] = ...) -> None: ...
