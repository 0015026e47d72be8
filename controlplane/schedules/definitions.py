"""A project's schedules: created, read, listed, updated, paused, resumed, deleted, and their runs
listed. Every call acts within the caller's project.

A spec is checked whole here (the edge does not bound this service's fields): its cron expression
parses and ticks no more often than `Limits.min_interval`, its time zone is an IANA one, its prompt
is 1 byte to MAX_PROMPT_BYTES, its policy is set, and the agent definition and environment it names
exist in the project now (a later archive makes its ticks fail, recorded in the history).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

import asyncpg

from astrabox.schedules.v1 import schedule_service_pb2 as pb
from controlplane import named_definitions, store, validation
from controlplane.agent_definitions.definitions import AgentDefinitions
from controlplane.environments.definitions import EnvironmentDefinitions
from controlplane.errors import InvalidArgument, ScheduleExists, ScheduleLimitReached, ScheduleNotFound
from controlplane.page_tokens import PageTokens
from controlplane.schedules.timing import INVALID_SCHEDULE, MAX_CATCH_UP, MAX_RETRY_REFUSALS_S, Cron, MissedTicks

MAX_PROMPT_BYTES = 32 * 1024
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Limits:
    # Schedules a project may have.
    per_project: int = 100
    # The shortest time a schedule's expression may leave between two ticks.
    min_interval: timedelta = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    schedule_id: str
    project_id: uuid.UUID
    name: str
    spec: pb.ScheduleSpec
    paused: bool
    next_tick_at: datetime
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> ScheduleRecord:
        return cls(
            str(row["schedule_id"]),
            row["project_id"],
            row["name"],
            pb.ScheduleSpec.FromString(row["spec"]),
            row["paused"],
            row["next_tick_at"],
            row["created_at"],
            row["updated_at"],
        )


@dataclass(frozen=True, slots=True)
class RunRecord:
    schedule_id: str
    tick_at: datetime
    state: str
    session_id: str
    error_reason: str
    error_message: str
    missed_ticks: int
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> RunRecord:
        return cls(
            str(row["schedule_id"]),
            row["tick_at"],
            row["state"],
            str(row["session_id"] or ""),
            row["error_reason"],
            row["error_message"],
            row["missed_ticks"],
            row["created_at"],
            row["updated_at"],
        )


def schedule_name(value: str) -> str:
    if not named_definitions.NAME.fullmatch(value) or named_definitions.as_id(value) is not None:
        raise InvalidArgument(
            "name", f"a schedule's name is {named_definitions.NAME_RULE}; got {validation.echo(value)}"
        )
    return value


def schedule_ref(value: str) -> uuid.UUID | str:
    return named_definitions.ref("schedule", value, "schedule")


def _invalid(field: str, message: str) -> InvalidArgument:
    return InvalidArgument(field, message, INVALID_SCHEDULE)


class ScheduleDefinitions:
    def __init__(
        self,
        pool: asyncpg.Pool,
        page_tokens: PageTokens,
        agents: AgentDefinitions,
        environments: EnvironmentDefinitions,
        limits: Limits = Limits(),
        clock: Clock | None = None,
    ) -> None:
        self._pool = pool
        self._tokens = page_tokens
        self._agents = agents
        self._environments = environments
        self._limits = limits
        self._clock = clock or SystemClock()

    async def checked(self, project_id: uuid.UUID, spec: pb.ScheduleSpec) -> tuple[pb.ScheduleSpec, Cron]:
        """The spec as stored (unknown fields dropped), and its expression; or the refusal."""
        cron = Cron.parse(spec.cron, spec.time_zone)
        shortest = cron.shortest_interval(self._clock.now())
        if shortest < self._limits.min_interval:
            raise _invalid(
                "cron",
                f"cron {validation.echo(spec.cron)} ticks every {shortest.total_seconds():g} s; a schedule may tick"
                f" at most every {self._limits.min_interval.total_seconds():g} s",
            )
        size = len(spec.prompt.encode("utf-8", "surrogatepass"))
        if not spec.prompt.strip() or size > MAX_PROMPT_BYTES:
            raise _invalid("prompt", f"prompt must be 1 to {MAX_PROMPT_BYTES} bytes of text, got {size} bytes")
        if spec.missed_ticks not in {policy.value for policy in MissedTicks}:
            raise _invalid(
                "missed_ticks", "missed_ticks must be MISSED_TICKS_SKIP, MISSED_TICKS_RUN_ONCE or MISSED_TICKS_RUN_EACH"
            )
        if not 0 <= spec.retry_refusals_seconds <= MAX_RETRY_REFUSALS_S:
            raise _invalid(
                "retry_refusals_seconds",
                f"retry_refusals_seconds must be 0 to {MAX_RETRY_REFUSALS_S}, got {spec.retry_refusals_seconds}",
            )
        if not 0 <= spec.max_catch_up <= MAX_CATCH_UP:
            raise _invalid("max_catch_up", f"max_catch_up must be 0 (10) to {MAX_CATCH_UP}, got {spec.max_catch_up}")
        if spec.agent:
            await self._agents.resolve(project_id, spec.agent, spec.agent_version)
        elif spec.agent_version:
            raise _invalid("agent_version", "agent_version needs an agent: name the agent to pin a version of")
        if spec.environment:
            await self._environments.resolve(project_id, spec.environment, spec.environment_version)
        elif spec.environment_version:
            raise _invalid(
                "environment_version", "environment_version needs an environment: name the environment to pin"
            )
        return pb.ScheduleSpec.FromString(named_definitions.canonical(spec)), cron

    async def create(
        self, project_id: uuid.UUID, request_id: str, name: str, spec: pb.ScheduleSpec, paused: bool
    ) -> ScheduleRecord:
        validation.client_id("request_id", request_id)
        schedule_name(name)
        stored, cron = await self.checked(project_id, spec)
        form = named_definitions.canonical(stored)
        async with self._pool.acquire() as conn, conn.transaction():
            await store.schedules.lock_project(conn, project_id)
            known = await store.schedules.by_request_id(conn, project_id, request_id)
            if known is not None:
                named_definitions.same_request(
                    "schedule",
                    request_id,
                    (str(known["schedule_id"]), known["name"], named_definitions.digest(known["spec"])),
                    (name, named_definitions.digest(form)),
                )
                return ScheduleRecord.from_row(known)
            if await store.schedules.count(conn, project_id) >= self._limits.per_project:
                raise ScheduleLimitReached(self._limits.per_project)
            row = await store.schedules.insert(
                conn, uuid.uuid4(), project_id, name, form, paused, cron.after(self._clock.now()), request_id
            )
            if row is None:
                raise ScheduleExists(name)
        return ScheduleRecord.from_row(row)

    async def _find(self, conn: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, ref: str) -> asyncpg.Record:
        row = await store.schedules.find(conn, project_id, schedule_ref(ref), lock=isinstance(conn, asyncpg.Connection))
        if row is None:
            raise ScheduleNotFound(ref)
        return row

    async def get(self, project_id: uuid.UUID, ref: str) -> ScheduleRecord:
        return ScheduleRecord.from_row(await self._find(self._pool, project_id, ref))

    async def list_schedules(
        self, project_id: uuid.UUID, page_size: int, page_token: str
    ) -> tuple[list[ScheduleRecord], str]:
        size = validation.page_size(page_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        scope = f"schedules/{project_id}"
        after = ""
        if page_token:
            after = str(self._tokens.read(scope, page_token).get("after", ""))
        rows = await store.schedules.page(self._pool, project_id, after, size + 1)
        records = [ScheduleRecord.from_row(row) for row in rows[:size]]
        token = self._tokens.issue(scope, {"after": records[-1].name}) if len(rows) > size else ""
        return records, token

    async def update(self, project_id: uuid.UUID, ref: str, spec: pb.ScheduleSpec) -> ScheduleRecord:
        stored, cron = await self.checked(project_id, spec)
        async with self._pool.acquire() as conn, conn.transaction():
            row = await self._find(conn, project_id, ref)
            row = await store.schedules.set_spec(
                conn, row["schedule_id"], named_definitions.canonical(stored), cron.after(self._clock.now())
            )
        return ScheduleRecord.from_row(row)

    async def set_paused(self, project_id: uuid.UUID, ref: str, paused: bool) -> ScheduleRecord:
        async with self._pool.acquire() as conn, conn.transaction():
            row = await self._find(conn, project_id, ref)
            if row["paused"] != paused:
                row = await store.schedules.set_paused(conn, row["schedule_id"], paused)
        return ScheduleRecord.from_row(row)

    async def delete(self, project_id: uuid.UUID, ref: str) -> ScheduleRecord:
        async with self._pool.acquire() as conn, conn.transaction():
            row = await self._find(conn, project_id, ref)
            await store.schedules.delete(conn, row["schedule_id"])
        return ScheduleRecord.from_row(row)

    async def runs(
        self, project_id: uuid.UUID, ref: str, page_size: int, page_token: str
    ) -> tuple[list[RunRecord], str]:
        """A page of the schedule's runs, newest tick first, and the next page's token."""
        size = validation.page_size(page_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        schedule_id = (await self._find(self._pool, project_id, ref))["schedule_id"]
        scope = f"schedule-runs/{schedule_id}"
        before = None
        if page_token:
            try:
                before = datetime.fromisoformat(str(self._tokens.read(scope, page_token)["before"]))
            except (KeyError, ValueError):
                raise validation.page_token_invalid() from None
        rows = await store.schedule_runs.page(self._pool, schedule_id, before, size + 1)
        records = [RunRecord.from_row(row) for row in rows[:size]]
        token = self._tokens.issue(scope, {"before": records[-1].tick_at.isoformat()}) if len(rows) > size else ""
        return records, token
