import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MissedTicks(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MISSED_TICKS_UNSPECIFIED: _ClassVar[MissedTicks]
    MISSED_TICKS_SKIP: _ClassVar[MissedTicks]
    MISSED_TICKS_RUN_ONCE: _ClassVar[MissedTicks]
    MISSED_TICKS_RUN_EACH: _ClassVar[MissedTicks]

class RunState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATE_UNSPECIFIED: _ClassVar[RunState]
    RUN_STATE_CREATING: _ClassVar[RunState]
    RUN_STATE_STARTING: _ClassVar[RunState]
    RUN_STATE_STARTED: _ClassVar[RunState]
    RUN_STATE_FAILED: _ClassVar[RunState]
MISSED_TICKS_UNSPECIFIED: MissedTicks
MISSED_TICKS_SKIP: MissedTicks
MISSED_TICKS_RUN_ONCE: MissedTicks
MISSED_TICKS_RUN_EACH: MissedTicks
RUN_STATE_UNSPECIFIED: RunState
RUN_STATE_CREATING: RunState
RUN_STATE_STARTING: RunState
RUN_STATE_STARTED: RunState
RUN_STATE_FAILED: RunState

class ScheduleSpec(_message.Message):
    __slots__ = ("cron", "time_zone", "agent", "agent_version", "environment", "environment_version", "prompt", "missed_ticks", "max_catch_up", "retry_refusals_seconds")
    CRON_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    MISSED_TICKS_FIELD_NUMBER: _ClassVar[int]
    MAX_CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    RETRY_REFUSALS_SECONDS_FIELD_NUMBER: _ClassVar[int]
    cron: str
    time_zone: str
    agent: str
    agent_version: int
    environment: str
    environment_version: int
    prompt: str
    missed_ticks: MissedTicks
    max_catch_up: int
    retry_refusals_seconds: int
    def __init__(self, cron: _Optional[str] = ..., time_zone: _Optional[str] = ..., agent: _Optional[str] = ..., agent_version: _Optional[int] = ..., environment: _Optional[str] = ..., environment_version: _Optional[int] = ..., prompt: _Optional[str] = ..., missed_ticks: _Optional[_Union[MissedTicks, str]] = ..., max_catch_up: _Optional[int] = ..., retry_refusals_seconds: _Optional[int] = ...) -> None: ...

class Schedule(_message.Message):
    __slots__ = ("schedule_id", "name", "project_id", "spec", "paused", "next_tick_time", "create_time", "update_time")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    NEXT_TICK_TIME_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    name: str
    project_id: str
    spec: ScheduleSpec
    paused: bool
    next_tick_time: _timestamp_pb2.Timestamp
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, schedule_id: _Optional[str] = ..., name: _Optional[str] = ..., project_id: _Optional[str] = ..., spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ..., paused: _Optional[bool] = ..., next_tick_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ScheduleRun(_message.Message):
    __slots__ = ("schedule_id", "tick_time", "state", "session_id", "error_reason", "error_message", "missed_ticks", "create_time", "update_time")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    TICK_TIME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MISSED_TICKS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    tick_time: _timestamp_pb2.Timestamp
    state: RunState
    session_id: str
    error_reason: str
    error_message: str
    missed_ticks: int
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, schedule_id: _Optional[str] = ..., tick_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., state: _Optional[_Union[RunState, str]] = ..., session_id: _Optional[str] = ..., error_reason: _Optional[str] = ..., error_message: _Optional[str] = ..., missed_ticks: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateScheduleRequest(_message.Message):
    __slots__ = ("request_id", "name", "spec", "paused")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    name: str
    spec: ScheduleSpec
    paused: bool
    def __init__(self, request_id: _Optional[str] = ..., name: _Optional[str] = ..., spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ..., paused: _Optional[bool] = ...) -> None: ...

class CreateScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class GetScheduleRequest(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: str
    def __init__(self, schedule: _Optional[str] = ...) -> None: ...

class GetScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ("schedules", "next_page_token")
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    schedules: _containers.RepeatedCompositeFieldContainer[Schedule]
    next_page_token: str
    def __init__(self, schedules: _Optional[_Iterable[_Union[Schedule, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateScheduleRequest(_message.Message):
    __slots__ = ("schedule", "spec")
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    schedule: str
    spec: ScheduleSpec
    def __init__(self, schedule: _Optional[str] = ..., spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ...) -> None: ...

class UpdateScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class DeleteScheduleRequest(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: str
    def __init__(self, schedule: _Optional[str] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class PauseScheduleRequest(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: str
    def __init__(self, schedule: _Optional[str] = ...) -> None: ...

class PauseScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class ResumeScheduleRequest(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: str
    def __init__(self, schedule: _Optional[str] = ...) -> None: ...

class ResumeScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class ListScheduleRunsRequest(_message.Message):
    __slots__ = ("schedule", "page_size", "page_token")
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    schedule: str
    page_size: int
    page_token: str
    def __init__(self, schedule: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListScheduleRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[ScheduleRun]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[ScheduleRun, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
