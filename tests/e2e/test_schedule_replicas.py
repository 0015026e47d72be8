"""Schedules on two real control-plane replicas sharing one database, with a real agent: each tick
runs exactly once, and a replica SIGKILLed mid-tick leaves neither a missed nor a doubled run."""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from astrabox.client import AstraBoxClient
from astrabox.scheduling import ScheduleRun
from tests.support.processes import start_controlplane
from tests.support.stack import StartStack

pytestmark = pytest.mark.e2e

LABEL = "astrabox.dev/schedule"
FAST = ("--schedule-interval", "0.3", "--schedule-min-interval", "1", "--schedule-lease", "3")


async def _runs(client: AstraBoxClient, name: str) -> list[ScheduleRun]:
    return [run async for run in client.schedules.runs(name)]


async def _settled(client: AstraBoxClient, name: str, timeout: float) -> list[ScheduleRun]:
    deadline = time.monotonic() + timeout
    while True:
        runs = await _runs(client, name)
        if runs and all(r.state in ("started", "failed") for r in runs):
            return runs
        assert time.monotonic() < deadline, runs
        await asyncio.sleep(0.5)


async def _assert_once_per_tick(client: AstraBoxClient, name: str, runs: list[ScheduleRun], step: timedelta) -> None:
    ticks = [r.tick_time for r in runs]
    assert all(a - b == step for a, b in itertools.pairwise(ticks)), ticks  # none missed, none twice
    assert all(r.state == "started" for r in runs), runs
    sessions = (await client.list_sessions(label_selector=f"{LABEL}={name}", page_size=500)).sessions
    assert sorted(s.session_id for s in sessions) == sorted(r.session_id for r in runs)


async def test_two_replicas_and_a_per_minute_schedule_make_exactly_three_sessions_in_three_minutes(
    stacks: StartStack, database_url: str, tmp_path: Path
) -> None:
    stack = stacks(controlplane_args=("--schedule-interval", "0.5"), args=("--capacity", "10"))
    (tmp_path / "replica-b").mkdir()
    replica_b, _ = start_controlplane(database_url, tmp_path / "replica-b", args=("--schedule-interval", "0.5"))
    try:
        async with AstraBoxClient.connect(stack.address) as client:
            schedule = await client.schedules.create("per-minute", "* * * * *", "Say hi", missed_ticks="skip")
            first = schedule.next_tick_time
            # Three ticks: first, +1 min, +2 min; pausing before the fourth.
            await asyncio.sleep((first + timedelta(minutes=2, seconds=5) - datetime.now(UTC)).total_seconds())
            deadline = first + timedelta(minutes=2, seconds=50)
            while len([r for r in await _runs(client, "per-minute") if r.state == "started"]) < 3:
                assert datetime.now(UTC) < deadline, await _runs(client, "per-minute")
                await asyncio.sleep(1)
            await client.schedules.pause("per-minute")
            runs = await _settled(client, "per-minute", 30)
            assert [r.tick_time for r in runs] == [first + timedelta(minutes=m) for m in (2, 1, 0)]
            await _assert_once_per_tick(client, "per-minute", runs, timedelta(minutes=1))
            # Both replicas ran the scheduler (each claimed through the same table): neither made a second session.
            assert replica_b.proc.poll() is None
    finally:
        replica_b.stop()


async def test_a_replica_killed_mid_tick_leaves_no_missed_or_doubled_run(
    stacks: StartStack, database_url: str, tmp_path: Path
) -> None:
    # The agent is on replica A; replica B is the one killed, after it claimed a tick.
    stack = stacks(controlplane_args=FAST, args=("--capacity", "20"))
    (tmp_path / "replica-b").mkdir()
    replica_b, _ = start_controlplane(database_url, tmp_path / "replica-b", args=FAST)
    try:
        async with AstraBoxClient.connect(stack.address) as client:
            await client.schedules.create("crashy", "*/3 * * * * *", "Say hi", missed_ticks="run-each")
            await asyncio.to_thread(replica_b.wait_for_line, r"schedule_tick_claimed", 60)
            replica_b.kill()  # SIGKILL, right after its claim committed: its run is mid-tick
            await asyncio.sleep(7)  # its lease (3 s) lapses; replica A finishes the run, ticks go on
            await client.schedules.pause("crashy")
            runs = await _settled(client, "crashy", 90)
            assert len(runs) >= 3, runs
            await _assert_once_per_tick(client, "crashy", runs, timedelta(seconds=3))
    finally:
        replica_b.stop()
