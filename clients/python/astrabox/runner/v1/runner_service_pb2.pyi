import datetime

from astrabox.agents.v1 import agent_pb2 as _agent_pb2
from astrabox.environments.v1 import environment_pb2 as _environment_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.rpc import status_pb2 as _status_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DeltaKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DELTA_KIND_UNSPECIFIED: _ClassVar[DeltaKind]
    DELTA_KIND_TEXT: _ClassVar[DeltaKind]
    DELTA_KIND_TOOL_INPUT: _ClassVar[DeltaKind]
    DELTA_KIND_THINKING: _ClassVar[DeltaKind]

class DestroyVerdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DESTROY_VERDICT_UNSPECIFIED: _ClassVar[DestroyVerdict]
    DESTROY_VERDICT_CONFIRMED: _ClassVar[DestroyVerdict]
    DESTROY_VERDICT_UNCONFIRMED: _ClassVar[DestroyVerdict]
    DESTROY_VERDICT_REFUSED: _ClassVar[DestroyVerdict]
    DESTROY_VERDICT_RETAINED: _ClassVar[DestroyVerdict]
DELTA_KIND_UNSPECIFIED: DeltaKind
DELTA_KIND_TEXT: DeltaKind
DELTA_KIND_TOOL_INPUT: DeltaKind
DELTA_KIND_THINKING: DeltaKind
DESTROY_VERDICT_UNSPECIFIED: DestroyVerdict
DESTROY_VERDICT_CONFIRMED: DestroyVerdict
DESTROY_VERDICT_UNCONFIRMED: DestroyVerdict
DESTROY_VERDICT_REFUSED: DestroyVerdict
DESTROY_VERDICT_RETAINED: DestroyVerdict

class ConnectRequest(_message.Message):
    __slots__ = ("hello", "output_batch", "command_ack", "heartbeat", "workspace_reply", "deltas", "build_progress")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_BATCH_FIELD_NUMBER: _ClassVar[int]
    COMMAND_ACK_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_REPLY_FIELD_NUMBER: _ClassVar[int]
    DELTAS_FIELD_NUMBER: _ClassVar[int]
    BUILD_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    output_batch: OutputBatch
    command_ack: CommandAck
    heartbeat: Heartbeat
    workspace_reply: WorkspaceReply
    deltas: DeltaBatch
    build_progress: _environment_pb2.BuildProgress
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., output_batch: _Optional[_Union[OutputBatch, _Mapping]] = ..., command_ack: _Optional[_Union[CommandAck, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., workspace_reply: _Optional[_Union[WorkspaceReply, _Mapping]] = ..., deltas: _Optional[_Union[DeltaBatch, _Mapping]] = ..., build_progress: _Optional[_Union[_environment_pb2.BuildProgress, _Mapping]] = ...) -> None: ...

class ConnectResponse(_message.Message):
    __slots__ = ("welcome", "output_ack", "command", "heartbeat_ack", "workspace_request")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_ACK_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_ACK_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_REQUEST_FIELD_NUMBER: _ClassVar[int]
    welcome: Welcome
    output_ack: OutputAck
    command: Command
    heartbeat_ack: HeartbeatAck
    workspace_request: WorkspaceRequest
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., output_ack: _Optional[_Union[OutputAck, _Mapping]] = ..., command: _Optional[_Union[Command, _Mapping]] = ..., heartbeat_ack: _Optional[_Union[HeartbeatAck, _Mapping]] = ..., workspace_request: _Optional[_Union[WorkspaceRequest, _Mapping]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("agent_id", "enrollment_token", "drivers", "engines", "capacity", "sessions", "instance_id", "engine_manifests", "agent_credential", "agent_version", "join_token", "isolation")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ENROLLMENT_TOKEN_FIELD_NUMBER: _ClassVar[int]
    DRIVERS_FIELD_NUMBER: _ClassVar[int]
    ENGINES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ENGINE_MANIFESTS_FIELD_NUMBER: _ClassVar[int]
    AGENT_CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    JOIN_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    enrollment_token: str
    drivers: _containers.RepeatedScalarFieldContainer[str]
    engines: _containers.RepeatedScalarFieldContainer[str]
    capacity: int
    sessions: _containers.RepeatedCompositeFieldContainer[SessionCursor]
    instance_id: str
    engine_manifests: _containers.RepeatedCompositeFieldContainer[EngineManifest]
    agent_credential: str
    agent_version: str
    join_token: str
    isolation: str
    def __init__(self, agent_id: _Optional[str] = ..., enrollment_token: _Optional[str] = ..., drivers: _Optional[_Iterable[str]] = ..., engines: _Optional[_Iterable[str]] = ..., capacity: _Optional[int] = ..., sessions: _Optional[_Iterable[_Union[SessionCursor, _Mapping]]] = ..., instance_id: _Optional[str] = ..., engine_manifests: _Optional[_Iterable[_Union[EngineManifest, _Mapping]]] = ..., agent_credential: _Optional[str] = ..., agent_version: _Optional[str] = ..., join_token: _Optional[str] = ..., isolation: _Optional[str] = ...) -> None: ...

class EngineManifest(_message.Message):
    __slots__ = ("kind", "permission_modes", "default_permission_mode", "supports_interactions", "supports_background_tasks", "supports_server_info", "tools")
    KIND_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_MODES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_PERMISSION_MODE_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_INTERACTIONS_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_BACKGROUND_TASKS_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_SERVER_INFO_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    permission_modes: _containers.RepeatedScalarFieldContainer[str]
    default_permission_mode: str
    supports_interactions: bool
    supports_background_tasks: bool
    supports_server_info: bool
    tools: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, kind: _Optional[str] = ..., permission_modes: _Optional[_Iterable[str]] = ..., default_permission_mode: _Optional[str] = ..., supports_interactions: _Optional[bool] = ..., supports_background_tasks: _Optional[bool] = ..., supports_server_info: _Optional[bool] = ..., tools: _Optional[_Iterable[str]] = ...) -> None: ...

class SessionCursor(_message.Message):
    __slots__ = ("session_id", "output_seq")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SEQ_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    output_seq: int
    def __init__(self, session_id: _Optional[str] = ..., output_seq: _Optional[int] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("lease", "committed", "heartbeat_interval_ms", "live_sessions")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    LIVE_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    committed: _containers.RepeatedCompositeFieldContainer[SessionCursor]
    heartbeat_interval_ms: int
    live_sessions: LiveSessions
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ..., committed: _Optional[_Iterable[_Union[SessionCursor, _Mapping]]] = ..., heartbeat_interval_ms: _Optional[int] = ..., live_sessions: _Optional[_Union[LiveSessions, _Mapping]] = ...) -> None: ...

class LiveSessions(_message.Message):
    __slots__ = ("session_ids",)
    SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    session_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, session_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ("generation", "expire_time")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    generation: int
    expire_time: _timestamp_pb2.Timestamp
    def __init__(self, generation: _Optional[int] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DeltaBatch(_message.Message):
    __slots__ = ("deltas",)
    DELTAS_FIELD_NUMBER: _ClassVar[int]
    deltas: _containers.RepeatedCompositeFieldContainer[Delta]
    def __init__(self, deltas: _Optional[_Iterable[_Union[Delta, _Mapping]]] = ...) -> None: ...

class Delta(_message.Message):
    __slots__ = ("session_id", "turn_id", "message_id", "index", "kind", "text", "after_output_seq")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    AFTER_OUTPUT_SEQ_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    turn_id: str
    message_id: str
    index: int
    kind: DeltaKind
    text: str
    after_output_seq: int
    def __init__(self, session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., message_id: _Optional[str] = ..., index: _Optional[int] = ..., kind: _Optional[_Union[DeltaKind, str]] = ..., text: _Optional[str] = ..., after_output_seq: _Optional[int] = ...) -> None: ...

class OutputBatch(_message.Message):
    __slots__ = ("outputs",)
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    outputs: _containers.RepeatedCompositeFieldContainer[Output]
    def __init__(self, outputs: _Optional[_Iterable[_Union[Output, _Mapping]]] = ...) -> None: ...

class Output(_message.Message):
    __slots__ = ("session_id", "output_seq", "turn_id", "produce_time", "traceparent", "engine_message", "runtime_started", "runtime_start_failed", "turn_aborted", "interaction_requested", "turn_interrupted", "input_consumed", "startup_phase", "engine_info", "transcript_snapshot", "engine_turn_started", "runtime_lost", "sandbox_reconciled", "runtime_stopped", "mcp_server_unavailable", "egress_refused", "memory_changes")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SEQ_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCE_TIME_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    ENGINE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_STARTED_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_START_FAILED_FIELD_NUMBER: _ClassVar[int]
    TURN_ABORTED_FIELD_NUMBER: _ClassVar[int]
    INTERACTION_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    TURN_INTERRUPTED_FIELD_NUMBER: _ClassVar[int]
    INPUT_CONSUMED_FIELD_NUMBER: _ClassVar[int]
    STARTUP_PHASE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_INFO_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    ENGINE_TURN_STARTED_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_LOST_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_RECONCILED_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_STOPPED_FIELD_NUMBER: _ClassVar[int]
    MCP_SERVER_UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    EGRESS_REFUSED_FIELD_NUMBER: _ClassVar[int]
    MEMORY_CHANGES_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    output_seq: int
    turn_id: str
    produce_time: _timestamp_pb2.Timestamp
    traceparent: str
    engine_message: EngineMessage
    runtime_started: RuntimeStarted
    runtime_start_failed: RuntimeStartFailed
    turn_aborted: TurnAborted
    interaction_requested: InteractionRequested
    turn_interrupted: TurnInterrupted
    input_consumed: InputConsumed
    startup_phase: StartupPhase
    engine_info: EngineInfo
    transcript_snapshot: TranscriptSnapshot
    engine_turn_started: EngineTurnStarted
    runtime_lost: RuntimeLost
    sandbox_reconciled: SandboxReconciled
    runtime_stopped: RuntimeStopped
    mcp_server_unavailable: McpServerUnavailable
    egress_refused: EgressRefused
    memory_changes: MemoryChanges
    def __init__(self, session_id: _Optional[str] = ..., output_seq: _Optional[int] = ..., turn_id: _Optional[str] = ..., produce_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., traceparent: _Optional[str] = ..., engine_message: _Optional[_Union[EngineMessage, _Mapping]] = ..., runtime_started: _Optional[_Union[RuntimeStarted, _Mapping]] = ..., runtime_start_failed: _Optional[_Union[RuntimeStartFailed, _Mapping]] = ..., turn_aborted: _Optional[_Union[TurnAborted, _Mapping]] = ..., interaction_requested: _Optional[_Union[InteractionRequested, _Mapping]] = ..., turn_interrupted: _Optional[_Union[TurnInterrupted, _Mapping]] = ..., input_consumed: _Optional[_Union[InputConsumed, _Mapping]] = ..., startup_phase: _Optional[_Union[StartupPhase, _Mapping]] = ..., engine_info: _Optional[_Union[EngineInfo, _Mapping]] = ..., transcript_snapshot: _Optional[_Union[TranscriptSnapshot, _Mapping]] = ..., engine_turn_started: _Optional[_Union[EngineTurnStarted, _Mapping]] = ..., runtime_lost: _Optional[_Union[RuntimeLost, _Mapping]] = ..., sandbox_reconciled: _Optional[_Union[SandboxReconciled, _Mapping]] = ..., runtime_stopped: _Optional[_Union[RuntimeStopped, _Mapping]] = ..., mcp_server_unavailable: _Optional[_Union[McpServerUnavailable, _Mapping]] = ..., egress_refused: _Optional[_Union[EgressRefused, _Mapping]] = ..., memory_changes: _Optional[_Union[MemoryChanges, _Mapping]] = ...) -> None: ...

class MemoryChanges(_message.Message):
    __slots__ = ("stores",)
    STORES_FIELD_NUMBER: _ClassVar[int]
    stores: _containers.RepeatedCompositeFieldContainer[MemoryStoreChanges]
    def __init__(self, stores: _Optional[_Iterable[_Union[MemoryStoreChanges, _Mapping]]] = ...) -> None: ...

class MemoryStoreChanges(_message.Message):
    __slots__ = ("store_id", "changes", "refused")
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    store_id: str
    changes: _containers.RepeatedCompositeFieldContainer[MemoryFileChange]
    refused: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, store_id: _Optional[str] = ..., changes: _Optional[_Iterable[_Union[MemoryFileChange, _Mapping]]] = ..., refused: _Optional[_Iterable[str]] = ...) -> None: ...

class MemoryFileChange(_message.Message):
    __slots__ = ("path", "content", "deleted", "base_version")
    PATH_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    BASE_VERSION_FIELD_NUMBER: _ClassVar[int]
    path: str
    content: bytes
    deleted: bool
    base_version: int
    def __init__(self, path: _Optional[str] = ..., content: _Optional[bytes] = ..., deleted: _Optional[bool] = ..., base_version: _Optional[int] = ...) -> None: ...

class MemoryMount(_message.Message):
    __slots__ = ("store_id", "name", "read_write", "files")
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    READ_WRITE_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    store_id: str
    name: str
    read_write: bool
    files: _containers.RepeatedCompositeFieldContainer[MemoryFile]
    def __init__(self, store_id: _Optional[str] = ..., name: _Optional[str] = ..., read_write: _Optional[bool] = ..., files: _Optional[_Iterable[_Union[MemoryFile, _Mapping]]] = ...) -> None: ...

class MemoryFile(_message.Message):
    __slots__ = ("path", "content", "version")
    PATH_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    path: str
    content: bytes
    version: int
    def __init__(self, path: _Optional[str] = ..., content: _Optional[bytes] = ..., version: _Optional[int] = ...) -> None: ...

class EgressRefused(_message.Message):
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

class McpServerUnavailable(_message.Message):
    __slots__ = ("server", "reason")
    SERVER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    server: str
    reason: str
    def __init__(self, server: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RuntimeStopped(_message.Message):
    __slots__ = ("reason", "sandbox_id")
    REASON_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    reason: str
    sandbox_id: str
    def __init__(self, reason: _Optional[str] = ..., sandbox_id: _Optional[str] = ...) -> None: ...

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

class InteractionRequested(_message.Message):
    __slots__ = ("interaction_id", "tool_name", "input_json", "tool_use_id", "custom_tool", "subagent")
    INTERACTION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_TOOL_FIELD_NUMBER: _ClassVar[int]
    SUBAGENT_FIELD_NUMBER: _ClassVar[int]
    interaction_id: str
    tool_name: str
    input_json: str
    tool_use_id: str
    custom_tool: bool
    subagent: bool
    def __init__(self, interaction_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., input_json: _Optional[str] = ..., tool_use_id: _Optional[str] = ..., custom_tool: _Optional[bool] = ..., subagent: _Optional[bool] = ...) -> None: ...

class TurnInterrupted(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class InputConsumed(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StartupPhase(_message.Message):
    __slots__ = ("phase", "duration_ms")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    phase: str
    duration_ms: int
    def __init__(self, phase: _Optional[str] = ..., duration_ms: _Optional[int] = ...) -> None: ...

class EngineInfo(_message.Message):
    __slots__ = ("server_info_json",)
    SERVER_INFO_JSON_FIELD_NUMBER: _ClassVar[int]
    server_info_json: str
    def __init__(self, server_info_json: _Optional[str] = ...) -> None: ...

class TranscriptSnapshot(_message.Message):
    __slots__ = ("engine_session_id", "content")
    ENGINE_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    engine_session_id: str
    content: bytes
    def __init__(self, engine_session_id: _Optional[str] = ..., content: _Optional[bytes] = ...) -> None: ...

class EngineTurnStarted(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class RuntimeLost(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class EngineMessage(_message.Message):
    __slots__ = ("type_name", "payload_json")
    TYPE_NAME_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    type_name: str
    payload_json: str
    def __init__(self, type_name: _Optional[str] = ..., payload_json: _Optional[str] = ...) -> None: ...

class RuntimeStarted(_message.Message):
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

class RuntimeStartFailed(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class TurnAborted(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class OutputAck(_message.Message):
    __slots__ = ("committed", "error", "error_session_id")
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    committed: _containers.RepeatedCompositeFieldContainer[SessionCursor]
    error: _status_pb2.Status
    error_session_id: str
    def __init__(self, committed: _Optional[_Iterable[_Union[SessionCursor, _Mapping]]] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ..., error_session_id: _Optional[str] = ...) -> None: ...

class Command(_message.Message):
    __slots__ = ("command_seq", "command_id", "lease_generation", "session_id", "traceparent", "start_runtime", "deliver_input", "destroy_runtime", "answer_interaction", "interrupt_turn", "set_permission_mode", "stop_task", "stop_runtime", "set_tool_grants", "build_layer")
    COMMAND_SEQ_FIELD_NUMBER: _ClassVar[int]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_GENERATION_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    START_RUNTIME_FIELD_NUMBER: _ClassVar[int]
    DELIVER_INPUT_FIELD_NUMBER: _ClassVar[int]
    DESTROY_RUNTIME_FIELD_NUMBER: _ClassVar[int]
    ANSWER_INTERACTION_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_TURN_FIELD_NUMBER: _ClassVar[int]
    SET_PERMISSION_MODE_FIELD_NUMBER: _ClassVar[int]
    STOP_TASK_FIELD_NUMBER: _ClassVar[int]
    STOP_RUNTIME_FIELD_NUMBER: _ClassVar[int]
    SET_TOOL_GRANTS_FIELD_NUMBER: _ClassVar[int]
    BUILD_LAYER_FIELD_NUMBER: _ClassVar[int]
    command_seq: int
    command_id: str
    lease_generation: int
    session_id: str
    traceparent: str
    start_runtime: StartRuntime
    deliver_input: DeliverInput
    destroy_runtime: DestroyRuntime
    answer_interaction: AnswerInteraction
    interrupt_turn: InterruptTurn
    set_permission_mode: SetPermissionMode
    stop_task: StopTask
    stop_runtime: StopRuntime
    set_tool_grants: SetToolGrants
    build_layer: BuildLayer
    def __init__(self, command_seq: _Optional[int] = ..., command_id: _Optional[str] = ..., lease_generation: _Optional[int] = ..., session_id: _Optional[str] = ..., traceparent: _Optional[str] = ..., start_runtime: _Optional[_Union[StartRuntime, _Mapping]] = ..., deliver_input: _Optional[_Union[DeliverInput, _Mapping]] = ..., destroy_runtime: _Optional[_Union[DestroyRuntime, _Mapping]] = ..., answer_interaction: _Optional[_Union[AnswerInteraction, _Mapping]] = ..., interrupt_turn: _Optional[_Union[InterruptTurn, _Mapping]] = ..., set_permission_mode: _Optional[_Union[SetPermissionMode, _Mapping]] = ..., stop_task: _Optional[_Union[StopTask, _Mapping]] = ..., stop_runtime: _Optional[_Union[StopRuntime, _Mapping]] = ..., set_tool_grants: _Optional[_Union[SetToolGrants, _Mapping]] = ..., build_layer: _Optional[_Union[BuildLayer, _Mapping]] = ...) -> None: ...

class BuildLayer(_message.Message):
    __slots__ = ("spec", "build_digest")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    BUILD_DIGEST_FIELD_NUMBER: _ClassVar[int]
    spec: _environment_pb2.EnvironmentSpec
    build_digest: str
    def __init__(self, spec: _Optional[_Union[_environment_pb2.EnvironmentSpec, _Mapping]] = ..., build_digest: _Optional[str] = ...) -> None: ...

class AnswerInteraction(_message.Message):
    __slots__ = ("interaction_id", "allow", "deny", "tool_result")
    class Allow(_message.Message):
        __slots__ = ("updated_input_json",)
        UPDATED_INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
        updated_input_json: str
        def __init__(self, updated_input_json: _Optional[str] = ...) -> None: ...
    class Deny(_message.Message):
        __slots__ = ("message",)
        MESSAGE_FIELD_NUMBER: _ClassVar[int]
        message: str
        def __init__(self, message: _Optional[str] = ...) -> None: ...
    class ToolResult(_message.Message):
        __slots__ = ("content", "is_error")
        CONTENT_FIELD_NUMBER: _ClassVar[int]
        IS_ERROR_FIELD_NUMBER: _ClassVar[int]
        content: str
        is_error: bool
        def __init__(self, content: _Optional[str] = ..., is_error: _Optional[bool] = ...) -> None: ...
    INTERACTION_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOW_FIELD_NUMBER: _ClassVar[int]
    DENY_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    interaction_id: str
    allow: AnswerInteraction.Allow
    deny: AnswerInteraction.Deny
    tool_result: AnswerInteraction.ToolResult
    def __init__(self, interaction_id: _Optional[str] = ..., allow: _Optional[_Union[AnswerInteraction.Allow, _Mapping]] = ..., deny: _Optional[_Union[AnswerInteraction.Deny, _Mapping]] = ..., tool_result: _Optional[_Union[AnswerInteraction.ToolResult, _Mapping]] = ...) -> None: ...

class InterruptTurn(_message.Message):
    __slots__ = ("turn_id", "deadline_ms", "settled_reason")
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    SETTLED_REASON_FIELD_NUMBER: _ClassVar[int]
    turn_id: str
    deadline_ms: int
    settled_reason: str
    def __init__(self, turn_id: _Optional[str] = ..., deadline_ms: _Optional[int] = ..., settled_reason: _Optional[str] = ...) -> None: ...

class SetPermissionMode(_message.Message):
    __slots__ = ("permission_mode",)
    PERMISSION_MODE_FIELD_NUMBER: _ClassVar[int]
    permission_mode: str
    def __init__(self, permission_mode: _Optional[str] = ...) -> None: ...

class StopTask(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class StartRuntime(_message.Message):
    __slots__ = ("engine", "permission_mode", "model", "resume_engine_session_id", "transcript", "committed_output_seq", "config", "tool_grants", "environment", "git_source", "project_id", "agent_id", "agent_version", "memory")
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_MODE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RESUME_ENGINE_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OUTPUT_SEQ_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    TOOL_GRANTS_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    GIT_SOURCE_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    engine: str
    permission_mode: str
    model: str
    resume_engine_session_id: str
    transcript: bytes
    committed_output_seq: int
    config: _agent_pb2.AgentSpec
    tool_grants: _containers.RepeatedCompositeFieldContainer[ToolGrant]
    environment: RuntimeEnvironment
    git_source: _environment_pb2.GitSource
    project_id: str
    agent_id: str
    agent_version: int
    memory: _containers.RepeatedCompositeFieldContainer[MemoryMount]
    def __init__(self, engine: _Optional[str] = ..., permission_mode: _Optional[str] = ..., model: _Optional[str] = ..., resume_engine_session_id: _Optional[str] = ..., transcript: _Optional[bytes] = ..., committed_output_seq: _Optional[int] = ..., config: _Optional[_Union[_agent_pb2.AgentSpec, _Mapping]] = ..., tool_grants: _Optional[_Iterable[_Union[ToolGrant, _Mapping]]] = ..., environment: _Optional[_Union[RuntimeEnvironment, _Mapping]] = ..., git_source: _Optional[_Union[_environment_pb2.GitSource, _Mapping]] = ..., project_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., agent_version: _Optional[int] = ..., memory: _Optional[_Iterable[_Union[MemoryMount, _Mapping]]] = ...) -> None: ...

class RuntimeEnvironment(_message.Message):
    __slots__ = ("environment_id", "name", "version", "spec", "build_digest")
    ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    BUILD_DIGEST_FIELD_NUMBER: _ClassVar[int]
    environment_id: str
    name: str
    version: int
    spec: _environment_pb2.EnvironmentSpec
    build_digest: str
    def __init__(self, environment_id: _Optional[str] = ..., name: _Optional[str] = ..., version: _Optional[int] = ..., spec: _Optional[_Union[_environment_pb2.EnvironmentSpec, _Mapping]] = ..., build_digest: _Optional[str] = ...) -> None: ...

class SetToolGrants(_message.Message):
    __slots__ = ("grants",)
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    grants: _containers.RepeatedCompositeFieldContainer[ToolGrant]
    def __init__(self, grants: _Optional[_Iterable[_Union[ToolGrant, _Mapping]]] = ...) -> None: ...

class ToolGrant(_message.Message):
    __slots__ = ("grant_id", "tool_name", "input_pattern", "expire_time")
    GRANT_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_PATTERN_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    grant_id: str
    tool_name: str
    input_pattern: str
    expire_time: _timestamp_pb2.Timestamp
    def __init__(self, grant_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., input_pattern: _Optional[str] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DeliverInput(_message.Message):
    __slots__ = ("turn_id", "text", "permission_mode")
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_MODE_FIELD_NUMBER: _ClassVar[int]
    turn_id: str
    text: str
    permission_mode: str
    def __init__(self, turn_id: _Optional[str] = ..., text: _Optional[str] = ..., permission_mode: _Optional[str] = ...) -> None: ...

class DestroyRuntime(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class StopRuntime(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class CommandAck(_message.Message):
    __slots__ = ("command_seq", "command_id", "error", "destroy_verdict")
    COMMAND_SEQ_FIELD_NUMBER: _ClassVar[int]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DESTROY_VERDICT_FIELD_NUMBER: _ClassVar[int]
    command_seq: int
    command_id: str
    error: _status_pb2.Status
    destroy_verdict: DestroyVerdict
    def __init__(self, command_seq: _Optional[int] = ..., command_id: _Optional[str] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ..., destroy_verdict: _Optional[_Union[DestroyVerdict, str]] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("send_time",)
    SEND_TIME_FIELD_NUMBER: _ClassVar[int]
    send_time: _timestamp_pb2.Timestamp
    def __init__(self, send_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class HeartbeatAck(_message.Message):
    __slots__ = ("lease", "heartbeat_send_time")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_SEND_TIME_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    heartbeat_send_time: _timestamp_pb2.Timestamp
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ..., heartbeat_send_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class WorkspaceRequest(_message.Message):
    __slots__ = ("request_id", "session_id", "list_directory", "read_archive", "write_archive", "exec_command", "cancel", "open_terminal", "terminal_input")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    LIST_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    READ_ARCHIVE_FIELD_NUMBER: _ClassVar[int]
    WRITE_ARCHIVE_FIELD_NUMBER: _ClassVar[int]
    EXEC_COMMAND_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    OPEN_TERMINAL_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_INPUT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    session_id: str
    list_directory: ListDirectory
    read_archive: ReadArchive
    write_archive: WriteArchive
    exec_command: ExecCommand
    cancel: CancelWorkspaceRequest
    open_terminal: OpenTerminal
    terminal_input: TerminalInput
    def __init__(self, request_id: _Optional[str] = ..., session_id: _Optional[str] = ..., list_directory: _Optional[_Union[ListDirectory, _Mapping]] = ..., read_archive: _Optional[_Union[ReadArchive, _Mapping]] = ..., write_archive: _Optional[_Union[WriteArchive, _Mapping]] = ..., exec_command: _Optional[_Union[ExecCommand, _Mapping]] = ..., cancel: _Optional[_Union[CancelWorkspaceRequest, _Mapping]] = ..., open_terminal: _Optional[_Union[OpenTerminal, _Mapping]] = ..., terminal_input: _Optional[_Union[TerminalInput, _Mapping]] = ...) -> None: ...

class OpenTerminal(_message.Message):
    __slots__ = ("command", "term", "rows", "columns")
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    command: str
    term: str
    rows: int
    columns: int
    def __init__(self, command: _Optional[str] = ..., term: _Optional[str] = ..., rows: _Optional[int] = ..., columns: _Optional[int] = ...) -> None: ...

class TerminalInput(_message.Message):
    __slots__ = ("data", "rows", "columns")
    DATA_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    rows: int
    columns: int
    def __init__(self, data: _Optional[bytes] = ..., rows: _Optional[int] = ..., columns: _Optional[int] = ...) -> None: ...

class ListDirectory(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    def __init__(self, path: _Optional[str] = ...) -> None: ...

class ReadArchive(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    def __init__(self, path: _Optional[str] = ...) -> None: ...

class WriteArchive(_message.Message):
    __slots__ = ("path", "chunk", "last")
    PATH_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    path: str
    chunk: bytes
    last: bool
    def __init__(self, path: _Optional[str] = ..., chunk: _Optional[bytes] = ..., last: _Optional[bool] = ...) -> None: ...

class ExecCommand(_message.Message):
    __slots__ = ("command", "timeout_ms")
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    command: str
    timeout_ms: int
    def __init__(self, command: _Optional[str] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class CancelWorkspaceRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WorkspaceReply(_message.Message):
    __slots__ = ("request_id", "last", "listing", "archive_chunk", "stdout", "stderr", "exit_code", "written", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    LISTING_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_CHUNK_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    last: bool
    listing: DirectoryListing
    archive_chunk: bytes
    stdout: bytes
    stderr: bytes
    exit_code: int
    written: ArchiveWritten
    error: _status_pb2.Status
    def __init__(self, request_id: _Optional[str] = ..., last: _Optional[bool] = ..., listing: _Optional[_Union[DirectoryListing, _Mapping]] = ..., archive_chunk: _Optional[bytes] = ..., stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., exit_code: _Optional[int] = ..., written: _Optional[_Union[ArchiveWritten, _Mapping]] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ...) -> None: ...

class DirectoryListing(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[DirectoryEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[DirectoryEntry, _Mapping]]] = ...) -> None: ...

class DirectoryEntry(_message.Message):
    __slots__ = ("name", "type", "size", "mode", "modify_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    MODIFY_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    size: int
    mode: int
    modify_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., size: _Optional[int] = ..., mode: _Optional[int] = ..., modify_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ArchiveWritten(_message.Message):
    __slots__ = ("entries", "bytes")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    entries: int
    bytes: int
    def __init__(self, entries: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class ForwardWorkspaceRequest(_message.Message):
    __slots__ = ("agent_id", "session_id", "request")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    session_id: str
    request: WorkspaceRequest
    def __init__(self, agent_id: _Optional[str] = ..., session_id: _Optional[str] = ..., request: _Optional[_Union[WorkspaceRequest, _Mapping]] = ...) -> None: ...

class ForwardWorkspaceResponse(_message.Message):
    __slots__ = ("reply",)
    REPLY_FIELD_NUMBER: _ClassVar[int]
    reply: WorkspaceReply
    def __init__(self, reply: _Optional[_Union[WorkspaceReply, _Mapping]] = ...) -> None: ...

class ResolveCredentialsRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ResolveCredentialsResponse(_message.Message):
    __slots__ = ("credentials", "mcp_credentials")
    CREDENTIALS_FIELD_NUMBER: _ClassVar[int]
    MCP_CREDENTIALS_FIELD_NUMBER: _ClassVar[int]
    credentials: _containers.RepeatedCompositeFieldContainer[ResolvedCredential]
    mcp_credentials: _containers.RepeatedCompositeFieldContainer[ResolvedMcpCredential]
    def __init__(self, credentials: _Optional[_Iterable[_Union[ResolvedCredential, _Mapping]]] = ..., mcp_credentials: _Optional[_Iterable[_Union[ResolvedMcpCredential, _Mapping]]] = ...) -> None: ...

class ResolvedCredential(_message.Message):
    __slots__ = ("name", "hosts", "scheme", "header", "secret", "port", "allow_plain_http")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    SCHEME_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    ALLOW_PLAIN_HTTP_FIELD_NUMBER: _ClassVar[int]
    name: str
    hosts: _containers.RepeatedScalarFieldContainer[str]
    scheme: _environment_pb2.CredentialScheme
    header: str
    secret: str
    port: int
    allow_plain_http: bool
    def __init__(self, name: _Optional[str] = ..., hosts: _Optional[_Iterable[str]] = ..., scheme: _Optional[_Union[_environment_pb2.CredentialScheme, str]] = ..., header: _Optional[str] = ..., secret: _Optional[str] = ..., port: _Optional[int] = ..., allow_plain_http: _Optional[bool] = ...) -> None: ...

class ResolvedMcpCredential(_message.Message):
    __slots__ = ("server", "name", "secret")
    SERVER_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    server: str
    name: str
    secret: str
    def __init__(self, server: _Optional[str] = ..., name: _Optional[str] = ..., secret: _Optional[str] = ...) -> None: ...
