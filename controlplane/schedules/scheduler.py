"""The scheduler: every replica's loop that claims schedules' due ticks and runs them.

A pass does two things.
- Claim: a schedule due (not paused, its next tick at or before now) is locked (SKIP LOCKED: a
  replica claiming it already has it), its due ticks go through its missed-ticks policy
  (`timing.claim`), and in one transaction the runs of the ticks it runs are inserted (one row
  per (schedule, tick): a tick runs once however many replicas see it due) and its next tick
  moves on. The claiming replica holds each new run's lease.
- Work: a run in a transitional state whose lease lapsed (its replica died, or let it go to
  look again later) is leased by this replica and moved on: `creating` creates its session,
  `starting` sends the prompt once the session is ready. Both are idempotent, the session's
  request id and the prompt's client_message_id deriving from the schedule and the tick, so a
  replica killed mid-run leaves a run that another finishes: neither a second session nor a lost
  tick. Every run has a deadline (`deadline_at`): one still not started by then fails with
  STARTUP_DEADLINE_EXCEEDED. A refusal (quota exceeded, no agent available, …) fails the run
  with the kernel's reason, unless the schedule's retry policy (`retry_refusals_seconds`) says to
  try again one that waiting can clear (`retried`); a database fault leaves it to the next lease.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg
import grpc
import structlog

from astrabox.schedules.v1 import schedule_service_pb2 as pb
from controlplane import database, store
from controlplane.conversation import Conversation, SendMessage
from controlplane.errors import KernelError
from controlplane.journal import Journal
from controlplane.kernel import CreateSession, SessionKernel
from controlplane.metrics import ControlPlaneMetrics
from controlplane.schedules.definitions import Clock, SystemClock
from controlplane.schedules.timing import DEFAULT_CATCH_UP, Cron, MissedTicks, claim
from controlplane.session import SessionState
from controlplane.status import code_for

log = structlog.get_logger(__name__)

# The label a schedule's sessions carry: its name (`astrabox sessions list --label-selector ...`).
SCHEDULE_LABEL = "astrabox.dev/schedule"
SESSION_FAILED = "SESSION_FAILED"
STARTUP_DEADLINE_EXCEEDED = "STARTUP_DEADLINE_EXCEEDED"
_TAKES_MESSAGES = (SessionState.READY, SessionState.RUNNING, SessionState.WAITING_FOR_INPUT, SessionState.INTERRUPTING)
_GONE = (SessionState.FAILED, SessionState.ARCHIVED, SessionState.DELETED)
# Refusals that waiting can clear (a quota, the fleet's capacity, no agent connected), which a
# schedule's retry policy tries again: the first after RETRY_FIRST, doubling up to RETRY_LONGEST.
_WAITING_HELPS = (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE)
RETRY_FIRST = timedelta(seconds=2)
RETRY_LONGEST = timedelta(seconds=60)


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    # How often a pass runs.
    interval: timedelta = timedelta(seconds=1)
    # How long a replica holds a run it works on: another takes it over after this.
    lease: timedelta = timedelta(seconds=30)
    # How long a run may take to start its session and send the prompt.
    run_deadline: timedelta = timedelta(seconds=240)
    # How late a tick may be and still not count as missed (MISSED_TICKS_SKIP).
    grace: timedelta = timedelta(seconds=30)
    # Schedules claimed and runs leased, at most, per pass.
    batch: int = 100
    # Runs kept per schedule in its history.
    history: int = 1000


def session_request_id(schedule_id: str, tick: datetime) -> str:
    """The request id of a tick's session: the same on every try, so its session is made once."""
    return f"schedule-{schedule_id}-{int(tick.timestamp() * 1000)}"


def prompt_message_id(tick: datetime) -> str:
    return f"schedule-prompt-{int(tick.timestamp() * 1000)}"


class Scheduler:
    def __init__(
        self,
        pool: asyncpg.Pool,
        journal: Journal,
        kernel: SessionKernel,
        conversation: Conversation,
        settings: SchedulerSettings = SchedulerSettings(),
        clock: Clock | None = None,
        metrics: ControlPlaneMetrics | None = None,
    ) -> None:
        self._pool = pool
        self._metrics = metrics or ControlPlaneMetrics()
        self._journal = journal
        self._kernel = kernel
        self._conversation = conversation
        self._settings = settings
        self._clock = clock or SystemClock()

    async def run(self) -> None:
        """A pass every `interval` until cancelled."""
        while True:
            await asyncio.sleep(self._settings.interval.total_seconds())
            try:
                await self.tick()
            except database.FAULTS as error:  # the next pass tries again; anything else is a bug
                log.warning("schedule_pass_failed", error=str(error))

    async def tick(self) -> int:
        """One pass: claim what is due, then work on the runs whose lease lapsed; how many runs it moved."""
        claimed = await self.claim_due()
        now = self._clock.now()
        leased = await store.schedule_runs.lease_open(self._pool, now, now + self._settings.lease, self._settings.batch)
        for row in leased:
            await self._work(row)
        return claimed + len(leased)

    async def claim_due(self) -> int:
        """Claim the due ticks of due schedules, then start the runs this replica claimed."""
        now = self._clock.now()
        claimed: list[tuple[uuid.UUID, datetime]] = []
        for schedule_id in await store.schedules.due(self._pool, now, self._settings.batch):
            claimed.extend(await self._claim(schedule_id, now))
        for schedule_id, tick in claimed:
            row = await store.schedule_runs.with_schedule(self._pool, schedule_id, tick)
            if row is not None:
                await self._work(row)
        return len(claimed)

    async def _claim(self, schedule_id: uuid.UUID, now: datetime) -> list[tuple[uuid.UUID, datetime]]:
        async with self._pool.acquire() as conn, conn.transaction():
            row = await store.schedules.lock_due(conn, schedule_id, now)
            if row is None:
                return []
            spec = pb.ScheduleSpec.FromString(row["spec"])
            cron = Cron.parse(spec.cron, spec.time_zone)
            outcome = claim(
                cron,
                MissedTicks(spec.missed_ticks),
                spec.max_catch_up or DEFAULT_CATCH_UP,
                row["next_tick_at"],
                now,
                self._settings.grace,
                row["missed_ticks"],
            )
            inserted = []
            for run in outcome.runs:
                if await store.schedule_runs.insert(
                    conn,
                    schedule_id,
                    run.tick,
                    run.missed,
                    now + self._settings.lease,
                    now + self._settings.run_deadline + timedelta(seconds=spec.retry_refusals_seconds),
                ):
                    inserted.append((schedule_id, run.tick))
            await store.schedules.advance(conn, schedule_id, outcome.next_tick, outcome.skipped)
            await store.schedule_runs.prune(conn, schedule_id, self._settings.history)
        for _, tick in inserted:
            log.info("schedule_tick_claimed", schedule_id=str(schedule_id), tick=tick.isoformat())
        if outcome.skipped:
            log.info("schedule_ticks_skipped", schedule_id=str(schedule_id), skipped=outcome.skipped)
        return inserted

    async def _work(self, row: asyncpg.Record) -> None:
        """Move a run this replica holds on by one step (or two: a session ready at once gets its prompt)."""
        schedule_id, tick = row["schedule_id"], row["tick_at"]
        bound = log.bind(schedule_id=str(schedule_id), tick=tick.isoformat())
        try:
            if self._clock.now() >= row["deadline_at"]:
                seconds = self._settings.run_deadline.total_seconds()
                await self._fail(row, STARTUP_DEADLINE_EXCEEDED, f"the session was not started within {seconds:g} s")
                return
            session_id = str(row["session_id"] or "")
            if row["state"] == store.schedule_runs.CREATING:
                session_id = await self._create(row)
                if not session_id:
                    return
            await self._start(row, session_id)
        except database.FAULTS as error:  # the lease lapses and this or another replica tries again
            bound.warning("schedule_run_interrupted", error=str(error))

    async def _create(self, row: asyncpg.Record) -> str:
        spec = pb.ScheduleSpec.FromString(row["spec"])
        schedule_id, tick = row["schedule_id"], row["tick_at"]
        try:
            session = await self._kernel.create_session(
                CreateSession(
                    request_id=session_request_id(str(schedule_id), tick),
                    project_id=row["project_id"],
                    agent=spec.agent,
                    agent_version=spec.agent_version,
                    environment=spec.environment,
                    environment_version=spec.environment_version,
                    labels={SCHEDULE_LABEL: row["name"]},
                )
            )
        except KernelError as error:
            if not await self._retried(row, spec, error):
                await self._fail(row, error.reason, error.message)
            return ""
        await store.schedule_runs.created(self._pool, schedule_id, tick, session.session_id, self._clock.now())
        log.info("schedule_session_created", schedule_id=str(schedule_id), session_id=session.session_id)
        return session.session_id

    async def _start(self, row: asyncpg.Record, session_id: str) -> None:
        schedule_id, tick = row["schedule_id"], row["tick_at"]
        session = await self._journal.session(session_id)
        if session is None or session.state in _GONE:
            why = session.failure_reason if session is not None and session.failure_reason else "it is gone"
            await self._fail(row, SESSION_FAILED, f"session {session_id} did not start: {why}")
            return
        if session.state not in _TAKES_MESSAGES:  # still CREATING: looked at again on a later pass
            await store.schedule_runs.look_again(
                self._pool, schedule_id, tick, self._clock.now() + self._settings.interval
            )
            return
        spec = pb.ScheduleSpec.FromString(row["spec"])
        try:
            await self._conversation.send_message(SendMessage(session_id, prompt_message_id(tick), spec.prompt))
        except KernelError as error:
            if not await self._retried(row, spec, error):
                await self._fail(row, error.reason, error.message)
            return
        if await store.schedule_runs.finish(self._pool, schedule_id, tick, store.schedule_runs.STARTED):
            self._metrics.schedule_runs.labels("started").inc()
            log.info("schedule_run_started", schedule_id=str(schedule_id), session_id=session_id)

    async def _retried(self, row: asyncpg.Record, spec: pb.ScheduleSpec, error: KernelError) -> bool:
        """Whether the schedule's retry policy tries the refused run again (and it is let go until then):
        a refusal that waiting can clear, within `retry_refusals_seconds` of the tick and before the
        run's deadline. The run shows the refusal meanwhile."""
        code = code_for(error)
        if not spec.retry_refusals_seconds or code not in _WAITING_HELPS:
            return False
        now, tick = self._clock.now(), row["tick_at"]
        backoff = min(RETRY_FIRST * 2 ** max(0, row["attempts"] - 1), RETRY_LONGEST)
        again = now + max(backoff, error.retry_after or timedelta(0))
        if again > tick + timedelta(seconds=spec.retry_refusals_seconds) or again >= row["deadline_at"]:
            return False
        await store.schedule_runs.retry_after_refusal(
            self._pool, row["schedule_id"], tick, again, error.reason, error.message
        )
        self._metrics.schedule_runs.labels("retried").inc()
        log.info("schedule_run_refused_retrying", schedule_id=str(row["schedule_id"]), reason=error.reason, at=again)
        return True

    async def _fail(self, row: asyncpg.Record, reason: str, message: str) -> None:
        schedule_id, tick = row["schedule_id"], row["tick_at"]
        if await store.schedule_runs.finish(self._pool, schedule_id, tick, store.schedule_runs.FAILED, reason, message):
            self._metrics.schedule_runs.labels("failed").inc()
            log.warning("schedule_run_failed", schedule_id=str(schedule_id), reason=reason, error=message)
