import datetime

from astrabox.agents.v1 import agent_pb2 as _agent_pb2
from astrabox.environments.v1 import environment_pb2 as _environment_pb2
from astrabox.memory.v1 import memory_service_pb2 as _memory_service_pb2
from astrabox.sessionkernel.v1 import session_pb2 as _session_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_KIND_UNSPECIFIED: _ClassVar[EventKind]
    EVENT_KIND_SESSION_CREATED: _ClassVar[EventKind]
    EVENT_KIND_STARTUP_REQUESTED: _ClassVar[EventKind]
    EVENT_KIND_RUNTIME_READY: _ClassVar[EventKind]
    EVENT_KIND_RUNTIME_FAILED: _ClassVar[EventKind]
    EVENT_KIND_USER_MESSAGE_ACCEPTED: _ClassVar[EventKind]
    EVENT_KIND_ENGINE_MESSAGE: _ClassVar[EventKind]
    EVENT_KIND_TURN_COMPLETED: _ClassVar[EventKind]
    EVENT_KIND_TURN_FAILED: _ClassVar[EventKind]
    EVENT_KIND_SESSION_DELETED: _ClassVar[EventKind]
    EVENT_KIND_INTERACTION_REQUESTED: _ClassVar[EventKind]
    EVENT_KIND_INTERACTION_ANSWERED: _ClassVar[EventKind]
    EVENT_KIND_INTERACTION_CLOSED: _ClassVar[EventKind]
    EVENT_KIND_INTERRUPT_REQUESTED: _ClassVar[EventKind]
    EVENT_KIND_TURN_INTERRUPTED: _ClassVar[EventKind]
    EVENT_KIND_INPUT_DELIVERED: _ClassVar[EventKind]
    EVENT_KIND_PERMISSION_MODE_CHANGED: _ClassVar[EventKind]
    EVENT_KIND_SESSION_ARCHIVED: _ClassVar[EventKind]
    EVENT_KIND_STARTUP_PHASE: _ClassVar[EventKind]
    EVENT_KIND_RUNTIME_LOST: _ClassVar[EventKind]
    EVENT_KIND_TASK_STOP_REQUESTED: _ClassVar[EventKind]
    EVENT_KIND_ENGINE_INFO: _ClassVar[EventKind]
    EVENT_KIND_ENGINE_TURN_STARTED: _ClassVar[EventKind]
    EVENT_KIND_SANDBOX_RECONCILED: _ClassVar[EventKind]
    EVENT_KIND_RUNTIME_STOP_REQUESTED: _ClassVar[EventKind]
    EVENT_KIND_RUNTIME_STOPPED: _ClassVar[EventKind]
    EVENT_KIND_TOOL_CALL_SETTLED: _ClassVar[EventKind]
    EVENT_KIND_BACKGROUND_TASK_LOST: _ClassVar[EventKind]
    EVENT_KIND_RUNTIME_DESTROY_FAILED: _ClassVar[EventKind]
    EVENT_KIND_SANDBOX_RETAINED: _ClassVar[EventKind]
    EVENT_KIND_TOOL_GRANTED: _ClassVar[EventKind]
    EVENT_KIND_TOOL_GRANT_REVOKED: _ClassVar[EventKind]
    EVENT_KIND_MCP_SERVER_UNAVAILABLE: _ClassVar[EventKind]
    EVENT_KIND_NETWORK_REQUEST_REFUSED: _ClassVar[EventKind]
    EVENT_KIND_MEMORY_SYNCED: _ClassVar[EventKind]
    EVENT_KIND_SESSION_FORKED: _ClassVar[EventKind]
    EVENT_KIND_SUBAGENT_STARTED: _ClassVar[EventKind]
    EVENT_KIND_SUBAGENT_FINISHED: _ClassVar[EventKind]

class EngineContentKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENGINE_CONTENT_KIND_UNSPECIFIED: _ClassVar[EngineContentKind]
    ENGINE_CONTENT_KIND_ASSISTANT: _ClassVar[EngineContentKind]
    ENGINE_CONTENT_KIND_USER: _ClassVar[EngineContentKind]
    ENGINE_CONTENT_KIND_SYSTEM: _ClassVar[EngineContentKind]
    ENGINE_CONTENT_KIND_RESULT: _ClassVar[EngineContentKind]
    ENGINE_CONTENT_KIND_OTHER: _ClassVar[EngineContentKind]
EVENT_KIND_UNSPECIFIED: EventKind
EVENT_KIND_SESSION_CREATED: EventKind
EVENT_KIND_STARTUP_REQUESTED: EventKind
EVENT_KIND_RUNTIME_READY: EventKind
EVENT_KIND_RUNTIME_FAILED: EventKind
EVENT_KIND_USER_MESSAGE_ACCEPTED: EventKind
EVENT_KIND_ENGINE_MESSAGE: EventKind
EVENT_KIND_TURN_COMPLETED: EventKind
EVENT_KIND_TURN_FAILED: EventKind
EVENT_KIND_SESSION_DELETED: EventKind
EVENT_KIND_INTERACTION_REQUESTED: EventKind
EVENT_KIND_INTERACTION_ANSWERED: EventKind
EVENT_KIND_INTERACTION_CLOSED: EventKind
EVENT_KIND_INTERRUPT_REQUESTED: EventKind
EVENT_KIND_TURN_INTERRUPTED: EventKind
EVENT_KIND_INPUT_DELIVERED: EventKind
EVENT_KIND_PERMISSION_MODE_CHANGED: EventKind
EVENT_KIND_SESSION_ARCHIVED: EventKind
EVENT_KIND_STARTUP_PHASE: EventKind
EVENT_KIND_RUNTIME_LOST: EventKind
EVENT_KIND_TASK_STOP_REQUESTED: EventKind
EVENT_KIND_ENGINE_INFO: EventKind
EVENT_KIND_ENGINE_TURN_STARTED: EventKind
EVENT_KIND_SANDBOX_RECONCILED: EventKind
EVENT_KIND_RUNTIME_STOP_REQUESTED: EventKind
EVENT_KIND_RUNTIME_STOPPED: EventKind
EVENT_KIND_TOOL_CALL_SETTLED: EventKind
EVENT_KIND_BACKGROUND_TASK_LOST: EventKind
EVENT_KIND_RUNTIME_DESTROY_FAILED: EventKind
EVENT_KIND_SANDBOX_RETAINED: EventKind
EVENT_KIND_TOOL_GRANTED: EventKind
EVENT_KIND_TOOL_GRANT_REVOKED: EventKind
EVENT_KIND_MCP_SERVER_UNAVAILABLE: EventKind
EVENT_KIND_NETWORK_REQUEST_REFUSED: EventKind
EVENT_KIND_MEMORY_SYNCED: EventKind
EVENT_KIND_SESSION_FORKED: EventKind
EVENT_KIND_SUBAGENT_STARTED: EventKind
EVENT_KIND_SUBAGENT_FINISHED: EventKind
ENGINE_CONTENT_KIND_UNSPECIFIED: EngineContentKind
ENGINE_CONTENT_KIND_ASSISTANT: EngineContentKind
ENGINE_CONTENT_KIND_USER: EngineContentKind
ENGINE_CONTENT_KIND_SYSTEM: EngineContentKind
ENGINE_CONTENT_KIND_RESULT: EngineContentKind
ENGINE_CONTENT_KIND_OTHER: EngineContentKind

class SessionEvent(_message.Message):
    __slots__ = ("session_id", "seq", "time", "turn_id", "kind", "actor", "produce_time", "session_created", "startup_requested", "runtime_ready", "runtime_failed", "user_message_accepted", "engine_message", "turn_completed", "turn_failed", "session_deleted", "interaction_requested", "interaction_answered", "interaction_closed", "interrupt_requested", "turn_interrupted", "input_delivered", "permission_mode_changed", "session_archived", "startup_phase", "runtime_lost", "task_stop_requested", "engine_info", "engine_turn_started", "sandbox_reconciled", "runtime_stop_requested", "runtime_stopped", "tool_call_settled", "background_task_lost", "runtime_destroy_failed", "sandbox_retained", "tool_granted", "tool_grant_revoked", "mcp_server_unavailable", "network_request_refused", "memory_synced", "session_forked", "subagent_started", "subagent_finished")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    PRODUCE_TIME_FIELD_NUMBER: _ClassVar[int]
    SESSION_CREATED_FIELD_NUMBER: _ClassVar[int]
    STARTUP_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_READY_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FAILED_FIELD_NUMBER: _ClassVar[int]
    USER_MESSAGE_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    ENGINE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TURN_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    TURN_FAILED_FIELD_NUMBER: _ClassVar[int]
    SESSION_DELETED_FIELD_NUMBER: _ClassVar[int]
    INTERACTION_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    INTERACTION_ANSWERED_FIELD_NUMBER: _ClassVar[int]
    INTERACTION_CLOSED_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    TURN_INTERRUPTED_FIELD_NUMBER: _ClassVar[int]
    INPUT_DELIVERED_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_MODE_CHANGED_FIELD_NUMBER: _ClassVar[int]
    SESSION_ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    STARTUP_PHASE_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_LOST_FIELD_NUMBER: _ClassVar[int]
    TASK_STOP_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    ENGINE_INFO_FIELD_NUMBER: _ClassVar[int]
    ENGINE_TURN_STARTED_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_RECONCILED_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_STOP_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_STOPPED_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_SETTLED_FIELD_NUMBER: _ClassVar[int]
    BACKGROUND_TASK_LOST_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_DESTROY_FAILED_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_RETAINED_FIELD_NUMBER: _ClassVar[int]
    TOOL_GRANTED_FIELD_NUMBER: _ClassVar[int]
    TOOL_GRANT_REVOKED_FIELD_NUMBER: _ClassVar[int]
    MCP_SERVER_UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    NETWORK_REQUEST_REFUSED_FIELD_NUMBER: _ClassVar[int]
    MEMORY_SYNCED_FIELD_NUMBER: _ClassVar[int]
    SESSION_FORKED_FIELD_NUMBER: _ClassVar[int]
    SUBAGENT_STARTED_FIELD_NUMBER: _ClassVar[int]
    SUBAGENT_FINISHED_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    seq: int
    time: _timestamp_pb2.Timestamp
    turn_id: str
    kind: EventKind
    actor: str
    produce_time: _timestamp_pb2.Timestamp
    session_created: SessionCreated
    startup_requested: StartupRequested
    runtime_ready: RuntimeReady
    runtime_failed: RuntimeFailed
    user_message_accepted: UserMessageAccepted
    engine_message: EngineMessage
    turn_completed: TurnCompleted
    turn_failed: TurnFailed
    session_deleted: SessionDeleted
    interaction_requested: InteractionRequested
    interaction_answered: InteractionAnswered
    interaction_closed: InteractionClosed
    interrupt_requested: InterruptRequested
    turn_interrupted: TurnInterrupted
    input_delivered: InputDelivered
    permission_mode_changed: PermissionModeChanged
    session_archived: SessionArchived
    startup_phase: StartupPhase
    runtime_lost: RuntimeLost
    task_stop_requested: TaskStopRequested
    engine_info: EngineInfo
    engine_turn_started: EngineTurnStarted
    sandbox_reconciled: SandboxReconciled
    runtime_stop_requested: RuntimeStopRequested
    runtime_stopped: RuntimeStopped
    tool_call_settled: ToolCallSettled
    background_task_lost: BackgroundTaskLost
    runtime_destroy_failed: RuntimeDestroyFailed
    sandbox_retained: SandboxRetained
    tool_granted: ToolGranted
    tool_grant_revoked: ToolGrantRevoked
    mcp_server_unavailable: McpServerUnavailable
    network_request_refused: NetworkRequestRefused
    memory_synced: MemorySynced
    session_forked: SessionForked
    subagent_started: SubagentStarted
    subagent_finished: SubagentFinished
    def __init__(self, session_id: _Optional[str] = ..., seq: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., turn_id: _Optional[str] = ..., kind: _Optional[_Union[EventKind, str]] = ..., actor: _Optional[str] = ..., produce_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., session_created: _Optional[_Union[SessionCreated, _Mapping]] = ..., startup_requested: _Optional[_Union[StartupRequested, _Mapping]] = ..., runtime_ready: _Optional[_Union[RuntimeReady, _Mapping]] = ..., runtime_failed: _Optional[_Union[RuntimeFailed, _Mapping]] = ..., user_message_accepted: _Optional[_Union[UserMessageAccepted, _Mapping]] = ..., engine_message: _Optional[_Union[EngineMessage, _Mapping]] = ..., turn_completed: _Optional[_Union[TurnCompleted, _Mapping]] = ..., turn_failed: _Optional[_Union[TurnFailed, _Mapping]] = ..., session_deleted: _Optional[_Union[SessionDeleted, _Mapping]] = ..., interaction_requested: _Optional[_Union[InteractionRequested, _Mapping]] = ..., interaction_answered: _Optional[_Union[InteractionAnswered, _Mapping]] = ..., interaction_closed: _Optional[_Union[InteractionClosed, _Mapping]] = ..., interrupt_requested: _Optional[_Union[InterruptRequested, _Mapping]] = ..., turn_interrupted: _Optional[_Union[TurnInterrupted, _Mapping]] = ..., input_delivered: _Optional[_Union[InputDelivered, _Mapping]] = ..., permission_mode_changed: _Optional[_Union[PermissionModeChanged, _Mapping]] = ..., session_archived: _Optional[_Union[SessionArchived, _Mapping]] = ..., startup_phase: _Optional[_Union[StartupPhase, _Mapping]] = ..., runtime_lost: _Optional[_Union[RuntimeLost, _Mapping]] = ..., task_stop_requested: _Optional[_Union[TaskStopRequested, _Mapping]] = ..., engine_info: _Optional[_Union[EngineInfo, _Mapping]] = ..., engine_turn_started: _Optional[_Union[EngineTurnStarted, _Mapping]] = ..., sandbox_reconciled: _Optional[_Union[SandboxReconciled, _Mapping]] = ..., runtime_stop_requested: _Optional[_Union[RuntimeStopRequested, _Mapping]] = ..., runtime_stopped: _Optional[_Union[RuntimeStopped, _Mapping]] = ..., tool_call_settled: _Optional[_Union[ToolCallSettled, _Mapping]] = ..., background_task_lost: _Optional[_Union[BackgroundTaskLost, _Mapping]] = ..., runtime_destroy_failed: _Optional[_Union[RuntimeDestroyFailed, _Mapping]] = ..., sandbox_retained: _Optional[_Union[SandboxRetained, _Mapping]] = ..., tool_granted: _Optional[_Union[ToolGranted, _Mapping]] = ..., tool_grant_revoked: _Optional[_Union[ToolGrantRevoked, _Mapping]] = ..., mcp_server_unavailable: _Optional[_Union[McpServerUnavailable, _Mapping]] = ..., network_request_refused: _Optional[_Union[NetworkRequestRefused, _Mapping]] = ..., memory_synced: _Optional[_Union[MemorySynced, _Mapping]] = ..., session_forked: _Optional[_Union[SessionForked, _Mapping]] = ..., subagent_started: _Optional[_Union[SubagentStarted, _Mapping]] = ..., subagent_finished: _Optional[_Union[SubagentFinished, _Mapping]] = ...) -> None: ...

class SessionCreated(_message.Message):
    __slots__ = ("engine", "permission_mode", "model", "request_id", "agent", "config", "environment", "git_source", "memory", "forked_from")
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_MODE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    GIT_SOURCE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    FORKED_FROM_FIELD_NUMBER: _ClassVar[int]
    engine: str
    permission_mode: str
    model: str
    request_id: str
    agent: _session_pb2.SessionAgent
    config: _agent_pb2.AgentSpec
    environment: _session_pb2.SessionEnvironment
    git_source: _environment_pb2.GitSource
    memory: _containers.RepeatedCompositeFieldContainer[_memory_service_pb2.MemoryAttachment]
    forked_from: _session_pb2.SessionFork
    def __init__(self, engine: _Optional[str] = ..., permission_mode: _Optional[str] = ..., model: _Optional[str] = ..., request_id: _Optional[str] = ..., agent: _Optional[_Union[_session_pb2.SessionAgent, _Mapping]] = ..., config: _Optional[_Union[_agent_pb2.AgentSpec, _Mapping]] = ..., environment: _Optional[_Union[_session_pb2.SessionEnvironment, _Mapping]] = ..., git_source: _Optional[_Union[_environment_pb2.GitSource, _Mapping]] = ..., memory: _Optional[_Iterable[_Union[_memory_service_pb2.MemoryAttachment, _Mapping]]] = ..., forked_from: _Optional[_Union[_session_pb2.SessionFork, _Mapping]] = ...) -> None: ...

class SessionForked(_message.Message):
    __slots__ = ("fork_session_id", "through_seq", "request_id")
    FORK_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    THROUGH_SEQ_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    fork_session_id: str
    through_seq: int
    request_id: str
    def __init__(self, fork_session_id: _Optional[str] = ..., through_seq: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class StartupRequested(_message.Message):
    __slots__ = ("agent_id", "command_id")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    command_id: str
    def __init__(self, agent_id: _Optional[str] = ..., command_id: _Optional[str] = ...) -> None: ...

class RuntimeReady(_message.Message):
    __slots__ = ("sandbox_id", "driver", "workspace", "sandbox_ms")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    DRIVER_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_MS_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    driver: str
    workspace: str
    sandbox_ms: int
    def __init__(self, sandbox_id: _Optional[str] = ..., driver: _Optional[str] = ..., workspace: _Optional[str] = ..., sandbox_ms: _Optional[int] = ...) -> None: ...

class RuntimeFailed(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class UserMessageAccepted(_message.Message):
    __slots__ = ("client_message_id", "text", "permission_mode")
    CLIENT_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_MODE_FIELD_NUMBER: _ClassVar[int]
    client_message_id: str
    text: str
    permission_mode: str
    def __init__(self, client_message_id: _Optional[str] = ..., text: _Optional[str] = ..., permission_mode: _Optional[str] = ...) -> None: ...

class EngineMessage(_message.Message):
    __slots__ = ("type_name", "payload_json", "output_seq", "late", "content")
    TYPE_NAME_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SEQ_FIELD_NUMBER: _ClassVar[int]
    LATE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    type_name: str
    payload_json: str
    output_seq: int
    late: bool
    content: EngineContent
    def __init__(self, type_name: _Optional[str] = ..., payload_json: _Optional[str] = ..., output_seq: _Optional[int] = ..., late: _Optional[bool] = ..., content: _Optional[_Union[EngineContent, _Mapping]] = ...) -> None: ...

class EngineContent(_message.Message):
    __slots__ = ("kind", "blocks", "model", "parent_tool_use_id", "subtype", "is_error", "result", "error", "errors")
    KIND_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PARENT_TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    SUBTYPE_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    kind: EngineContentKind
    blocks: _containers.RepeatedCompositeFieldContainer[ContentBlock]
    model: str
    parent_tool_use_id: str
    subtype: str
    is_error: bool
    result: str
    error: str
    errors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, kind: _Optional[_Union[EngineContentKind, str]] = ..., blocks: _Optional[_Iterable[_Union[ContentBlock, _Mapping]]] = ..., model: _Optional[str] = ..., parent_tool_use_id: _Optional[str] = ..., subtype: _Optional[str] = ..., is_error: _Optional[bool] = ..., result: _Optional[str] = ..., error: _Optional[str] = ..., errors: _Optional[_Iterable[str]] = ...) -> None: ...

class ContentBlock(_message.Message):
    __slots__ = ("text", "thinking", "tool_use", "tool_result", "other")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    TOOL_USE_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    OTHER_FIELD_NUMBER: _ClassVar[int]
    text: TextBlock
    thinking: ThinkingBlock
    tool_use: ToolUseBlock
    tool_result: ToolResultBlock
    other: OtherBlock
    def __init__(self, text: _Optional[_Union[TextBlock, _Mapping]] = ..., thinking: _Optional[_Union[ThinkingBlock, _Mapping]] = ..., tool_use: _Optional[_Union[ToolUseBlock, _Mapping]] = ..., tool_result: _Optional[_Union[ToolResultBlock, _Mapping]] = ..., other: _Optional[_Union[OtherBlock, _Mapping]] = ...) -> None: ...

class TextBlock(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class ThinkingBlock(_message.Message):
    __slots__ = ("thinking",)
    THINKING_FIELD_NUMBER: _ClassVar[int]
    thinking: str
    def __init__(self, thinking: _Optional[str] = ...) -> None: ...

class ToolUseBlock(_message.Message):
    __slots__ = ("id", "name", "input")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    input: _struct_pb2.Struct
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., input: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ToolResultBlock(_message.Message):
    __slots__ = ("tool_use_id", "is_error", "content")
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    tool_use_id: str
    is_error: bool
    content: str
    def __init__(self, tool_use_id: _Optional[str] = ..., is_error: _Optional[bool] = ..., content: _Optional[str] = ...) -> None: ...

class OtherBlock(_message.Message):
    __slots__ = ("type", "json")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    type: str
    json: str
    def __init__(self, type: _Optional[str] = ..., json: _Optional[str] = ...) -> None: ...

class TurnCompleted(_message.Message):
    __slots__ = ("subtype", "is_error", "duration_ms", "result", "usage")
    SUBTYPE_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    subtype: str
    is_error: bool
    duration_ms: int
    result: str
    usage: _session_pb2.Usage
    def __init__(self, subtype: _Optional[str] = ..., is_error: _Optional[bool] = ..., duration_ms: _Optional[int] = ..., result: _Optional[str] = ..., usage: _Optional[_Union[_session_pb2.Usage, _Mapping]] = ...) -> None: ...

class TurnFailed(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class SessionDeleted(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class InteractionRequested(_message.Message):
    __slots__ = ("interaction",)
    INTERACTION_FIELD_NUMBER: _ClassVar[int]
    interaction: _session_pb2.Interaction
    def __init__(self, interaction: _Optional[_Union[_session_pb2.Interaction, _Mapping]] = ...) -> None: ...

class InteractionAnswered(_message.Message):
    __slots__ = ("interaction_id", "request_id", "decision", "updated_input_json", "message", "answers", "tool_result", "is_error")
    class AnswersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    INTERACTION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    UPDATED_INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    interaction_id: str
    request_id: str
    decision: str
    updated_input_json: str
    message: str
    answers: _containers.ScalarMap[str, str]
    tool_result: str
    is_error: bool
    def __init__(self, interaction_id: _Optional[str] = ..., request_id: _Optional[str] = ..., decision: _Optional[str] = ..., updated_input_json: _Optional[str] = ..., message: _Optional[str] = ..., answers: _Optional[_Mapping[str, str]] = ..., tool_result: _Optional[str] = ..., is_error: _Optional[bool] = ...) -> None: ...

class InteractionClosed(_message.Message):
    __slots__ = ("interaction_id", "reason")
    INTERACTION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    interaction_id: str
    reason: str
    def __init__(self, interaction_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class InterruptRequested(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class TurnInterrupted(_message.Message):
    __slots__ = ("reason", "usage")
    REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    reason: str
    usage: _session_pb2.Usage
    def __init__(self, reason: _Optional[str] = ..., usage: _Optional[_Union[_session_pb2.Usage, _Mapping]] = ...) -> None: ...

class InputDelivered(_message.Message):
    __slots__ = ("accepted_seq",)
    ACCEPTED_SEQ_FIELD_NUMBER: _ClassVar[int]
    accepted_seq: int
    def __init__(self, accepted_seq: _Optional[int] = ...) -> None: ...

class PermissionModeChanged(_message.Message):
    __slots__ = ("permission_mode", "previous_permission_mode", "request_id")
    PERMISSION_MODE_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_PERMISSION_MODE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    permission_mode: str
    previous_permission_mode: str
    request_id: str
    def __init__(self, permission_mode: _Optional[str] = ..., previous_permission_mode: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class SessionArchived(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class StartupPhase(_message.Message):
    __slots__ = ("phase", "duration_ms")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    phase: str
    duration_ms: int
    def __init__(self, phase: _Optional[str] = ..., duration_ms: _Optional[int] = ...) -> None: ...

class RuntimeLost(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class TaskStopRequested(_message.Message):
    __slots__ = ("task_id", "request_id")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    request_id: str
    def __init__(self, task_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class EngineInfo(_message.Message):
    __slots__ = ("slash_commands", "server_info_json")
    SLASH_COMMANDS_FIELD_NUMBER: _ClassVar[int]
    SERVER_INFO_JSON_FIELD_NUMBER: _ClassVar[int]
    slash_commands: _containers.RepeatedScalarFieldContainer[str]
    server_info_json: str
    def __init__(self, slash_commands: _Optional[_Iterable[str]] = ..., server_info_json: _Optional[str] = ...) -> None: ...

class EngineTurnStarted(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class SandboxReconciled(_message.Message):
    __slots__ = ("action", "sandbox_id", "driver", "reason")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    DRIVER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    action: str
    sandbox_id: str
    driver: str
    reason: str
    def __init__(self, action: _Optional[str] = ..., sandbox_id: _Optional[str] = ..., driver: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RuntimeStopRequested(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class RuntimeStopped(_message.Message):
    __slots__ = ("reason", "sandbox_id")
    REASON_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    reason: str
    sandbox_id: str
    def __init__(self, reason: _Optional[str] = ..., sandbox_id: _Optional[str] = ...) -> None: ...

class ToolCallSettled(_message.Message):
    __slots__ = ("tool_use_id", "tool_name", "reason", "is_error")
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    tool_use_id: str
    tool_name: str
    reason: str
    is_error: bool
    def __init__(self, tool_use_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., reason: _Optional[str] = ..., is_error: _Optional[bool] = ...) -> None: ...

class BackgroundTaskLost(_message.Message):
    __slots__ = ("task_id", "description", "reason")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    description: str
    reason: str
    def __init__(self, task_id: _Optional[str] = ..., description: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RuntimeDestroyFailed(_message.Message):
    __slots__ = ("reason", "attempts", "retry_in_seconds", "abandoned")
    REASON_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_IN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ABANDONED_FIELD_NUMBER: _ClassVar[int]
    reason: str
    attempts: int
    retry_in_seconds: int
    abandoned: bool
    def __init__(self, reason: _Optional[str] = ..., attempts: _Optional[int] = ..., retry_in_seconds: _Optional[int] = ..., abandoned: _Optional[bool] = ...) -> None: ...

class SandboxRetained(_message.Message):
    __slots__ = ("sandbox_id", "agent_id")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    agent_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., agent_id: _Optional[str] = ...) -> None: ...

class ToolGranted(_message.Message):
    __slots__ = ("grant",)
    GRANT_FIELD_NUMBER: _ClassVar[int]
    grant: _session_pb2.ToolGrant
    def __init__(self, grant: _Optional[_Union[_session_pb2.ToolGrant, _Mapping]] = ...) -> None: ...

class ToolGrantRevoked(_message.Message):
    __slots__ = ("grant_id", "request_id")
    GRANT_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    grant_id: str
    request_id: str
    def __init__(self, grant_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class McpServerUnavailable(_message.Message):
    __slots__ = ("server", "reason")
    SERVER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    server: str
    reason: str
    def __init__(self, server: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class NetworkRequestRefused(_message.Message):
    __slots__ = ("host", "port", "reason", "suppressed")
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SUPPRESSED_FIELD_NUMBER: _ClassVar[int]
    host: str
    port: int
    reason: str
    suppressed: int
    def __init__(self, host: _Optional[str] = ..., port: _Optional[int] = ..., reason: _Optional[str] = ..., suppressed: _Optional[int] = ...) -> None: ...

class MemorySynced(_message.Message):
    __slots__ = ("store_id", "store", "written", "refused")
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    store_id: str
    store: str
    written: _containers.RepeatedCompositeFieldContainer[MemorySyncedDocument]
    refused: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, store_id: _Optional[str] = ..., store: _Optional[str] = ..., written: _Optional[_Iterable[_Union[MemorySyncedDocument, _Mapping]]] = ..., refused: _Optional[_Iterable[str]] = ...) -> None: ...

class MemorySyncedDocument(_message.Message):
    __slots__ = ("path", "version", "deleted", "conflict", "conflicting_version")
    PATH_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_FIELD_NUMBER: _ClassVar[int]
    CONFLICTING_VERSION_FIELD_NUMBER: _ClassVar[int]
    path: str
    version: int
    deleted: bool
    conflict: bool
    conflicting_version: int
    def __init__(self, path: _Optional[str] = ..., version: _Optional[int] = ..., deleted: _Optional[bool] = ..., conflict: _Optional[bool] = ..., conflicting_version: _Optional[int] = ...) -> None: ...

class SubagentStarted(_message.Message):
    __slots__ = ("interaction_id", "child_session_id", "agent", "agent_version")
    INTERACTION_ID_FIELD_NUMBER: _ClassVar[int]
    CHILD_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    interaction_id: str
    child_session_id: str
    agent: str
    agent_version: int
    def __init__(self, interaction_id: _Optional[str] = ..., child_session_id: _Optional[str] = ..., agent: _Optional[str] = ..., agent_version: _Optional[int] = ...) -> None: ...

class SubagentFinished(_message.Message):
    __slots__ = ("interaction_id", "child_session_id", "is_error", "reason", "result_preview")
    INTERACTION_ID_FIELD_NUMBER: _ClassVar[int]
    CHILD_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESULT_PREVIEW_FIELD_NUMBER: _ClassVar[int]
    interaction_id: str
    child_session_id: str
    is_error: bool
    reason: str
    result_preview: str
    def __init__(self, interaction_id: _Optional[str] = ..., child_session_id: _Optional[str] = ..., is_error: _Optional[bool] = ..., reason: _Optional[str] = ..., result_preview: _Optional[str] = ...) -> None: ...
