import datetime

from astrabox.memory.v1 import memory_service_pb2 as _memory_service_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ToolPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_POLICY_UNSPECIFIED: _ClassVar[ToolPolicy]
    TOOL_POLICY_ALLOW: _ClassVar[ToolPolicy]
    TOOL_POLICY_ASK: _ClassVar[ToolPolicy]
    TOOL_POLICY_DENY: _ClassVar[ToolPolicy]
TOOL_POLICY_UNSPECIFIED: ToolPolicy
TOOL_POLICY_ALLOW: ToolPolicy
TOOL_POLICY_ASK: ToolPolicy
TOOL_POLICY_DENY: ToolPolicy

class Agent(_message.Message):
    __slots__ = ("agent_id", "name", "project_id", "latest_version", "archived", "create_time", "update_time")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    LATEST_VERSION_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    name: str
    project_id: str
    latest_version: int
    archived: bool
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, agent_id: _Optional[str] = ..., name: _Optional[str] = ..., project_id: _Optional[str] = ..., latest_version: _Optional[int] = ..., archived: _Optional[bool] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class AgentVersion(_message.Message):
    __slots__ = ("agent_id", "version", "spec", "spec_digest", "create_time")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    SPEC_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    version: int
    spec: AgentSpec
    spec_digest: str
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, agent_id: _Optional[str] = ..., version: _Optional[int] = ..., spec: _Optional[_Union[AgentSpec, _Mapping]] = ..., spec_digest: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class AgentSpec(_message.Message):
    __slots__ = ("description", "engine", "model", "permission_mode", "system_prompt", "tools", "mcp_servers", "skills", "limits", "custom_tools", "subagents", "memory")
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_MODE_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    MCP_SERVERS_FIELD_NUMBER: _ClassVar[int]
    SKILLS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_TOOLS_FIELD_NUMBER: _ClassVar[int]
    SUBAGENTS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    description: str
    engine: str
    model: str
    permission_mode: str
    system_prompt: SystemPrompt
    tools: Tools
    mcp_servers: _containers.RepeatedCompositeFieldContainer[McpServer]
    skills: _containers.RepeatedCompositeFieldContainer[Skill]
    limits: Limits
    custom_tools: _containers.RepeatedCompositeFieldContainer[CustomTool]
    subagents: _containers.RepeatedCompositeFieldContainer[SubAgent]
    memory: _containers.RepeatedCompositeFieldContainer[_memory_service_pb2.MemoryAttachment]
    def __init__(self, description: _Optional[str] = ..., engine: _Optional[str] = ..., model: _Optional[str] = ..., permission_mode: _Optional[str] = ..., system_prompt: _Optional[_Union[SystemPrompt, _Mapping]] = ..., tools: _Optional[_Union[Tools, _Mapping]] = ..., mcp_servers: _Optional[_Iterable[_Union[McpServer, _Mapping]]] = ..., skills: _Optional[_Iterable[_Union[Skill, _Mapping]]] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., custom_tools: _Optional[_Iterable[_Union[CustomTool, _Mapping]]] = ..., subagents: _Optional[_Iterable[_Union[SubAgent, _Mapping]]] = ..., memory: _Optional[_Iterable[_Union[_memory_service_pb2.MemoryAttachment, _Mapping]]] = ...) -> None: ...

class CustomTool(_message.Message):
    __slots__ = ("name", "description", "input_schema_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    input_schema_json: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., input_schema_json: _Optional[str] = ...) -> None: ...

class SubAgent(_message.Message):
    __slots__ = ("agent", "version", "description")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    agent: str
    version: int
    description: str
    def __init__(self, agent: _Optional[str] = ..., version: _Optional[int] = ..., description: _Optional[str] = ...) -> None: ...

class SystemPrompt(_message.Message):
    __slots__ = ("append", "replace")
    APPEND_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    append: str
    replace: str
    def __init__(self, append: _Optional[str] = ..., replace: _Optional[str] = ...) -> None: ...

class Tools(_message.Message):
    __slots__ = ("enabled", "rules", "default_policy")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_POLICY_FIELD_NUMBER: _ClassVar[int]
    enabled: _containers.RepeatedScalarFieldContainer[str]
    rules: _containers.RepeatedCompositeFieldContainer[ToolRule]
    default_policy: ToolPolicy
    def __init__(self, enabled: _Optional[_Iterable[str]] = ..., rules: _Optional[_Iterable[_Union[ToolRule, _Mapping]]] = ..., default_policy: _Optional[_Union[ToolPolicy, str]] = ...) -> None: ...

class ToolRule(_message.Message):
    __slots__ = ("tool", "policy")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    tool: str
    policy: ToolPolicy
    def __init__(self, tool: _Optional[str] = ..., policy: _Optional[_Union[ToolPolicy, str]] = ...) -> None: ...

class McpServer(_message.Message):
    __slots__ = ("name", "stdio", "http", "enabled_tools")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STDIO_FIELD_NUMBER: _ClassVar[int]
    HTTP_FIELD_NUMBER: _ClassVar[int]
    ENABLED_TOOLS_FIELD_NUMBER: _ClassVar[int]
    name: str
    stdio: StdioMcpServer
    http: HttpMcpServer
    enabled_tools: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., stdio: _Optional[_Union[StdioMcpServer, _Mapping]] = ..., http: _Optional[_Union[HttpMcpServer, _Mapping]] = ..., enabled_tools: _Optional[_Iterable[str]] = ...) -> None: ...

class StdioMcpServer(_message.Message):
    __slots__ = ("command", "args", "env")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    command: str
    args: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    def __init__(self, command: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ...) -> None: ...

class HttpMcpServer(_message.Message):
    __slots__ = ("url", "credential", "header")
    URL_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    url: str
    credential: str
    header: str
    def __init__(self, url: _Optional[str] = ..., credential: _Optional[str] = ..., header: _Optional[str] = ...) -> None: ...

class Skill(_message.Message):
    __slots__ = ("name", "files")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    name: str
    files: _containers.RepeatedCompositeFieldContainer[SkillFile]
    def __init__(self, name: _Optional[str] = ..., files: _Optional[_Iterable[_Union[SkillFile, _Mapping]]] = ...) -> None: ...

class SkillFile(_message.Message):
    __slots__ = ("path", "content")
    PATH_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    path: str
    content: bytes
    def __init__(self, path: _Optional[str] = ..., content: _Optional[bytes] = ...) -> None: ...

class Limits(_message.Message):
    __slots__ = ("max_turns", "max_cost_usd_per_turn", "max_cost_usd_per_session", "turn_timeout")
    MAX_TURNS_FIELD_NUMBER: _ClassVar[int]
    MAX_COST_USD_PER_TURN_FIELD_NUMBER: _ClassVar[int]
    MAX_COST_USD_PER_SESSION_FIELD_NUMBER: _ClassVar[int]
    TURN_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    max_turns: int
    max_cost_usd_per_turn: float
    max_cost_usd_per_session: float
    turn_timeout: _duration_pb2.Duration
    def __init__(self, max_turns: _Optional[int] = ..., max_cost_usd_per_turn: _Optional[float] = ..., max_cost_usd_per_session: _Optional[float] = ..., turn_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...
