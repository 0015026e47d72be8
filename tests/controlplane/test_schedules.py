"""Schedules through the real SDK against an in-process control plane on real PostgreSQL: refusals,
pause and resume with the missed-ticks policies, history with an error, and the ticks' sessions
getting their prompt. Seconds-level cron expressions keep it fast (the minimum interval is set to
2 s here); tests/e2e/test_schedule_replicas.py runs per-minute ticks on two real replicas."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import grpc
import pytest
import pytest_asyncio

from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from astrabox.scheduling import ScheduleRun, spec
from astrabox.sessionkernel.v1 import session_pb2
from controlplane.schedules.timing import Cron, MissedTicks, claim
from controlplane.server import RunningControlPlane, serve
from controlplane.settings import ControlPlaneSettings
from tests.controlplane.conftest import Plane
from tests.controlplane.test_quotas import team

LABEL = "astrabox.dev/schedule"


@pytest_asyncio.fixture
async def running(plane: Plane, database_url: str, bootstrap_key_file: str) -> AsyncIterator[RunningControlPlane]:
    await plane.connect_agent(capacity=1000)
    settings = ControlPlaneSettings(
        database_url=database_url,
        listen="127.0.0.1:0",
        bootstrap_key_file=bootstrap_key_file,
        lease_ttl=timedelta(minutes=10),
        idle_stop_after=timedelta(0),
        schedule_interval=timedelta(seconds=0.2),
        schedule_min_interval=timedelta(seconds=2),
        schedule_grace=timedelta(seconds=1),
        schedules_per_project=3,
    )
    async with serve(settings) as control_plane:
        yield control_plane


async def _runs(client: AstraBoxClient, name: str) -> list[ScheduleRun]:
    return [run async for run in client.schedules.runs(name, page_size=7)]


async def _start_sessions(plane: Plane, client: AstraBoxClient, name: str) -> None:
    """What the agent would do: report every CREATING session of the schedule's as started."""
    page = await client.list_sessions(label_selector=f"{LABEL}={name}")
    for session in page.sessions:
        if session.state == session_pb2.SESSION_STATE_CREATING:
            await plane.runtime_started(session.session_id)


async def _until(check, timeout: float = 20.0):  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found = await check()
        if found:
            return found
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.1)


async def refused(call) -> AstraBoxError:  # type: ignore[no-untyped-def]
    with pytest.raises(AstraBoxError) as caught:
        await call
    return caught.value


async def test_each_tick_starts_a_session_with_the_prompt_once(plane: Plane, running: RunningControlPlane) -> None:
    async with AstraBoxClient.connect(running.address) as client:
        schedule = await client.schedules.create("every-second", "*/2 * * * * *", "Say hello", missed_ticks="run-each")
        assert schedule.next_tick_time > datetime.now(UTC) - timedelta(seconds=1)

        async def three_started() -> list[ScheduleRun] | None:
            await _start_sessions(plane, client, "every-second")
            runs = [r for r in await _runs(client, "every-second") if r.state == "started"]
            return runs if len(runs) >= 3 else None

        await _until(three_started)
        await client.schedules.pause("every-second")
        await asyncio.sleep(0.5)  # a pass that was under way ends
        await _until(lambda: _settled(plane, client, "every-second"))
        runs = await _runs(client, "every-second")
        ticks = [r.tick_time for r in runs]
        assert len(set(ticks)) == len(ticks)
        # One tick every 2 seconds, none left out (run-each), newest first.
        assert all(a - b == timedelta(seconds=2) for a, b in itertools.pairwise(ticks)), ticks
        assert all(r.state == "started" for r in runs), runs
        sessions = await client.list_sessions(label_selector=f"{LABEL}=every-second")
        assert sorted(s.session_id for s in sessions.sessions) == sorted(r.session_id for r in runs)
        for run in runs:  # each session got the prompt as its first message, once
            events = await client.list_events(run.session_id)
            texts = [
                e.user_message_accepted.text
                for e in events.events
                if e.WhichOneof("payload") == "user_message_accepted"
            ]
            assert texts == ["Say hello"], texts
    started = running.metrics.registry.get_sample_value("astrabox_schedule_runs_total", {"outcome": "started"})
    assert started == len(runs)


async def _settled(plane: Plane, client: AstraBoxClient, name: str) -> bool:
    await _start_sessions(plane, client, name)
    return all(r.state in ("started", "failed") for r in await _runs(client, name))


@pytest.mark.parametrize(("policy", "expect_runs"), [("skip", 0), ("run-once", 1), ("run-each", 2)])
async def test_ticks_missed_while_paused_follow_the_policy(
    plane: Plane, running: RunningControlPlane, policy: str, expect_runs: int
) -> None:
    async with AstraBoxClient.connect(running.address) as client:
        # Every 3 seconds; paused from the start: every tick until the resume is missed.
        await client.schedules.create("paused", "*/3 * * * * *", "hi", missed_ticks=policy, max_catch_up=2, paused=True)
        await asyncio.sleep(9.5)  # three or four ticks missed
        # Resumed 1.5 s after a tick (later than the 1 s grace: missed too), paused again 0.7 s later,
        # well before the next tick.
        now = datetime.now(UTC)
        last_tick = now.replace(second=now.second - now.second % 3, microsecond=0)
        await asyncio.sleep((last_tick + timedelta(seconds=4.5) - now).total_seconds() % 3)
        assert await _runs(client, "paused") == []
        resumed = await client.schedules.resume("paused")
        assert not resumed.paused
        await asyncio.sleep(0.7)
        await client.schedules.pause("paused")
        runs = await _runs(client, "paused")
        assert len(runs) == expect_runs, runs
        if policy == "run-once":
            assert runs[0].missed_ticks >= 2  # it stands for the ticks missed before it
        if policy == "run-each":
            assert runs[0].tick_time - runs[1].tick_time == timedelta(seconds=3)
            assert runs[1].missed_ticks >= 1  # the older ones were skipped: max_catch_up is 2


async def test_history_shows_a_refused_tick_with_its_reason(plane: Plane, running: RunningControlPlane) -> None:
    _, developer, _ = await team(running.address, "limited", live_sessions=1)
    async with AstraBoxClient.connect(running.address, api_key=developer) as client:
        await client.create_session(request_id="takes-the-only-slot")
        await client.schedules.create("over-quota", "*/2 * * * * *", "hi", missed_ticks="skip")
        failed = await _until(lambda: _failed(client, "over-quota"))
        assert failed.error_reason == "QUOTA_EXCEEDED" and "live sessions" in failed.error_message
        assert failed.session_id == ""
        failures = running.metrics.registry.get_sample_value("astrabox_schedule_runs_total", {"outcome": "failed"})
        assert failures is not None and failures >= 1
        await client.schedules.delete("over-quota")
        assert (await refused(client.schedules.get("over-quota"))).reason == "SCHEDULE_NOT_FOUND"


async def test_a_refused_tick_is_retried_by_its_policy_and_starts_once_room_is_made(
    plane: Plane, running: RunningControlPlane
) -> None:
    _, developer, _ = await team(running.address, "patient", live_sessions=1)
    async with AstraBoxClient.connect(running.address, api_key=developer) as client:
        invalid = await refused(client.schedules.create("too-patient", "0 3 * * *", "hi", retry_refusals_seconds=3601))
        assert (invalid.code, invalid.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_SCHEDULE")

        blocker = await client.create_session(request_id="takes-the-only-slot")
        # One tick only, a few seconds from now: the run that starts is the one that was refused.
        at = datetime.now(UTC) + timedelta(seconds=4)
        await client.schedules.create(
            "patient", f"{at.second} {at.minute} {at.hour} * * *", "hi", retry_refusals_seconds=600
        )
        waiting = await _until(lambda: _retrying(client, "patient"))
        assert waiting.error_reason == "QUOTA_EXCEEDED" and "live sessions" in waiting.error_message
        retried = running.metrics.registry.get_sample_value("astrabox_schedule_runs_total", {"outcome": "retried"})
        assert retried is not None and retried >= 1
        assert await _failed(client, "patient") is None, "a refusal the policy retries failed the tick"

        await client.delete_session(blocker.session_id)

        async def started() -> ScheduleRun | None:
            await _start_sessions(plane, client, "patient")
            return next((r for r in await _runs(client, "patient") if r.state == "started"), None)

        run = await _until(started, timeout=60)
        assert run.session_id and run.tick_time == waiting.tick_time
        await client.schedules.delete("patient")


async def _retrying(client: AstraBoxClient, name: str) -> ScheduleRun | None:
    return next((r for r in await _runs(client, name) if r.state == "creating" and r.error_reason), None)


async def _failed(client: AstraBoxClient, name: str) -> ScheduleRun | None:
    return next((r for r in await _runs(client, name) if r.state == "failed"), None)


async def test_refusals_carry_documented_reasons(plane: Plane, running: RunningControlPlane) -> None:
    project_id, developer, _ = await team(running.address, "bounded")
    async with AstraBoxClient.connect(running.address, api_key=developer) as client:
        cases = [
            (spec("not cron", "hi"), "cron"),
            (spec("* * * * * * * *", "hi"), "cron"),
            (spec("*/2 * * * * *", "hi", time_zone="Mars/Olympus"), "time_zone"),
            (spec("* * * * *", "   "), "prompt"),
            (spec("* * * * *", "x" * (32 * 1024 + 1)), "prompt"),
            (spec("* * * * *", "hi", max_catch_up=101, missed_ticks="run-each"), "max_catch_up"),
        ]
        unspecified = spec("* * * * *", "hi")
        unspecified.missed_ticks = 0
        cases.append((unspecified, "missed_ticks"))
        for i, (bad, field) in enumerate(cases):
            error = await refused(client.schedules.create(f"bad-{i}", bad))
            assert (error.code, error.reason, error.metadata.get("field")) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                "INVALID_SCHEDULE",
                field,
            ), (bad, error)
        # Faster than the control plane's minimum interval (2 s here).
        fast = await refused(client.schedules.create("fast", "*/1 * * * * *", "hi"))
        assert fast.reason == "INVALID_SCHEDULE"
        missing = await refused(client.schedules.create("no-agent", "* * * * *", "hi", agent="nobody"))
        assert missing.reason == "AGENT_NOT_FOUND"
        for i in range(3):
            await client.schedules.create(f"ok-{i}", "0 3 * * *", "hi", time_zone="Europe/Paris")
        limit = await refused(client.schedules.create("one-too-many", "0 3 * * *", "hi"))
        assert (limit.code, limit.reason, limit.metadata) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "SCHEDULE_LIMIT_REACHED",
            {"limit": "3"},
        )
        taken = await refused(client.schedules.update("ok-0", spec("x", "hi")))
        assert taken.reason == "INVALID_SCHEDULE"
        # A retry of a create answers its schedule; another schedule under the same request id is refused.
        first = await client.schedules.delete("ok-2")
        again = await client.schedules.create("ok-2", "0 3 * * *", "hi", request_id="same")
        assert again.schedule_id != first.schedule_id
        assert (
            await client.schedules.create("ok-2", "0 3 * * *", "hi", request_id="same")
        ).schedule_id == again.schedule_id
        reused = await refused(client.schedules.create("ok-2", "0 4 * * *", "hi", request_id="same"))
        assert reused.reason == "REQUEST_ID_REUSED"
        exists = await refused(client.schedules.create("ok-0", "0 3 * * *", "hi"))
        assert exists.reason in ("SCHEDULE_ALREADY_EXISTS", "SCHEDULE_LIMIT_REACHED")
        # Listing pages by name.
        names = [s.name async for s in client.schedules.list(page_size=2)]
        assert names == ["ok-0", "ok-1", "ok-2"]
        # Updating reads the spec in its time zone; the next tick is 03:00 Paris time.
        updated = await client.schedules.update("ok-1", spec("0 3 * * *", "later", time_zone="Asia/Tokyo"))
        assert updated.next_tick_time.astimezone(Cron.parse("0 3 * * *", "Asia/Tokyo").zone).hour == 3
    # Another project's schedule looks like none; a viewer may read but not create.
    async with AstraBoxClient.connect(running.address) as operator:
        assert (await refused(operator.schedules.get("ok-0"))).reason == "SCHEDULE_NOT_FOUND"
        viewer = await operator.admin.create_api_key("viewer", role="viewer", project_id=project_id)
    async with AstraBoxClient.connect(running.address, api_key=viewer.secret) as client:
        assert [s.name async for s in client.schedules.list()] == ["ok-0", "ok-1", "ok-2"]
        denied = await refused(client.schedules.pause("ok-0"))
        assert denied.reason == "ROLE_INSUFFICIENT"


T0 = datetime(2024, 1, 1, tzinfo=UTC)
EVERY_MINUTE = Cron.parse("* * * * *", "UTC")


def test_a_tick_on_time_runs_under_every_policy() -> None:
    for policy in MissedTicks:
        outcome = claim(EVERY_MINUTE, policy, 10, T0, T0 + timedelta(seconds=1), timedelta(seconds=30))
        assert [r.tick for r in outcome.runs] == [T0] and outcome.next_tick == T0 + timedelta(minutes=1)


def test_missed_ticks_are_skipped_folded_or_run_each_up_to_the_bound() -> None:
    now = T0 + timedelta(minutes=4, seconds=45)  # ticks 0..4 due, the latest 45 s late
    grace = timedelta(seconds=30)
    skip = claim(EVERY_MINUTE, MissedTicks.SKIP, 10, T0, now, grace)
    assert (skip.runs, skip.skipped, skip.next_tick) == ((), 5, T0 + timedelta(minutes=5))
    # Skipped ticks are carried to the next run that counts them.
    later = claim(EVERY_MINUTE, MissedTicks.SKIP, 10, T0 + timedelta(minutes=5), T0 + timedelta(minutes=5), grace, 5)
    assert [(r.tick, r.missed) for r in later.runs] == [(T0 + timedelta(minutes=5), 5)]
    once = claim(EVERY_MINUTE, MissedTicks.RUN_ONCE, 10, T0, now, grace)
    assert [(r.tick, r.missed) for r in once.runs] == [(T0 + timedelta(minutes=4), 4)]
    each = claim(EVERY_MINUTE, MissedTicks.RUN_EACH, 3, T0, now, grace)
    assert [(r.tick, r.missed) for r in each.runs] == [
        (T0 + timedelta(minutes=2), 2),
        (T0 + timedelta(minutes=3), 0),
        (T0 + timedelta(minutes=4), 0),
    ]


def test_time_zones_place_ticks_in_local_time_across_a_dst_change() -> None:
    paris = Cron.parse("30 2 * * *", "Europe/Paris")
    # 2024-03-31: 02:00 → 03:00 in Paris; 02:30 does not exist that day, croniter moves on.
    first = paris.after(datetime(2024, 3, 30, 12, tzinfo=UTC))
    assert first == datetime(2024, 3, 31, 1, 30, tzinfo=UTC) or first.astimezone(paris.zone).hour in (2, 3)
    summer = paris.after(datetime(2024, 4, 2, 12, tzinfo=UTC))
    assert summer == datetime(2024, 4, 3, 0, 30, tzinfo=UTC)  # 02:30 CEST
