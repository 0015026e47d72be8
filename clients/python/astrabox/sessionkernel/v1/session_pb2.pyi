import datetime

from astrabox.agents.v1 import agent_pb2 as _agent_pb2
from astrabox.environments.v1 import environment_pb2 as _environment_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SessionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_STATE_UNSPECIFIED: _ClassVar[SessionState]
    SESSION_STATE_CREATING: _ClassVar[SessionState]
    SESSION_STATE_READY: _ClassVar[SessionState]
    SESSION_STATE_RUNNING: _ClassVar[SessionState]
    SESSION_STATE_WAITING_FOR_INPUT: _ClassVar[SessionState]
    SESSION_STATE_INTERRUPTING: _ClassVar[SessionState]
    SESSION_STATE_ARCHIVED: _ClassVar[SessionState]
    SESSION_STATE_DELETED: _ClassVar[SessionState]
    SESSION_STATE_FAILED: _ClassVar[SessionState]

class InteractionKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INTERACTION_KIND_UNSPECIFIED: _ClassVar[InteractionKind]
    INTERACTION_KIND_TOOL_APPROVAL: _ClassVar[InteractionKind]
    INTERACTION_KIND_QUESTION: _ClassVar[InteractionKind]
    INTERACTION_KIND_CUSTOM_TOOL: _ClassVar[InteractionKind]
    INTERACTION_KIND_SUBAGENT: _ClassVar[InteractionKind]
SESSION_STATE_UNSPECIFIED: SessionState
SESSION_STATE_CREATING: SessionState
SESSION_STATE_READY: SessionState
SESSION_STATE_RUNNING: SessionState
SESSION_STATE_WAITING_FOR_INPUT: SessionState
SESSION_STATE_INTERRUPTING: SessionState
SESSION_STATE_ARCHIVED: SessionState
SESSION_STATE_DELETED: SessionState
SESSION_STATE_FAILED: SessionState
INTERACTION_KIND_UNSPECIFIED: InteractionKind
INTERACTION_KIND_TOOL_APPROVAL: InteractionKind
INTERACTION_KIND_QUESTION: InteractionKind
INTERACTION_KIND_CUSTOM_TOOL: InteractionKind
INTERACTION_KIND_SUBAGENT: InteractionKind

class Session(_message.Message):
    __slots__ = ("session_id", "state", "runtime_available", "engine", "permission_mode", "model", "last_seq", "current_turn_id", "agent_id", "engine_session_id", "failure_reason", "create_time", "update_time", "request_id", "labels", "pending_interaction", "background_tasks", "capabilities", "slash_commands", "queued_turn_ids", "runtime_stopped", "project_id", "destroy_failure", "agent", "config", "usage", "tool_grants", "environment", "git_source", "forked_from", "parent")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_MODE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    CURRENT_TURN_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ENGINE_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FAILURE_REASON_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    PENDING_INTERACTION_FIELD_NUMBER: _ClassVar[int]
    BACKGROUND_TASKS_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    SLASH_COMMANDS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_TURN_IDS_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_STOPPED_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    DESTROY_FAILURE_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TOOL_GRANTS_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    GIT_SOURCE_FIELD_NUMBER: _ClassVar[int]
    FORKED_FROM_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    state: SessionState
    runtime_available: bool
    engine: str
    permission_mode: str
    model: str
    last_seq: int
    current_turn_id: str
    agent_id: str
    engine_session_id: str
    failure_reason: str
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    request_id: str
    labels: _containers.ScalarMap[str, str]
    pending_interaction: Interaction
    background_tasks: _containers.RepeatedCompositeFieldContainer[BackgroundTask]
    capabilities: EngineCapabilities
    slash_commands: _containers.RepeatedScalarFieldContainer[str]
    queued_turn_ids: _containers.RepeatedScalarFieldContainer[str]
    runtime_stopped: bool
    project_id: str
    destroy_failure: DestroyFailure
    agent: SessionAgent
    config: _agent_pb2.AgentSpec
    usage: Usage
    tool_grants: _containers.RepeatedCompositeFieldContainer[ToolGrant]
    environment: SessionEnvironment
    git_source: _environment_pb2.GitSource
    forked_from: SessionFork
    parent: SubagentParent
    def __init__(self, session_id: _Optional[str] = ..., state: _Optional[_Union[SessionState, str]] = ..., runtime_available: _Optional[bool] = ..., engine: _Optional[str] = ..., permission_mode: _Optional[str] = ..., model: _Optional[str] = ..., last_seq: _Optional[int] = ..., current_turn_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., engine_session_id: _Optional[str] = ..., failure_reason: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., request_id: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., pending_interaction: _Optional[_Union[Interaction, _Mapping]] = ..., background_tasks: _Optional[_Iterable[_Union[BackgroundTask, _Mapping]]] = ..., capabilities: _Optional[_Union[EngineCapabilities, _Mapping]] = ..., slash_commands: _Optional[_Iterable[str]] = ..., queued_turn_ids: _Optional[_Iterable[str]] = ..., runtime_stopped: _Optional[bool] = ..., project_id: _Optional[str] = ..., destroy_failure: _Optional[_Union[DestroyFailure, _Mapping]] = ..., agent: _Optional[_Union[SessionAgent, _Mapping]] = ..., config: _Optional[_Union[_agent_pb2.AgentSpec, _Mapping]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., tool_grants: _Optional[_Iterable[_Union[ToolGrant, _Mapping]]] = ..., environment: _Optional[_Union[SessionEnvironment, _Mapping]] = ..., git_source: _Optional[_Union[_environment_pb2.GitSource, _Mapping]] = ..., forked_from: _Optional[_Union[SessionFork, _Mapping]] = ..., parent: _Optional[_Union[SubagentParent, _Mapping]] = ...) -> None: ...

class SessionFork(_message.Message):
    __slots__ = ("session_id", "through_seq")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    THROUGH_SEQ_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    through_seq: int
    def __init__(self, session_id: _Optional[str] = ..., through_seq: _Optional[int] = ...) -> None: ...

class SubagentParent(_message.Message):
    __slots__ = ("session_id", "interaction_id", "tool_use_id", "depth")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INTERACTION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    interaction_id: str
    tool_use_id: str
    depth: int
    def __init__(self, session_id: _Optional[str] = ..., interaction_id: _Optional[str] = ..., tool_use_id: _Optional[str] = ..., depth: _Optional[int] = ...) -> None: ...

class SessionEnvironment(_message.Message):
    __slots__ = ("environment_id", "name", "version", "build_digest")
    ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    BUILD_DIGEST_FIELD_NUMBER: _ClassVar[int]
    environment_id: str
    name: str
    version: int
    build_digest: str
    def __init__(self, environment_id: _Optional[str] = ..., name: _Optional[str] = ..., version: _Optional[int] = ..., build_digest: _Optional[str] = ...) -> None: ...

class ToolGrant(_message.Message):
    __slots__ = ("grant_id", "tool_name", "input_pattern", "expire_time", "create_time", "interaction_id")
    GRANT_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_PATTERN_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    INTERACTION_ID_FIELD_NUMBER: _ClassVar[int]
    grant_id: str
    tool_name: str
    input_pattern: str
    expire_time: _timestamp_pb2.Timestamp
    create_time: _timestamp_pb2.Timestamp
    interaction_id: str
    def __init__(self, grant_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., input_pattern: _Optional[str] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., interaction_id: _Optional[str] = ...) -> None: ...

class SessionAgent(_message.Message):
    __slots__ = ("agent_id", "name", "version")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    name: str
    version: int
    def __init__(self, agent_id: _Optional[str] = ..., name: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "cost_usd", "turns")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_CREATION_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_READ_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    cost_usd: float
    turns: int
    def __init__(self, input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cache_creation_input_tokens: _Optional[int] = ..., cache_read_input_tokens: _Optional[int] = ..., cost_usd: _Optional[float] = ..., turns: _Optional[int] = ...) -> None: ...

class DestroyFailure(_message.Message):
    __slots__ = ("reason", "attempts", "next_attempt_time", "abandoned")
    REASON_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_TIME_FIELD_NUMBER: _ClassVar[int]
    ABANDONED_FIELD_NUMBER: _ClassVar[int]
    reason: str
    attempts: int
    next_attempt_time: _timestamp_pb2.Timestamp
    abandoned: bool
    def __init__(self, reason: _Optional[str] = ..., attempts: _Optional[int] = ..., next_attempt_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., abandoned: _Optional[bool] = ...) -> None: ...

class Interaction(_message.Message):
    __slots__ = ("interaction_id", "kind", "turn_id", "tool_name", "input_json", "tool_use_id", "questions", "requested_seq", "input")
    INTERACTION_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    QUESTIONS_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_SEQ_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    interaction_id: str
    kind: InteractionKind
    turn_id: str
    tool_name: str
    input_json: str
    tool_use_id: str
    questions: _containers.RepeatedCompositeFieldContainer[Question]
    requested_seq: int
    input: _struct_pb2.Struct
    def __init__(self, interaction_id: _Optional[str] = ..., kind: _Optional[_Union[InteractionKind, str]] = ..., turn_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., input_json: _Optional[str] = ..., tool_use_id: _Optional[str] = ..., questions: _Optional[_Iterable[_Union[Question, _Mapping]]] = ..., requested_seq: _Optional[int] = ..., input: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class Question(_message.Message):
    __slots__ = ("question", "header", "options", "multi_select")
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    MULTI_SELECT_FIELD_NUMBER: _ClassVar[int]
    question: str
    header: str
    options: _containers.RepeatedScalarFieldContainer[str]
    multi_select: bool
    def __init__(self, question: _Optional[str] = ..., header: _Optional[str] = ..., options: _Optional[_Iterable[str]] = ..., multi_select: _Optional[bool] = ...) -> None: ...

class BackgroundTask(_message.Message):
    __slots__ = ("task_id", "description", "started_seq")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    STARTED_SEQ_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    description: str
    started_seq: int
    def __init__(self, task_id: _Optional[str] = ..., description: _Optional[str] = ..., started_seq: _Optional[int] = ...) -> None: ...

class EngineCapabilities(_message.Message):
    __slots__ = ("engine", "permission_modes", "supports_interactions", "supports_background_tasks", "supports_server_info", "tools")
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_MODES_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_INTERACTIONS_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_BACKGROUND_TASKS_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_SERVER_INFO_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    engine: str
    permission_modes: _containers.RepeatedScalarFieldContainer[str]
    supports_interactions: bool
    supports_background_tasks: bool
    supports_server_info: bool
    tools: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, engine: _Optional[str] = ..., permission_modes: _Optional[_Iterable[str]] = ..., supports_interactions: _Optional[bool] = ..., supports_background_tasks: _Optional[bool] = ..., supports_server_info: _Optional[bool] = ..., tools: _Optional[_Iterable[str]] = ...) -> None: ...
