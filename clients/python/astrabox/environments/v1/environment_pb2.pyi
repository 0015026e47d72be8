import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NetworkMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NETWORK_MODE_UNSPECIFIED: _ClassVar[NetworkMode]
    NETWORK_MODE_NONE: _ClassVar[NetworkMode]
    NETWORK_MODE_LIMITED: _ClassVar[NetworkMode]
    NETWORK_MODE_UNRESTRICTED: _ClassVar[NetworkMode]

class CredentialScheme(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CREDENTIAL_SCHEME_UNSPECIFIED: _ClassVar[CredentialScheme]
    CREDENTIAL_SCHEME_BEARER: _ClassVar[CredentialScheme]
    CREDENTIAL_SCHEME_BASIC: _ClassVar[CredentialScheme]
    CREDENTIAL_SCHEME_HEADER: _ClassVar[CredentialScheme]

class BuildState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BUILD_STATE_UNSPECIFIED: _ClassVar[BuildState]
    BUILD_STATE_BUILDING: _ClassVar[BuildState]
    BUILD_STATE_READY: _ClassVar[BuildState]
    BUILD_STATE_FAILED: _ClassVar[BuildState]
NETWORK_MODE_UNSPECIFIED: NetworkMode
NETWORK_MODE_NONE: NetworkMode
NETWORK_MODE_LIMITED: NetworkMode
NETWORK_MODE_UNRESTRICTED: NetworkMode
CREDENTIAL_SCHEME_UNSPECIFIED: CredentialScheme
CREDENTIAL_SCHEME_BEARER: CredentialScheme
CREDENTIAL_SCHEME_BASIC: CredentialScheme
CREDENTIAL_SCHEME_HEADER: CredentialScheme
BUILD_STATE_UNSPECIFIED: BuildState
BUILD_STATE_BUILDING: BuildState
BUILD_STATE_READY: BuildState
BUILD_STATE_FAILED: BuildState

class Environment(_message.Message):
    __slots__ = ("environment_id", "name", "project_id", "latest_version", "archived", "create_time", "update_time")
    ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    LATEST_VERSION_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    environment_id: str
    name: str
    project_id: str
    latest_version: int
    archived: bool
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, environment_id: _Optional[str] = ..., name: _Optional[str] = ..., project_id: _Optional[str] = ..., latest_version: _Optional[int] = ..., archived: _Optional[bool] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class EnvironmentVersion(_message.Message):
    __slots__ = ("environment_id", "version", "spec", "spec_digest", "build_digest", "create_time")
    ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    SPEC_DIGEST_FIELD_NUMBER: _ClassVar[int]
    BUILD_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    environment_id: str
    version: int
    spec: EnvironmentSpec
    spec_digest: str
    build_digest: str
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, environment_id: _Optional[str] = ..., version: _Optional[int] = ..., spec: _Optional[_Union[EnvironmentSpec, _Mapping]] = ..., spec_digest: _Optional[str] = ..., build_digest: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class EnvironmentSpec(_message.Message):
    __slots__ = ("packages", "setup_script", "variables", "limits", "network", "credentials", "isolation")
    class VariablesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PACKAGES_FIELD_NUMBER: _ClassVar[int]
    SETUP_SCRIPT_FIELD_NUMBER: _ClassVar[int]
    VARIABLES_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    CREDENTIALS_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_FIELD_NUMBER: _ClassVar[int]
    packages: Packages
    setup_script: str
    variables: _containers.ScalarMap[str, str]
    limits: ResourceLimits
    network: NetworkPolicy
    credentials: _containers.RepeatedCompositeFieldContainer[CredentialBinding]
    isolation: str
    def __init__(self, packages: _Optional[_Union[Packages, _Mapping]] = ..., setup_script: _Optional[str] = ..., variables: _Optional[_Mapping[str, str]] = ..., limits: _Optional[_Union[ResourceLimits, _Mapping]] = ..., network: _Optional[_Union[NetworkPolicy, _Mapping]] = ..., credentials: _Optional[_Iterable[_Union[CredentialBinding, _Mapping]]] = ..., isolation: _Optional[str] = ...) -> None: ...

class Packages(_message.Message):
    __slots__ = ("apt", "pip", "npm")
    APT_FIELD_NUMBER: _ClassVar[int]
    PIP_FIELD_NUMBER: _ClassVar[int]
    NPM_FIELD_NUMBER: _ClassVar[int]
    apt: _containers.RepeatedScalarFieldContainer[str]
    pip: _containers.RepeatedScalarFieldContainer[str]
    npm: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, apt: _Optional[_Iterable[str]] = ..., pip: _Optional[_Iterable[str]] = ..., npm: _Optional[_Iterable[str]] = ...) -> None: ...

class ResourceLimits(_message.Message):
    __slots__ = ("cpu_millis", "memory_bytes", "pids", "disk_bytes")
    CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    PIDS_FIELD_NUMBER: _ClassVar[int]
    DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    cpu_millis: int
    memory_bytes: int
    pids: int
    disk_bytes: int
    def __init__(self, cpu_millis: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., pids: _Optional[int] = ..., disk_bytes: _Optional[int] = ...) -> None: ...

class NetworkPolicy(_message.Message):
    __slots__ = ("mode", "allowed_hosts", "allow_package_registries", "allow_mcp_servers")
    MODE_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_HOSTS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_PACKAGE_REGISTRIES_FIELD_NUMBER: _ClassVar[int]
    ALLOW_MCP_SERVERS_FIELD_NUMBER: _ClassVar[int]
    mode: NetworkMode
    allowed_hosts: _containers.RepeatedScalarFieldContainer[str]
    allow_package_registries: bool
    allow_mcp_servers: bool
    def __init__(self, mode: _Optional[_Union[NetworkMode, str]] = ..., allowed_hosts: _Optional[_Iterable[str]] = ..., allow_package_registries: _Optional[bool] = ..., allow_mcp_servers: _Optional[bool] = ...) -> None: ...

class CredentialBinding(_message.Message):
    __slots__ = ("credential", "hosts", "scheme", "header", "port", "allow_plain_http")
    CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    SCHEME_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    ALLOW_PLAIN_HTTP_FIELD_NUMBER: _ClassVar[int]
    credential: str
    hosts: _containers.RepeatedScalarFieldContainer[str]
    scheme: CredentialScheme
    header: str
    port: int
    allow_plain_http: bool
    def __init__(self, credential: _Optional[str] = ..., hosts: _Optional[_Iterable[str]] = ..., scheme: _Optional[_Union[CredentialScheme, str]] = ..., header: _Optional[str] = ..., port: _Optional[int] = ..., allow_plain_http: _Optional[bool] = ...) -> None: ...

class BuildProgress(_message.Message):
    __slots__ = ("agent_id", "build_digest", "state", "phase", "message", "percent", "error", "time")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    BUILD_DIGEST_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PERCENT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    build_digest: str
    state: BuildState
    phase: str
    message: str
    percent: int
    error: str
    time: _timestamp_pb2.Timestamp
    def __init__(self, agent_id: _Optional[str] = ..., build_digest: _Optional[str] = ..., state: _Optional[_Union[BuildState, str]] = ..., phase: _Optional[str] = ..., message: _Optional[str] = ..., percent: _Optional[int] = ..., error: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GitSource(_message.Message):
    __slots__ = ("url", "ref", "directory")
    URL_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    url: str
    ref: str
    directory: str
    def __init__(self, url: _Optional[str] = ..., ref: _Optional[str] = ..., directory: _Optional[str] = ...) -> None: ...
