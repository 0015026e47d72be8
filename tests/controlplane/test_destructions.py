"""Destroying released sessions' sandboxes: a refused or unconfirmed destruction is journaled, shown
on the session and retried with backoff a bounded number of times, then abandoned to an operator; a
sandbox the agent keeps on purpose (RETAINED) counts as released; done commands are pruned."""

from __future__ import annotations

from datetime import timedelta

import structlog

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane.deadlines import DeadlineSweeper
from controlplane.destructions import DestroyRetries
from controlplane.verdicts import CommandVerdicts
from tests.controlplane.test_conversation import api, ok, ready, session_of
from tests.controlplane.test_settles import history, lines

__all__ = ["api"]  # the fixture, used by name

REFUSED = "FAILED_PRECONDITION: sandbox sb destruction is refused; the session is kept"


async def destroys(plane, sid: str) -> list[int]:
    """The command_seq of every DestroyRuntime queued for the session."""
    rows = await plane.pool.fetch(
        "SELECT command_seq, body FROM agent_commands WHERE session_id = $1 ORDER BY command_seq", sid
    )
    return [r["command_seq"] for r in rows if runner_pb2.Command.FromString(r["body"]).HasField("destroy_runtime")]


async def ack_all_but_destroys(plane, sid: str) -> None:
    rows = await plane.pool.fetch("SELECT command_seq FROM agent_commands WHERE session_id = $1", sid)
    for row in rows:
        if row["command_seq"] not in await destroys(plane, sid):
            await plane.verdicts.record("agent-1", row["command_seq"], "")


async def test_a_refused_destruction_is_journaled_shown_retried_with_backoff_then_abandoned(api, plane):
    verdicts = CommandVerdicts(
        plane.journal, plane.turns, DestroyRetries(timedelta(seconds=60), timedelta(seconds=90), 3)
    )
    sweeper = DeadlineSweeper(
        plane.pool, plane.journal, plane.turns, plane.agents, timedelta(seconds=180), destroy_retry=timedelta(0)
    )
    sid = await ready(api, plane)
    await ok(api, "ArchiveSession", session_id=sid, request_id="a1")
    await ack_all_but_destroys(plane, sid)

    async def refuse_last() -> None:
        await verdicts.record("agent-1", (await destroys(plane, sid))[-1], REFUSED, runner_pb2.DESTROY_VERDICT_REFUSED)

    async def when_due() -> int:
        await plane.pool.execute("UPDATE sessions SET destroy_retry_at = now() WHERE session_id = $1", sid)
        return await sweeper.sweep()

    await refuse_last()
    shown = await session_of(api, sid)
    failure = shown.destroy_failure
    assert (failure.reason, failure.attempts, failure.abandoned) == (REFUSED, 1, False)
    wait = failure.next_attempt_time.ToDatetime() - shown.update_time.ToDatetime()
    assert timedelta(seconds=59) < wait <= timedelta(seconds=61)
    assert await sweeper.sweep() == 0  # not before its backoff
    assert len(await destroys(plane, sid)) == 1

    assert await when_due() == 1
    assert len(await destroys(plane, sid)) == 2
    await refuse_last()
    assert (await session_of(api, sid)).destroy_failure.attempts == 2
    assert await when_due() == 1
    await refuse_last()  # the third failure: the limit

    failure = (await session_of(api, sid)).destroy_failure
    assert (failure.attempts, failure.abandoned, failure.HasField("next_attempt_time")) == (3, True, False)
    assert await when_due() == 0  # no more automatic attempts
    assert len(await destroys(plane, sid)) == 3
    assert [line for line in lines(await history(api, sid)) if "not destroyed" in line] == [
        f"✗ sandbox not destroyed (attempt 1): {REFUSED}; retrying in 60 s",
        f"✗ sandbox not destroyed (attempt 2): {REFUSED}; retrying in 90 s",
        f"✗ sandbox not destroyed (attempt 3): {REFUSED}; abandoned: remove it by hand",
    ]


async def test_an_abandoned_destruction_is_logged_at_error(api, plane):
    verdicts = CommandVerdicts(plane.journal, plane.turns, DestroyRetries(attempts=1))
    sid = await ready(api, plane)
    await ok(api, "DeleteSession", session_id=sid, request_id="d1")
    await ack_all_but_destroys(plane, sid)
    with structlog.testing.capture_logs() as logs:
        await verdicts.record("agent-1", (await destroys(plane, sid))[-1], "UNAVAILABLE: the driver timed out")
    [abandoned] = [entry for entry in logs if entry["event"] == "sandbox_destroy_abandoned"]
    assert abandoned["log_level"] == "error" and abandoned["session_id"] == sid and abandoned["sandbox_id"] == "sb"


async def test_a_retained_sandbox_counts_as_released(api, plane):
    sid = await ready(api, plane)
    await ok(api, "ArchiveSession", session_id=sid, request_id="a1")
    await ack_all_but_destroys(plane, sid)
    [first] = await destroys(plane, sid)
    await plane.verdicts.record("agent-1", first, "UNAVAILABLE: could not confirm")
    assert (await session_of(api, sid)).HasField("destroy_failure")
    assert await plane.sweeper.sweep() == 1
    await plane.verdicts.record("agent-1", (await destroys(plane, sid))[-1], "", runner_pb2.DESTROY_VERDICT_RETAINED)

    shown = await session_of(api, sid)
    assert not shown.HasField("destroy_failure")
    assert await plane.pool.fetchval("SELECT sandbox_id FROM sessions WHERE session_id = $1", sid) is None
    assert await plane.sweeper.sweep() == 0 and len(await destroys(plane, sid)) == 2  # never destroyed again
    assert lines(await history(api, sid))[-1] == "● sandbox sb kept by agent agent-1 (retained); released"


async def test_acknowledged_commands_are_pruned_after_their_retention(api, plane):
    sid = await ready(api, plane)
    for i in range(5):
        await ok(api, "SetPermissionMode", session_id=sid, permission_mode="plan" if i % 2 else "default")
    rows = await plane.pool.fetch("SELECT command_seq FROM agent_commands ORDER BY command_seq")
    assert len(rows) == 6  # the start and five mode changes
    for row in rows[:4]:
        await plane.verdicts.record("agent-1", row["command_seq"], "")
    await plane.pool.execute(
        "UPDATE agent_commands SET acked_at = now() - interval '2 hours' WHERE command_seq <= $1",
        rows[2]["command_seq"],
    )
    sweeper = DeadlineSweeper(
        plane.pool,
        plane.journal,
        plane.turns,
        plane.agents,
        timedelta(seconds=180),
        command_retention=timedelta(hours=1),
    )
    await sweeper.sweep()
    left = await plane.pool.fetch("SELECT command_seq, acked_at IS NULL AS pending FROM agent_commands ORDER BY 1")
    # The three acknowledged long ago are gone; the recent one and the unacknowledged stay (delivered still).
    assert [(r["command_seq"], r["pending"]) for r in left] == [
        (rows[3]["command_seq"], False),
        (rows[4]["command_seq"], True),
        (rows[5]["command_seq"], True),
    ]
    assert [c.command_seq for c in await plane.agents.unacked("agent-1", 0)] == [
        rows[4]["command_seq"],
        rows[5]["command_seq"],
    ]
