import datetime

from astrabox.environments.v1 import environment_pb2 as _environment_pb2
from astrabox.memory.v1 import memory_service_pb2 as _memory_service_pb2
from astrabox.sessionkernel.v1 import events_pb2 as _events_pb2
from astrabox.sessionkernel.v1 import session_pb2 as _session_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SessionDeltaKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_DELTA_KIND_UNSPECIFIED: _ClassVar[SessionDeltaKind]
    SESSION_DELTA_KIND_TEXT: _ClassVar[SessionDeltaKind]
    SESSION_DELTA_KIND_TOOL_INPUT: _ClassVar[SessionDeltaKind]
    SESSION_DELTA_KIND_THINKING: _ClassVar[SessionDeltaKind]
SESSION_DELTA_KIND_UNSPECIFIED: SessionDeltaKind
SESSION_DELTA_KIND_TEXT: SessionDeltaKind
SESSION_DELTA_KIND_TOOL_INPUT: SessionDeltaKind
SESSION_DELTA_KIND_THINKING: SessionDeltaKind

class OpenTerminalRequest(_message.Message):
    __slots__ = ("session_id", "command", "term", "size", "input")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    command: str
    term: str
    size: TerminalSize
    input: bytes
    def __init__(self, session_id: _Optional[str] = ..., command: _Optional[str] = ..., term: _Optional[str] = ..., size: _Optional[_Union[TerminalSize, _Mapping]] = ..., input: _Optional[bytes] = ...) -> None: ...

class TerminalSize(_message.Message):
    __slots__ = ("rows", "columns")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    rows: int
    columns: int
    def __init__(self, rows: _Optional[int] = ..., columns: _Optional[int] = ...) -> None: ...

class OpenTerminalResponse(_message.Message):
    __slots__ = ("output", "exit_code")
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    output: bytes
    exit_code: int
    def __init__(self, output: _Optional[bytes] = ..., exit_code: _Optional[int] = ...) -> None: ...

class ForkSessionRequest(_message.Message):
    __slots__ = ("session_id", "request_id", "through_seq", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    THROUGH_SEQ_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    request_id: str
    through_seq: int
    labels: _containers.ScalarMap[str, str]
    def __init__(self, session_id: _Optional[str] = ..., request_id: _Optional[str] = ..., through_seq: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ForkSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _session_pb2.Session
    def __init__(self, session: _Optional[_Union[_session_pb2.Session, _Mapping]] = ...) -> None: ...

class CreateSessionRequest(_message.Message):
    __slots__ = ("request_id", "engine", "permission_mode", "model", "labels", "agent", "agent_version", "environment", "environment_version", "git_source", "memory")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_MODE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    GIT_SOURCE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    engine: str
    permission_mode: str
    model: str
    labels: _containers.ScalarMap[str, str]
    agent: str
    agent_version: int
    environment: str
    environment_version: int
    git_source: _environment_pb2.GitSource
    memory: _containers.RepeatedCompositeFieldContainer[_memory_service_pb2.MemoryAttachment]
    def __init__(self, request_id: _Optional[str] = ..., engine: _Optional[str] = ..., permission_mode: _Optional[str] = ..., model: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., agent: _Optional[str] = ..., agent_version: _Optional[int] = ..., environment: _Optional[str] = ..., environment_version: _Optional[int] = ..., git_source: _Optional[_Union[_environment_pb2.GitSource, _Mapping]] = ..., memory: _Optional[_Iterable[_Union[_memory_service_pb2.MemoryAttachment, _Mapping]]] = ...) -> None: ...

class CreateSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _session_pb2.Session
    def __init__(self, session: _Optional[_Union[_session_pb2.Session, _Mapping]] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class GetSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _session_pb2.Session
    def __init__(self, session: _Optional[_Union[_session_pb2.Session, _Mapping]] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "states", "agent", "label_selector", "created_after", "created_before")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    CREATED_AFTER_FIELD_NUMBER: _ClassVar[int]
    CREATED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    states: _containers.RepeatedScalarFieldContainer[_session_pb2.SessionState]
    agent: str
    label_selector: str
    created_after: _timestamp_pb2.Timestamp
    created_before: _timestamp_pb2.Timestamp
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., states: _Optional[_Iterable[_Union[_session_pb2.SessionState, str]]] = ..., agent: _Optional[str] = ..., label_selector: _Optional[str] = ..., created_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions", "next_page_token")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[_session_pb2.Session]
    next_page_token: str
    def __init__(self, sessions: _Optional[_Iterable[_Union[_session_pb2.Session, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class SendMessageRequest(_message.Message):
    __slots__ = ("session_id", "client_message_id", "text", "permission_mode")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_MODE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    client_message_id: str
    text: str
    permission_mode: str
    def __init__(self, session_id: _Optional[str] = ..., client_message_id: _Optional[str] = ..., text: _Optional[str] = ..., permission_mode: _Optional[str] = ...) -> None: ...

class SendMessageResponse(_message.Message):
    __slots__ = ("turn_id", "seq")
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    turn_id: str
    seq: int
    def __init__(self, turn_id: _Optional[str] = ..., seq: _Optional[int] = ...) -> None: ...

class WatchSessionEventsRequest(_message.Message):
    __slots__ = ("session_id", "after_seq", "include_deltas", "max_events_per_response", "omit_content")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_DELTAS_FIELD_NUMBER: _ClassVar[int]
    MAX_EVENTS_PER_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    OMIT_CONTENT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    after_seq: int
    include_deltas: bool
    max_events_per_response: int
    omit_content: bool
    def __init__(self, session_id: _Optional[str] = ..., after_seq: _Optional[int] = ..., include_deltas: _Optional[bool] = ..., max_events_per_response: _Optional[int] = ..., omit_content: _Optional[bool] = ...) -> None: ...

class WatchSessionEventsResponse(_message.Message):
    __slots__ = ("event", "delta", "events")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    event: _events_pb2.SessionEvent
    delta: SessionDelta
    events: _containers.RepeatedCompositeFieldContainer[_events_pb2.SessionEvent]
    def __init__(self, event: _Optional[_Union[_events_pb2.SessionEvent, _Mapping]] = ..., delta: _Optional[_Union[SessionDelta, _Mapping]] = ..., events: _Optional[_Iterable[_Union[_events_pb2.SessionEvent, _Mapping]]] = ...) -> None: ...

class SessionDelta(_message.Message):
    __slots__ = ("turn_id", "message_id", "index", "kind", "text")
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    turn_id: str
    message_id: str
    index: int
    kind: SessionDeltaKind
    text: str
    def __init__(self, turn_id: _Optional[str] = ..., message_id: _Optional[str] = ..., index: _Optional[int] = ..., kind: _Optional[_Union[SessionDeltaKind, str]] = ..., text: _Optional[str] = ...) -> None: ...

class ListSessionEventsRequest(_message.Message):
    __slots__ = ("session_id", "after_seq", "page_size", "page_token", "omit_content")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    OMIT_CONTENT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    after_seq: int
    page_size: int
    page_token: str
    omit_content: bool
    def __init__(self, session_id: _Optional[str] = ..., after_seq: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., omit_content: _Optional[bool] = ...) -> None: ...

class ListSessionEventsResponse(_message.Message):
    __slots__ = ("events", "next_page_token")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_events_pb2.SessionEvent]
    next_page_token: str
    def __init__(self, events: _Optional[_Iterable[_Union[_events_pb2.SessionEvent, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class InterruptTurnRequest(_message.Message):
    __slots__ = ("session_id", "request_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    request_id: str
    def __init__(self, session_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class InterruptTurnResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _session_pb2.Session
    def __init__(self, session: _Optional[_Union[_session_pb2.Session, _Mapping]] = ...) -> None: ...

class RespondToInteractionRequest(_message.Message):
    __slots__ = ("session_id", "interaction_id", "request_id", "allow", "deny", "answers", "tool_result")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INTERACTION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOW_FIELD_NUMBER: _ClassVar[int]
    DENY_FIELD_NUMBER: _ClassVar[int]
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    interaction_id: str
    request_id: str
    allow: AllowTool
    deny: DenyTool
    answers: QuestionAnswers
    tool_result: CustomToolResult
    def __init__(self, session_id: _Optional[str] = ..., interaction_id: _Optional[str] = ..., request_id: _Optional[str] = ..., allow: _Optional[_Union[AllowTool, _Mapping]] = ..., deny: _Optional[_Union[DenyTool, _Mapping]] = ..., answers: _Optional[_Union[QuestionAnswers, _Mapping]] = ..., tool_result: _Optional[_Union[CustomToolResult, _Mapping]] = ...) -> None: ...

class CustomToolResult(_message.Message):
    __slots__ = ("content", "is_error")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    content: str
    is_error: bool
    def __init__(self, content: _Optional[str] = ..., is_error: _Optional[bool] = ...) -> None: ...

class AllowTool(_message.Message):
    __slots__ = ("updated_input_json", "grant")
    UPDATED_INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    GRANT_FIELD_NUMBER: _ClassVar[int]
    updated_input_json: str
    grant: ToolGrantScope
    def __init__(self, updated_input_json: _Optional[str] = ..., grant: _Optional[_Union[ToolGrantScope, _Mapping]] = ...) -> None: ...

class ToolGrantScope(_message.Message):
    __slots__ = ("input_pattern", "expire_time")
    INPUT_PATTERN_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    input_pattern: str
    expire_time: _timestamp_pb2.Timestamp
    def __init__(self, input_pattern: _Optional[str] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DenyTool(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: str
    def __init__(self, message: _Optional[str] = ...) -> None: ...

class QuestionAnswers(_message.Message):
    __slots__ = ("answers",)
    class AnswersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    answers: _containers.ScalarMap[str, str]
    def __init__(self, answers: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RespondToInteractionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _session_pb2.Session
    def __init__(self, session: _Optional[_Union[_session_pb2.Session, _Mapping]] = ...) -> None: ...

class SetPermissionModeRequest(_message.Message):
    __slots__ = ("session_id", "permission_mode", "request_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_MODE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    permission_mode: str
    request_id: str
    def __init__(self, session_id: _Optional[str] = ..., permission_mode: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class SetPermissionModeResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _session_pb2.Session
    def __init__(self, session: _Optional[_Union[_session_pb2.Session, _Mapping]] = ...) -> None: ...

class ArchiveSessionRequest(_message.Message):
    __slots__ = ("session_id", "request_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    request_id: str
    def __init__(self, session_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class ArchiveSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _session_pb2.Session
    def __init__(self, session: _Optional[_Union[_session_pb2.Session, _Mapping]] = ...) -> None: ...

class DeleteSessionRequest(_message.Message):
    __slots__ = ("session_id", "request_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    request_id: str
    def __init__(self, session_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class DeleteSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _session_pb2.Session
    def __init__(self, session: _Optional[_Union[_session_pb2.Session, _Mapping]] = ...) -> None: ...

class StopBackgroundTaskRequest(_message.Message):
    __slots__ = ("session_id", "task_id", "request_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    task_id: str
    request_id: str
    def __init__(self, session_id: _Optional[str] = ..., task_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class StopBackgroundTaskResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _session_pb2.Session
    def __init__(self, session: _Optional[_Union[_session_pb2.Session, _Mapping]] = ...) -> None: ...

class UploadWorkspaceArchiveRequest(_message.Message):
    __slots__ = ("session_id", "path", "chunk")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    chunk: bytes
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class UploadWorkspaceArchiveResponse(_message.Message):
    __slots__ = ("entries", "bytes")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    entries: int
    bytes: int
    def __init__(self, entries: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class ListWorkspaceRequest(_message.Message):
    __slots__ = ("session_id", "path")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class ListWorkspaceResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[WorkspaceEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[WorkspaceEntry, _Mapping]]] = ...) -> None: ...

class WorkspaceEntry(_message.Message):
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

class DownloadWorkspaceArchiveRequest(_message.Message):
    __slots__ = ("session_id", "path")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class DownloadWorkspaceArchiveResponse(_message.Message):
    __slots__ = ("chunk",)
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    chunk: bytes
    def __init__(self, chunk: _Optional[bytes] = ...) -> None: ...

class RunCommandRequest(_message.Message):
    __slots__ = ("session_id", "command", "timeout_ms")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    command: str
    timeout_ms: int
    def __init__(self, session_id: _Optional[str] = ..., command: _Optional[str] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class RunCommandResponse(_message.Message):
    __slots__ = ("stdout", "stderr", "exit_code")
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    stdout: bytes
    stderr: bytes
    exit_code: int
    def __init__(self, stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., exit_code: _Optional[int] = ...) -> None: ...

class RevokeToolGrantRequest(_message.Message):
    __slots__ = ("session_id", "grant_id", "request_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    GRANT_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    grant_id: str
    request_id: str
    def __init__(self, session_id: _Optional[str] = ..., grant_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class RevokeToolGrantResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _session_pb2.Session
    def __init__(self, session: _Optional[_Union[_session_pb2.Session, _Mapping]] = ...) -> None: ...
