"""ScheduleService: protobuf in, `ScheduleDefinitions` calls within the caller's project, protobuf out.

Like AgentService its requests are bounded here and in `definitions`, not by the edge's table of
fields (`controlplane.validation.FIELDS`).
"""

from __future__ import annotations

import grpc

from astrabox.schedules.v1 import schedule_service_pb2 as pb
from astrabox.schedules.v1 import schedule_service_pb2_grpc as pb_grpc
from controlplane.convert import timestamp
from controlplane.identity import callers
from controlplane.schedules.definitions import RunRecord, ScheduleDefinitions, ScheduleRecord
from controlplane.status import maps_errors

_RUN_STATES = {
    "creating": pb.RUN_STATE_CREATING,
    "starting": pb.RUN_STATE_STARTING,
    "started": pb.RUN_STATE_STARTED,
    "failed": pb.RUN_STATE_FAILED,
}


def schedule_to_proto(record: ScheduleRecord) -> pb.Schedule:
    return pb.Schedule(
        schedule_id=record.schedule_id,
        name=record.name,
        project_id=str(record.project_id),
        spec=record.spec,
        paused=record.paused,
        next_tick_time=timestamp(record.next_tick_at),
        create_time=timestamp(record.created_at),
        update_time=timestamp(record.updated_at),
    )


def run_to_proto(record: RunRecord) -> pb.ScheduleRun:
    return pb.ScheduleRun(
        schedule_id=record.schedule_id,
        tick_time=timestamp(record.tick_at),
        state=_RUN_STATES[record.state],
        session_id=record.session_id,
        error_reason=record.error_reason,
        error_message=record.error_message,
        missed_ticks=record.missed_ticks,
        create_time=timestamp(record.created_at),
        update_time=timestamp(record.updated_at),
    )


class ScheduleServicer(pb_grpc.ScheduleServiceServicer):
    def __init__(self, definitions: ScheduleDefinitions) -> None:
        self._definitions = definitions

    @maps_errors
    async def CreateSchedule(
        self, request: pb.CreateScheduleRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateScheduleResponse:
        record = await self._definitions.create(
            callers.current().project_id, request.request_id, request.name, request.spec, request.paused
        )
        return pb.CreateScheduleResponse(schedule=schedule_to_proto(record))

    @maps_errors
    async def GetSchedule(
        self, request: pb.GetScheduleRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetScheduleResponse:
        record = await self._definitions.get(callers.current().project_id, request.schedule)
        return pb.GetScheduleResponse(schedule=schedule_to_proto(record))

    @maps_errors
    async def ListSchedules(
        self, request: pb.ListSchedulesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSchedulesResponse:
        found, token = await self._definitions.list_schedules(
            callers.current().project_id, request.page_size, request.page_token
        )
        return pb.ListSchedulesResponse(schedules=[schedule_to_proto(s) for s in found], next_page_token=token)

    @maps_errors
    async def UpdateSchedule(
        self, request: pb.UpdateScheduleRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateScheduleResponse:
        record = await self._definitions.update(callers.current().project_id, request.schedule, request.spec)
        return pb.UpdateScheduleResponse(schedule=schedule_to_proto(record))

    @maps_errors
    async def DeleteSchedule(
        self, request: pb.DeleteScheduleRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteScheduleResponse:
        record = await self._definitions.delete(callers.current().project_id, request.schedule)
        return pb.DeleteScheduleResponse(schedule=schedule_to_proto(record))

    @maps_errors
    async def PauseSchedule(
        self, request: pb.PauseScheduleRequest, context: grpc.aio.ServicerContext
    ) -> pb.PauseScheduleResponse:
        record = await self._definitions.set_paused(callers.current().project_id, request.schedule, True)
        return pb.PauseScheduleResponse(schedule=schedule_to_proto(record))

    @maps_errors
    async def ResumeSchedule(
        self, request: pb.ResumeScheduleRequest, context: grpc.aio.ServicerContext
    ) -> pb.ResumeScheduleResponse:
        record = await self._definitions.set_paused(callers.current().project_id, request.schedule, False)
        return pb.ResumeScheduleResponse(schedule=schedule_to_proto(record))

    @maps_errors
    async def ListScheduleRuns(
        self, request: pb.ListScheduleRunsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListScheduleRunsResponse:
        runs, token = await self._definitions.runs(
            callers.current().project_id, request.schedule, request.page_size, request.page_token
        )
        return pb.ListScheduleRunsResponse(runs=[run_to_proto(r) for r in runs], next_page_token=token)
