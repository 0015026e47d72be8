"""ScheduleService from a client: a project's cron schedules and their history (`client.schedules`).

    schedule = await client.schedules.create(
        "nightly-review", "0 3 * * *", "Review yesterday's commits", agent="reviewer", time_zone="Europe/Paris"
    )
    async for schedule in client.schedules.list():
        print(schedule.name, schedule.spec.cron, schedule.next_tick_time)
    await client.schedules.pause("nightly-review")
    await client.schedules.resume("nightly-review")
    async for run in client.schedules.runs("nightly-review"):   # newest tick first
        print(run.tick_time, run.state, run.session_id or run.error_reason)

Each tick of a schedule creates a session from its agent definition and environment and sends the
prompt as the session's first message, once, however many control-plane replicas run. A spec is
the `ScheduleSpec` message (astrabox.schedules.v1); `spec(...)` makes one from keywords.
Every call has the client's deadline; reads, creates (with their request id) and the other calls
(each one idempotent: a whole spec, a pause, a resume, a delete) are retried while the server is away.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

import grpc

from astrabox._definition_calls import pages
from astrabox.administration import Unary
from astrabox.schedules.v1 import schedule_service_pb2 as api
from astrabox.schedules.v1 import schedule_service_pb2_grpc as api_grpc

__all__ = ["MISSED_TICKS", "Schedule", "ScheduleRun", "Schedules", "spec"]

MISSED_TICKS = {
    "skip": api.MISSED_TICKS_SKIP,
    "run-once": api.MISSED_TICKS_RUN_ONCE,
    "run-each": api.MISSED_TICKS_RUN_EACH,
}
"""The missed-ticks policies by their short names (`spec(missed_ticks=...)`, the CLI's --missed-ticks)."""


def spec(
    cron: str,
    prompt: str,
    *,
    time_zone: str = "",
    agent: str = "",
    agent_version: int = 0,
    environment: str = "",
    environment_version: int = 0,
    missed_ticks: str = "skip",
    max_catch_up: int = 0,
    retry_refusals_seconds: int = 0,
) -> api.ScheduleSpec:
    """A ScheduleSpec; `missed_ticks` is "skip", "run-once" or "run-each". `retry_refusals_seconds`: how
    long after its tick a refusal that waiting can clear (a quota, capacity) is tried again (0: never)."""
    return api.ScheduleSpec(
        cron=cron,
        prompt=prompt,
        time_zone=time_zone,
        agent=agent,
        agent_version=agent_version,
        environment=environment,
        environment_version=environment_version,
        missed_ticks=MISSED_TICKS[missed_ticks],
        max_catch_up=max_catch_up,
        retry_refusals_seconds=retry_refusals_seconds,
    )


def _time(value: object) -> datetime:
    return value.ToDatetime(tzinfo=UTC)  # type: ignore[attr-defined, no-any-return]


@dataclass(frozen=True, slots=True)
class Schedule:
    """A schedule as the server keeps it (`Schedule` in schedule_service.proto)."""

    schedule_id: str
    name: str
    project_id: str
    spec: api.ScheduleSpec
    paused: bool
    next_tick_time: datetime
    """When it runs next (once resumed, when paused)."""
    create_time: datetime
    update_time: datetime

    @property
    def missed_ticks(self) -> str:
        """Its policy's short name: "skip", "run-once" or "run-each"."""
        return {number: name for name, number in MISSED_TICKS.items()}.get(self.spec.missed_ticks, "")

    @classmethod
    def from_proto(cls, message: api.Schedule) -> Schedule:
        """From the `Schedule` message the server sent."""
        return cls(
            message.schedule_id,
            message.name,
            message.project_id,
            message.spec,
            message.paused,
            _time(message.next_tick_time),
            _time(message.create_time),
            _time(message.update_time),
        )


@dataclass(frozen=True, slots=True)
class ScheduleRun:
    """One tick of a schedule and its outcome (`ScheduleRun`)."""

    schedule_id: str
    tick_time: datetime
    state: str
    """"creating", "starting", "started" or "failed"."""
    session_id: str
    error_reason: str
    """FAILED: an ErrorInfo reason such as QUOTA_EXCEEDED or NO_AGENT_AVAILABLE."""
    error_message: str
    missed_ticks: int
    """Ticks before this one that were missed and not run."""
    create_time: datetime
    update_time: datetime

    @classmethod
    def from_proto(cls, message: api.ScheduleRun) -> ScheduleRun:
        """From the `ScheduleRun` message the server sent."""
        return cls(
            message.schedule_id,
            _time(message.tick_time),
            api.RunState.Name(message.state).removeprefix("RUN_STATE_").lower(),
            message.session_id,
            message.error_reason,
            message.error_message,
            message.missed_ticks,
            _time(message.create_time),
            _time(message.update_time),
        )


class Schedules:
    """ScheduleService's calls; made by `AstraBoxClient.schedules`. `schedule` arguments take a
    schedule's name or its id."""

    def __init__(self, channel: grpc.aio.Channel, unary: Unary) -> None:
        self._stub = api_grpc.ScheduleServiceStub(channel)  # type: ignore[no-untyped-call]
        self._unary = unary

    async def create(
        self,
        name: str,
        cron: str | api.ScheduleSpec,
        prompt: str = "",
        *,
        paused: bool = False,
        request_id: str | None = None,
        **fields: object,
    ) -> Schedule:
        """A new schedule `name`: a spec, or a cron expression, a prompt and `spec`'s keywords.
        Idempotent on `request_id` (a new uuid4 by default)."""
        made = cron if isinstance(cron, api.ScheduleSpec) else spec(cron, prompt, **fields)  # type: ignore[arg-type]
        request = api.CreateScheduleRequest(
            request_id=request_id or str(uuid.uuid4()), name=name, spec=made, paused=paused
        )
        response: api.CreateScheduleResponse = await self._unary(self._stub.CreateSchedule, request)
        return Schedule.from_proto(response.schedule)

    async def get(self, schedule: str) -> Schedule:
        """The schedule (NOT_FOUND, SCHEDULE_NOT_FOUND when the project has none of that name or id)."""
        response: api.GetScheduleResponse = await self._unary(
            self._stub.GetSchedule, api.GetScheduleRequest(schedule=schedule)
        )
        return Schedule.from_proto(response.schedule)

    async def list(self, *, page_size: int = 0) -> AsyncIterator[Schedule]:
        """Every schedule of the project, by name."""

        async def read(token: str) -> api.ListSchedulesResponse:
            request = api.ListSchedulesRequest(page_size=page_size, page_token=token)
            page: api.ListSchedulesResponse = await self._unary(self._stub.ListSchedules, request)
            return page

        async for item in pages(read, lambda page: page.schedules):
            yield Schedule.from_proto(item)

    async def update(self, schedule: str, new_spec: api.ScheduleSpec) -> Schedule:
        """Gives the schedule `new_spec` (whole); its next tick is computed again from now."""
        request = api.UpdateScheduleRequest(schedule=schedule, spec=new_spec)
        response: api.UpdateScheduleResponse = await self._unary(self._stub.UpdateSchedule, request)
        return Schedule.from_proto(response.schedule)

    async def delete(self, schedule: str) -> Schedule:
        """Deletes the schedule and its history (its sessions stay); the schedule as it was."""
        response: api.DeleteScheduleResponse = await self._unary(
            self._stub.DeleteSchedule, api.DeleteScheduleRequest(schedule=schedule)
        )
        return Schedule.from_proto(response.schedule)

    async def pause(self, schedule: str) -> Schedule:
        """Pauses it: no tick runs until it is resumed. Idempotent."""
        response: api.PauseScheduleResponse = await self._unary(
            self._stub.PauseSchedule, api.PauseScheduleRequest(schedule=schedule)
        )
        return Schedule.from_proto(response.schedule)

    async def resume(self, schedule: str) -> Schedule:
        """Resumes it; the ticks missed while paused go by its missed-ticks policy."""
        response: api.ResumeScheduleResponse = await self._unary(
            self._stub.ResumeSchedule, api.ResumeScheduleRequest(schedule=schedule)
        )
        return Schedule.from_proto(response.schedule)

    async def runs(self, schedule: str, *, page_size: int = 0) -> AsyncIterator[ScheduleRun]:
        """The schedule's runs, newest tick first."""

        async def read(token: str) -> api.ListScheduleRunsResponse:
            request = api.ListScheduleRunsRequest(schedule=schedule, page_size=page_size, page_token=token)
            page: api.ListScheduleRunsResponse = await self._unary(self._stub.ListScheduleRuns, request)
            return page

        async for item in pages(read, lambda page: page.runs):
            yield ScheduleRun.from_proto(item)
