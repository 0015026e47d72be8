"""No message is left RUNNING on an input nobody holds, and a turn the control plane ends on its
own is let go of on the agent: the agent's verdicts settle what they refuse, the delivery deadline
bounds an input no agent accepted, a lease lapse tells the agent, and what a settled turn still
outputs is journaled as late and settles nothing."""

from __future__ import annotations

from datetime import timedelta

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from astrabox.sessionkernel.v1 import session_pb2
from controlplane.convert import event_to_proto
from controlplane.deadlines import DeadlineSweeper
from controlplane.journal import EventKind
from tests.controlplane.test_conversation import api, commands, engine, finish_turn, ok, ready, session_of

__all__ = ["api"]  # the fixture


async def _command_seq(plane, session_id: str, kind: str) -> int:
    rows = await plane.pool.fetch(
        "SELECT command_seq, body FROM agent_commands WHERE session_id = $1 ORDER BY command_seq", session_id
    )
    return [r["command_seq"] for r in rows if runner_pb2.Command.FromString(r["body"]).WhichOneof("body") == kind][-1]


async def _events(plane, session_id: str):
    return await plane.journal.read(session_id, 0, 1000)


async def test_a_refused_delivery_fails_its_turn_with_the_reason_and_the_next_message_runs(api, plane):
    sid = await ready(api, plane)
    first = (await ok(api, "SendMessage", session_id=sid, client_message_id="m1", text="one")).turn_id
    second = (await ok(api, "SendMessage", session_id=sid, client_message_id="m2", text="two")).turn_id
    seq = await _command_seq(plane, sid, "deliver_input")
    await plane.verdicts.record("agent-1", seq, "NOT_FOUND: session has no runtime on this agent")

    failed = [e for e in await _events(plane, sid) if e.kind is EventKind.TURN_FAILED]
    assert [e.turn_id for e in failed] == [first]
    assert "refused the message: NOT_FOUND: session has no runtime" in failed[0].payload["reason"]
    session = await session_of(api, sid)
    assert session.current_turn_id == second and session.state == session_pb2.SESSION_STATE_RUNNING
    delivered = [c.deliver_input.turn_id for c in await commands(plane, sid) if c.HasField("deliver_input")]
    assert delivered == [first, second]
    # The same verdict again changes nothing.
    await plane.verdicts.record("agent-1", seq, "NOT_FOUND: session has no runtime on this agent")
    assert (await session_of(api, sid)).current_turn_id == second


async def test_an_input_no_agent_accepts_fails_at_the_delivery_deadline_and_the_agent_lets_go(api, plane):
    sweeper = DeadlineSweeper(
        plane.pool, plane.journal, plane.turns, plane.agents, timedelta(seconds=180), delivery_deadline=timedelta(0)
    )
    sid = await ready(api, plane)
    accepted = (await ok(api, "SendMessage", session_id=sid, client_message_id="m1", text="taken")).turn_id
    await plane.verdicts.record("agent-1", await _command_seq(plane, sid, "deliver_input"), "")
    assert await sweeper.sweep() == 0  # accepted by the agent: the engine has it, no deadline applies
    await finish_turn(plane, sid, accepted)

    stuck = (await ok(api, "SendMessage", session_id=sid, client_message_id="m2", text="never taken")).turn_id
    assert await sweeper.sweep() == 1
    failed = [e for e in await _events(plane, sid) if e.kind is EventKind.TURN_FAILED]
    assert [e.turn_id for e in failed] == [stuck]
    assert "did not accept the message within 0 s" in failed[0].payload["reason"]
    assert (await session_of(api, sid)).state == session_pb2.SESSION_STATE_READY
    let_go = [c.interrupt_turn for c in await commands(plane, sid) if c.HasField("interrupt_turn")]
    assert [(i.turn_id, bool(i.settled_reason)) for i in let_go] == [(stuck, True)]
    assert await sweeper.sweep() == 0  # settled once


async def test_a_lapsed_lease_tells_the_agent_to_let_go_and_late_output_settles_nothing(api, plane):
    sid = await ready(api, plane)
    turn = (await ok(api, "SendMessage", session_id=sid, client_message_id="m1", text="ask me")).turn_id
    await plane.report(
        sid,
        turn,
        interaction_requested=runner_pb2.InteractionRequested(
            interaction_id="i-1", tool_name="AskUserQuestion", input_json='{"questions": []}', tool_use_id="tu-1"
        ),
    )
    await plane.pool.execute("UPDATE agents SET lease_expires_at = now() - interval '1 s'")
    await plane.sweeper.sweep()
    let_go = [c.interrupt_turn for c in await commands(plane, sid) if c.HasField("interrupt_turn")]
    assert [i.turn_id for i in let_go] == [turn] and "lease lapsed" in let_go[0].settled_reason

    # The agent comes back (a partition healed) with what the turn did meanwhile.
    await plane.connect_agent()
    await plane.agents.mark_held_runtimes("agent-1", [sid])
    next_turn = (await ok(api, "SendMessage", session_id=sid, client_message_id="m2", text="next")).turn_id
    await plane.report(sid, turn, **engine("AssistantMessage", content=[{"type": "text", "text": "late"}]))
    await plane.report(
        sid,
        turn,
        interaction_requested=runner_pb2.InteractionRequested(
            interaction_id="i-2", tool_name="Bash", input_json='{"command": "ls"}', tool_use_id="tu-2"
        ),
    )
    await finish_turn(plane, sid, turn)  # the late turn's result: it settles nothing

    session = await session_of(api, sid)
    assert session.current_turn_id == next_turn and session.state == session_pb2.SESSION_STATE_RUNNING
    assert not session.HasField("pending_interaction")
    events = await _events(plane, sid)
    late = [e for e in events if e.kind is EventKind.ENGINE_MESSAGE and e.turn_id == turn]
    assert late and all(event_to_proto(e).engine_message.late for e in late)
    closed = [e.payload["interaction_id"] for e in events if e.kind is EventKind.INTERACTION_CLOSED]
    assert closed == ["i-1", "i-2"]  # the parked one by the lapse, the late one at once
    assert [e.turn_id for e in events if e.kind is EventKind.TURN_COMPLETED] == []
    # The next message goes to the agent after the let-go, in the same queue.
    queued = [c.WhichOneof("body") for c in await commands(plane, sid)]
    assert queued.index("interrupt_turn") < len(queued) - 1 and queued[-1] == "deliver_input"


async def _resent(plane, session_id: str) -> list[str]:
    """What a reconnecting agent would be sent again for the session after its start: its
    unacknowledged commands (this harness never acknowledges the StartRuntime)."""
    rows = await plane.pool.fetch(
        "SELECT body FROM agent_commands WHERE session_id = $1 AND acked_at IS NULL ORDER BY command_seq", session_id
    )
    kinds = [runner_pb2.Command.FromString(r["body"]).WhichOneof("body") for r in rows]
    return [kind for kind in kinds if kind != "start_runtime"]


async def test_an_ended_turns_unacknowledged_input_is_withdrawn_so_a_returning_agent_never_runs_it(api, plane):
    """Found by a chaos round: an agent SIGKILLed as a message was accepted came back after the
    session was archived, replayed the DeliverInput still queued for it and ran the ended turn."""
    sid = await ready(api, plane)
    turn = (await ok(api, "SendMessage", session_id=sid, client_message_id="m1", text="one")).turn_id
    assert await _resent(plane, sid) == ["deliver_input"]
    await ok(api, "ArchiveSession", session_id=sid, request_id="a")
    assert await _resent(plane, sid) == ["destroy_runtime"]
    seq = await _command_seq(plane, sid, "deliver_input")
    error = await plane.pool.fetchval("SELECT error FROM agent_commands WHERE command_seq = $1", seq)
    assert error == "withdrawn: the session was archived"
    # The agent's own acknowledgement, should the withdrawn copy reach it, changes nothing.
    await plane.verdicts.record("agent-1", seq, "")
    failed = [e.turn_id for e in await _events(plane, sid) if e.kind is EventKind.TURN_FAILED]
    assert failed == [turn]


async def test_a_lapsed_lease_withdraws_the_input_its_agent_never_acknowledged(api, plane):
    sid = await ready(api, plane)
    await ok(api, "SendMessage", session_id=sid, client_message_id="m1", text="one")
    await plane.pool.execute("UPDATE agents SET lease_expires_at = now() - interval '1 s'")
    await plane.sweeper.sweep()
    # The agent is told to let go (InterruptTurn); the input itself is no longer sent.
    assert await _resent(plane, sid) == ["interrupt_turn"]
    # A message after the agent came back runs as usual.
    await plane.connect_agent()
    turn = (await ok(api, "SendMessage", session_id=sid, client_message_id="m2", text="two")).turn_id
    assert (await session_of(api, sid)).current_turn_id == turn
