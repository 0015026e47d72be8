import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
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
SESSION_STATE_UNSPECIFIED: SessionState
SESSION_STATE_CREATING: SessionState
SESSION_STATE_READY: SessionState
SESSION_STATE_RUNNING: SessionState
SESSION_STATE_WAITING_FOR_INPUT: SessionState
SESSION_STATE_INTERRUPTING: SessionState
SESSION_STATE_ARCHIVED: SessionState
SESSION_STATE_DELETED: SessionState
SESSION_STATE_FAILED: SessionState

class Session(_message.Message):
    __slots__ = ("session_id", "state", "runtime_available", "engine", "permission_mode", "model", "last_seq", "current_turn_id", "agent_id", "engine_session_id", "failure_reason", "create_time", "update_time", "request_id", "labels")
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
    def __init__(self, session_id: _Optional[str] = ..., state: _Optional[_Union[SessionState, str]] = ..., runtime_available: _Optional[bool] = ..., engine: _Optional[str] = ..., permission_mode: _Optional[str] = ..., model: _Optional[str] = ..., last_seq: _Optional[int] = ..., current_turn_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., engine_session_id: _Optional[str] = ..., failure_reason: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., request_id: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...
