"""Complete settles: when a turn is failed or a runtime is lost or released, nothing it had open
stays open — tool calls get an error result, the parked interaction is closed, the turn ends with
a reason and background tasks are closed as lost, all journaled — so the session idle-stops later."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from astrabox.render import render
from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from astrabox.sessionkernel.v1 import events_pb2, session_pb2
from controlplane.deadlines import DeadlineSweeper
from tests.controlplane.test_conversation import api, commands, engine, finish_turn, ok, ready, session_of

__all__ = ["api"]  # the fixture, used by name


def tool_use(tool_use_id: str, name: str = "Bash", command: str = "touch f") -> dict:
    block = {"type_name": "ToolUseBlock", "id": tool_use_id, "name": name, "input": {"command": command}}
    return engine("AssistantMessage", content=[block], model="offline")


def tool_result(tool_use_id: str, text: str = "done") -> dict:
    block = {"type_name": "ToolResultBlock", "tool_use_id": tool_use_id, "content": text, "is_error": False}
    return engine("UserMessage", content=[block])


async def history(api, sid: str, after: int = 0) -> list[events_pb2.SessionEvent]:
    return list((await ok(api, "ListSessionEvents", session_id=sid, after_seq=after, page_size=1000)).events)


def lines(events: list[events_pb2.SessionEvent]) -> list[str]:
    return [line.split("] ", 1)[1] for event in events for line in render(event)]


async def start_background_task(api, plane, sid: str) -> None:
    """A turn that leaves a background task running after its result."""
    turn = (await ok(api, "SendMessage", session_id=sid, client_message_id="bg", text="background: sleep 60")).turn_id
    await plane.report(sid, turn, **tool_use("tu-bg", command="sleep 60 &"))
    await plane.report(sid, turn, **tool_result("tu-bg", "Command running in background"))
    await finish_turn(plane, sid, turn)
    await plane.report(
        sid, **engine("TaskStartedMessage", task_id="t1", description="sleep 60", subtype="task_started")
    )
    assert [t.task_id for t in (await session_of(api, sid)).background_tasks] == ["t1"]


async def park_on_approval(api, plane, sid: str) -> str:
    """A turn whose tool call waits for a human's approval."""
    turn = (await ok(api, "SendMessage", session_id=sid, client_message_id="park", text="run: touch f")).turn_id
    await plane.report(sid, turn, **tool_use("tu-1"))
    await plane.report(
        sid,
        turn,
        interaction_requested=runner_pb2.InteractionRequested(
            interaction_id="i-1", tool_name="Bash", input_json='{"command": "touch f"}', tool_use_id="tu-1"
        ),
    )
    assert (await session_of(api, sid)).state == session_pb2.SESSION_STATE_WAITING_FOR_INPUT
    return turn


async def test_a_lapsed_lease_settles_the_tool_call_interaction_turn_and_task_and_the_session_idles_later(api, plane):
    sid = await ready(api, plane)
    await start_background_task(api, plane, sid)
    turn = await park_on_approval(api, plane, sid)
    before = (await session_of(api, sid)).last_seq

    await plane.pool.execute("UPDATE agents SET lease_expires_at = now() - interval '1 s'")
    assert await plane.sweeper.sweep() == 1

    session = await session_of(api, sid)
    assert session.state == session_pb2.SESSION_STATE_READY and not session.current_turn_id
    assert not session.HasField("pending_interaction") and not session.background_tasks
    settled = await history(api, sid, before)
    by_kind = {events_pb2.EventKind.Name(e.kind): e for e in settled}
    assert by_kind["EVENT_KIND_TOOL_CALL_SETTLED"].tool_call_settled.tool_use_id == "tu-1"
    assert by_kind["EVENT_KIND_TOOL_CALL_SETTLED"].turn_id == turn
    assert by_kind["EVENT_KIND_BACKGROUND_TASK_LOST"].background_task_lost.task_id == "t1"
    assert [e.turn_id for e in settled if e.HasField("turn_failed")] == [turn]
    assert [e.interaction_closed.interaction_id for e in settled if e.HasField("interaction_closed")] == ["i-1"]
    shown = lines(settled)
    assert any(line.startswith("  ✗ tool result (Bash, no result)") and "lease lapsed" in line for line in shown), shown
    assert any(line.startswith("✗ background task t1 lost") for line in shown), shown
    # The agent is told to let go of the turn it may still hold (settle_here), in the same settle.
    let_go = [c.interrupt_turn for c in await commands(plane, sid) if c.HasField("interrupt_turn")]
    assert [(i.turn_id, "lease lapsed" in i.settled_reason) for i in let_go] == [(turn, True)]
    # The tool call that had its result is not settled again.
    assert [e.tool_call_settled.tool_use_id for e in await history(api, sid) if e.HasField("tool_call_settled")] == [
        "tu-1"
    ]

    # The agent comes back still holding the runtime: nothing open keeps it up, so it idle-stops.
    await plane.connect_agent()
    await plane.agents.mark_held_runtimes("agent-1", [sid])
    sweeper = DeadlineSweeper(
        plane.pool,
        plane.journal,
        plane.turns,
        plane.agents,
        timedelta(seconds=180),
        idle_stop_after=timedelta(milliseconds=300),
    )
    await asyncio.sleep(0.4)
    assert await sweeper.sweep() == 1
    assert [c.stop_runtime.reason for c in await commands(plane, sid) if c.HasField("stop_runtime")] == [
        "idle for 0.3 s"
    ]


async def test_an_engine_that_dies_mid_turn_leaves_no_tool_call_or_task_open(api, plane):
    sid = await ready(api, plane)
    await start_background_task(api, plane, sid)
    turn = (await ok(api, "SendMessage", session_id=sid, client_message_id="m", text="two tools")).turn_id
    await plane.report(sid, turn, **tool_use("tu-a"))
    await plane.report(sid, turn, **tool_use("tu-b", command="sleep 5"))
    await plane.report(sid, turn, **tool_result("tu-a"))
    await plane.report(sid, turn, turn_aborted=runner_pb2.TurnAborted(reason="the engine exited (code 137)"))

    events = await history(api, sid)
    kinds = [events_pb2.EventKind.Name(e.kind) for e in events]
    settled = [e.tool_call_settled for e in events if e.HasField("tool_call_settled")]
    assert [(s.tool_use_id, s.tool_name) for s in settled] == [("tu-b", "Bash")]
    assert "engine exited" in settled[0].reason
    # The error result comes before the turn's end, as the engine's own would have.
    assert kinds.index("EVENT_KIND_TOOL_CALL_SETTLED") < kinds.index("EVENT_KIND_TURN_FAILED")
    assert "EVENT_KIND_BACKGROUND_TASK_LOST" in kinds
    assert not (await session_of(api, sid)).background_tasks


async def test_archiving_a_parked_session_settles_everything_it_had_open(api, plane):
    sid = await ready(api, plane)
    await start_background_task(api, plane, sid)
    turn = await park_on_approval(api, plane, sid)
    before = (await session_of(api, sid)).last_seq
    archived = (await ok(api, "ArchiveSession", session_id=sid, request_id="a1")).session
    assert not archived.background_tasks and not archived.HasField("pending_interaction")
    shown = lines(await history(api, sid, before))
    assert shown[:4] == [
        "  ↳ closed: the session was archived",
        "  ✗ tool result (Bash, no result): the session was archived",
        "✗ turn failed: the session was archived",
        "✗ background task t1 lost: the session was archived",
    ]
    settled = [e for e in await history(api, sid, before) if e.HasField("tool_call_settled")]
    assert [(e.turn_id, e.tool_call_settled.is_error) for e in settled] == [(turn, True)]


async def test_a_runtime_the_agent_reports_lost_closes_its_background_tasks(api, plane):
    sid = await ready(api, plane)
    await start_background_task(api, plane, sid)
    await plane.report(sid, runtime_lost=runner_pb2.RuntimeLost(reason="the sandbox disappeared"))
    assert not (await session_of(api, sid)).background_tasks
    lost = [e.background_task_lost for e in await history(api, sid) if e.HasField("background_task_lost")]
    assert [(t.task_id, t.reason) for t in lost] == [("t1", "the sandbox disappeared")]


async def test_a_tool_call_made_after_its_turn_ended_is_settled_at_once_and_left_open_nowhere(api, plane):
    sid = await ready(api, plane)
    turn = await park_on_approval(api, plane, sid)
    await plane.pool.execute("UPDATE agents SET lease_expires_at = now() - interval '1 s'")
    await plane.sweeper.sweep()
    await plane.connect_agent()  # the partition heals: the engine went on with the turn meanwhile
    await plane.agents.mark_held_runtimes("agent-1", [sid])
    before = (await session_of(api, sid)).last_seq

    await plane.report(sid, turn, **tool_use("tu-late", command="rm -rf build"))

    late = await history(api, sid, before)
    assert [events_pb2.EventKind.Name(e.kind) for e in late] == [
        "EVENT_KIND_ENGINE_MESSAGE",
        "EVENT_KIND_TOOL_CALL_SETTLED",
    ]
    assert late[0].engine_message.late
    settled = late[1].tool_call_settled
    assert (late[1].turn_id, settled.tool_use_id, settled.is_error) == (turn, "tu-late", True)
    assert lines(late)[-1] == "  ✗ tool result (Bash, no result): its turn had already ended"
    assert await plane.pool.fetchval("SELECT count(*) FROM open_tool_calls WHERE session_id = $1", sid) == 0
    # A later loss of the engine has nothing of it left to settle.
    await plane.report(sid, runtime_lost=runner_pb2.RuntimeLost(reason="the sandbox disappeared"))
    assert [e.tool_call_settled.tool_use_id for e in await history(api, sid) if e.HasField("tool_call_settled")] == [
        "tu-1",
        "tu-late",
    ]


async def test_a_background_task_reported_after_the_session_was_archived_is_closed_as_lost(api, plane):
    """Found by the chaos suite: a turn's Bash started a background task just as the session was
    archived; the engine's TaskStartedMessage came after the release and opened a task no engine
    would ever end, so the session kept it open forever."""
    sid = await ready(api, plane)
    turn = (await ok(api, "SendMessage", session_id=sid, client_message_id="m", text="sleep: 7")).turn_id
    await plane.report(sid, turn, **tool_use("tu-1", command="sleep 7"))
    await ok(api, "ArchiveSession", session_id=sid, request_id="archive")
    await plane.report(
        sid,
        turn,
        **engine("TaskStartedMessage", task_id="late-1", description="Sleep 7 seconds", subtype="task_started"),
    )
    session = await session_of(api, sid)
    assert session.state == session_pb2.SESSION_STATE_ARCHIVED and not session.background_tasks
    events = await history(api, sid)
    lost = [e.background_task_lost for e in events if e.HasField("background_task_lost")]
    assert [(t.task_id, t.reason) for t in lost] == [("late-1", "the session was archived")]
    assert await plane.pool.fetchval("SELECT count(*) FROM background_tasks WHERE state = 'open'") == 0
