"""The conversation lifecycle in the control plane: queued messages, interactions,
interrupts, permission modes, background tasks, archive and recovery — driven
through the servicer (grpcio-testing) and the agent outputs the relay commits."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import grpc
import pytest_asyncio

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from astrabox.sessionkernel.v1 import events_pb2, session_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as pb
from controlplane.api import SessionKernelServicer
from controlplane.deadlines import DeadlineSweeper
from controlplane.journal import EventKind
from controlplane.quotas import Quotas
from controlplane.workspace import WorkspaceFiles, WorkspaceRouter
from tests.support.grpc_testing_bridge import ServicerHarness

SERVICE = pb.DESCRIPTOR.services_by_name["SessionKernelService"]


@pytest_asyncio.fixture
async def api(plane) -> ServicerHarness:
    return ServicerHarness(
        SERVICE,
        SessionKernelServicer(
            plane.kernel, plane.conversation, WorkspaceFiles(plane.kernel, WorkspaceRouter(), Quotas(plane.pool))
        ),
        plane.caller,
    )


async def ok(api, rpc, **fields):
    response, code, details, _ = await api.unary(rpc, getattr(pb, f"{rpc}Request")(**fields))
    assert code is grpc.StatusCode.OK, details
    return response


async def refused(api, rpc, **fields):
    _, code, details, info = await api.unary(rpc, getattr(pb, f"{rpc}Request")(**fields))
    assert code is not grpc.StatusCode.OK
    return code, info.reason, details


async def ready(api, plane, request_id="s1") -> str:
    await plane.connect_agent()
    session = (await ok(api, "CreateSession", request_id=request_id)).session
    await plane.runtime_started(session.session_id)
    return session.session_id


async def commands(plane, session_id) -> list[runner_pb2.Command]:
    rows = await plane.pool.fetch(
        "SELECT body FROM agent_commands WHERE session_id = $1 ORDER BY command_seq", session_id
    )
    return [runner_pb2.Command.FromString(r["body"]) for r in rows]


async def kinds(plane, session_id) -> list[EventKind]:
    return [e.kind for e in await plane.journal.read(session_id, 0, 1000)]


def engine(type_name: str, **payload) -> dict:
    return {"engine_message": runner_pb2.EngineMessage(type_name=type_name, payload_json=json.dumps(payload))}


async def finish_turn(plane, session_id, turn_id):
    await plane.report(
        session_id,
        turn_id,
        **engine("ResultMessage", subtype="success", is_error=False, duration_ms=5, result="ok", session_id="conv-1"),
    )


async def session_of(api, session_id) -> session_pb2.Session:
    return (await ok(api, "GetSession", session_id=session_id)).session


async def test_messages_sent_back_to_back_run_in_order_each_once(api, plane):
    sid = await ready(api, plane)
    turns = [
        (await ok(api, "SendMessage", session_id=sid, client_message_id=f"m{i}", text=f"msg {i}")).turn_id
        for i in range(3)
    ]
    session = await session_of(api, sid)
    assert session.current_turn_id == turns[0] and list(session.queued_turn_ids) == turns[1:]
    for i, turn_id in enumerate(turns):
        delivered = [c.deliver_input for c in await commands(plane, sid) if c.HasField("deliver_input")]
        assert [d.turn_id for d in delivered] == turns[: i + 1]  # the next one only after the previous ended
        await plane.report(sid, turn_id, input_consumed=runner_pb2.InputConsumed())
        await finish_turn(plane, sid, turn_id)
    session = await session_of(api, sid)
    assert session.state == session_pb2.SESSION_STATE_READY and not session.queued_turn_ids
    events = await plane.journal.read(sid, 0, 1000)
    completed = [e.turn_id for e in events if e.kind is EventKind.TURN_COMPLETED]
    delivered = [e.turn_id for e in events if e.kind is EventKind.INPUT_DELIVERED]
    assert completed == turns and delivered == turns


async def test_tool_approval_is_answered_once(api, plane):
    sid = await ready(api, plane)
    turn = (await ok(api, "SendMessage", session_id=sid, client_message_id="m", text="run: touch f")).turn_id
    await plane.report(
        sid,
        turn,
        interaction_requested=runner_pb2.InteractionRequested(
            interaction_id="i-1", tool_name="Bash", input_json='{"command": "touch f"}', tool_use_id="tu-1"
        ),
    )
    session = await session_of(api, sid)
    assert session.state == session_pb2.SESSION_STATE_WAITING_FOR_INPUT
    assert session.pending_interaction.interaction_id == "i-1"
    assert session.pending_interaction.kind == session_pb2.INTERACTION_KIND_TOOL_APPROVAL
    assert json.loads(session.pending_interaction.input_json) == {"command": "touch f"}

    assert (
        await refused(api, "RespondToInteraction", session_id=sid, interaction_id="nope", deny=pb.DenyTool(message="x"))
    )[:2] == (grpc.StatusCode.NOT_FOUND, "INTERACTION_NOT_FOUND")
    assert (
        await refused(
            api,
            "RespondToInteraction",
            session_id=sid,
            interaction_id="i-1",
            allow=pb.AllowTool(updated_input_json="[1]"),
        )
    )[:2] == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    answered = await ok(
        api,
        "RespondToInteraction",
        session_id=sid,
        interaction_id="i-1",
        request_id="r1",
        deny=pb.DenyTool(message="not now"),
    )
    assert answered.session.state == session_pb2.SESSION_STATE_RUNNING
    assert not answered.session.HasField("pending_interaction")
    # The same request again is the same outcome; a second, different answer is refused.
    await ok(
        api,
        "RespondToInteraction",
        session_id=sid,
        interaction_id="i-1",
        request_id="r1",
        deny=pb.DenyTool(message="not now"),
    )
    code, reason, _ = await refused(
        api, "RespondToInteraction", session_id=sid, interaction_id="i-1", request_id="r2", allow=pb.AllowTool()
    )
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "INTERACTION_NOT_PENDING")
    answers = [c.answer_interaction for c in await commands(plane, sid) if c.HasField("answer_interaction")]
    assert len(answers) == 1 and answers[0].deny.message == "not now"


async def test_questions_are_answered_with_answers(api, plane):
    sid = await ready(api, plane)
    turn = (await ok(api, "SendMessage", session_id=sid, client_message_id="m", text="ask")).turn_id
    question = {
        "questions": [
            {
                "question": "Color?",
                "header": "c",
                "options": [{"label": "red"}, {"label": "blue"}],
                "multiSelect": False,
            }
        ]
    }
    await plane.report(
        sid,
        turn,
        interaction_requested=runner_pb2.InteractionRequested(
            interaction_id="q-1", tool_name="AskUserQuestion", input_json=json.dumps(question), tool_use_id="tu"
        ),
    )
    pending = (await session_of(api, sid)).pending_interaction
    assert pending.kind == session_pb2.INTERACTION_KIND_QUESTION
    assert [(q.question, list(q.options)) for q in pending.questions] == [("Color?", ["red", "blue"])]
    code, _, details = await refused(
        api, "RespondToInteraction", session_id=sid, interaction_id="q-1", allow=pb.AllowTool()
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "answers" in details
    await ok(
        api,
        "RespondToInteraction",
        session_id=sid,
        interaction_id="q-1",
        answers=pb.QuestionAnswers(answers={"Color?": "blue"}),
    )
    (answer,) = [c.answer_interaction for c in await commands(plane, sid) if c.HasField("answer_interaction")]
    assert json.loads(answer.allow.updated_input_json)["answers"] == {"Color?": "blue"}


async def test_a_custom_tool_call_is_answered_with_its_result(api, plane):
    sid = await ready(api, plane)
    turn = (await ok(api, "SendMessage", session_id=sid, client_message_id="m", text="look it up")).turn_id
    await plane.report(
        sid,
        turn,
        interaction_requested=runner_pb2.InteractionRequested(
            interaction_id="c-1", tool_name="lookup_order", input_json='{"order_id": "A-7"}', custom_tool=True
        ),
    )
    session = await session_of(api, sid)
    assert session.state == session_pb2.SESSION_STATE_WAITING_FOR_INPUT
    pending = session.pending_interaction
    assert (pending.kind, pending.tool_name) == (session_pb2.INTERACTION_KIND_CUSTOM_TOOL, "lookup_order")
    assert json.loads(pending.input_json) == {"order_id": "A-7"}
    # An approval or answers is not a custom tool's result; nor is a grant asked for it.
    for answer in ({"allow": pb.AllowTool()}, {"answers": pb.QuestionAnswers(answers={"q": "a"})}):
        code, _, details = await refused(api, "RespondToInteraction", session_id=sid, interaction_id="c-1", **answer)
        assert code is grpc.StatusCode.INVALID_ARGUMENT and "tool_result" in details
    answered = await ok(
        api,
        "RespondToInteraction",
        session_id=sid,
        interaction_id="c-1",
        request_id="r1",
        tool_result=pb.CustomToolResult(content="shipped on Monday", is_error=True),
    )
    assert answered.session.state == session_pb2.SESSION_STATE_RUNNING
    (answer,) = [c.answer_interaction for c in await commands(plane, sid) if c.HasField("answer_interaction")]
    assert (answer.interaction_id, answer.tool_result.content, answer.tool_result.is_error) == (
        "c-1",
        "shipped on Monday",
        True,
    )
    (event,) = [e for e in await plane.journal.read(sid, 0, 1000) if e.kind is EventKind.INTERACTION_ANSWERED]
    listed = (await ok(api, "ListSessionEvents", session_id=sid, after_seq=event.seq - 1, page_size=1)).events[0]
    recorded = listed.interaction_answered
    assert (recorded.decision, recorded.tool_result, recorded.is_error) == ("tool_result", "shipped on Monday", True)


async def test_only_a_custom_tool_call_takes_a_tool_result(api, plane):
    sid = await ready(api, plane)
    turn = (await ok(api, "SendMessage", session_id=sid, client_message_id="m", text="run")).turn_id
    await plane.report(
        sid,
        turn,
        interaction_requested=runner_pb2.InteractionRequested(
            interaction_id="i-1", tool_name="Bash", input_json='{"command": "ls"}', tool_use_id="tu"
        ),
    )
    code, reason, details = await refused(
        api, "RespondToInteraction", session_id=sid, interaction_id="i-1", tool_result=pb.CustomToolResult(content="x")
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert "only a custom tool call" in details
    assert (await session_of(api, sid)).pending_interaction.interaction_id == "i-1"
    assert not [c for c in await commands(plane, sid) if c.HasField("answer_interaction")]


async def test_interrupt_settles_the_turn_and_is_idempotent(api, plane):
    sid = await ready(api, plane)
    await ok(api, "InterruptTurn", session_id=sid)  # idle: a harmless no-op
    assert EventKind.INTERRUPT_REQUESTED not in await kinds(plane, sid)
    turn = (await ok(api, "SendMessage", session_id=sid, client_message_id="m", text="sleep: 30")).turn_id
    await plane.report(
        sid,
        turn,
        interaction_requested=runner_pb2.InteractionRequested(
            interaction_id="i-1", tool_name="Bash", input_json="{}", tool_use_id="tu"
        ),
    )
    for _ in range(2):
        response = await ok(api, "InterruptTurn", session_id=sid, request_id="int-1")
        assert response.session.state == session_pb2.SESSION_STATE_INTERRUPTING
    await ok(api, "InterruptTurn", session_id=sid, request_id="int-2")
    interrupts = [c.interrupt_turn for c in await commands(plane, sid) if c.HasField("interrupt_turn")]
    assert [i.turn_id for i in interrupts] == [turn] and interrupts[0].deadline_ms > 0
    assert (await kinds(plane, sid)).count(EventKind.INTERACTION_CLOSED) == 1
    # The engine stops: its result ends the turn as interrupted.
    await finish_turn(plane, sid, turn)
    session = await session_of(api, sid)
    assert session.state == session_pb2.SESSION_STATE_READY and not session.HasField("pending_interaction")
    assert (await kinds(plane, sid))[-1] is EventKind.TURN_INTERRUPTED
    await ok(api, "SendMessage", session_id=sid, client_message_id="m2", text="again")  # accepts the next message


async def test_an_interrupt_nobody_confirms_is_settled_by_its_deadline(api, plane):
    sid = await ready(api, plane)
    turn = (await ok(api, "SendMessage", session_id=sid, client_message_id="m", text="x")).turn_id
    await ok(api, "InterruptTurn", session_id=sid)
    await plane.pool.execute(
        "UPDATE sessions SET interrupt_deadline = now() - interval '1 s' WHERE session_id = $1", sid
    )
    assert await plane.sweeper.sweep() == 1
    events = await plane.journal.read(sid, 0, 1000)
    assert (events[-1].kind, events[-1].turn_id) == (EventKind.TURN_INTERRUPTED, turn)
    assert "deadline" in events[-1].payload["reason"]
    assert (await session_of(api, sid)).state == session_pb2.SESSION_STATE_READY


async def test_permission_modes_are_validated_and_journaled(api, plane):
    sid = await ready(api, plane)
    code, reason, details = await refused(api, "SetPermissionMode", session_id=sid, permission_mode="yolo")
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "PERMISSION_MODE_INVALID") and "plan" in details
    response = await ok(api, "SetPermissionMode", session_id=sid, permission_mode="plan", request_id="p1")
    assert response.session.permission_mode == "plan"
    assert "plan" in response.session.capabilities.permission_modes
    await ok(api, "SetPermissionMode", session_id=sid, permission_mode="plan", request_id="p1")
    assert (await kinds(plane, sid)).count(EventKind.PERMISSION_MODE_CHANGED) == 1
    modes = [
        c.set_permission_mode.permission_mode for c in await commands(plane, sid) if c.HasField("set_permission_mode")
    ]
    assert modes == ["plan"]


async def test_a_messages_own_mode_is_its_turns_only_and_engines_start_in_the_sessions_mode(api, plane):
    sid = await ready(api, plane)  # in the engine's default mode, bypassPermissions
    own = await ok(api, "SendMessage", session_id=sid, client_message_id="m1", text="a", permission_mode="default")
    plain = await ok(api, "SendMessage", session_id=sid, client_message_id="m2", text="b")
    # The session's mode changes while the plain message waits: that message runs in the new one.
    await ok(api, "SetPermissionMode", session_id=sid, permission_mode="plan", request_id="p1")
    await finish_turn(plane, sid, own.turn_id)
    delivered = [c.deliver_input for c in await commands(plane, sid) if c.HasField("deliver_input")]
    assert [(d.turn_id, d.permission_mode) for d in delivered] == [(own.turn_id, "default"), (plain.turn_id, "")]
    accepted = [e for e in await plane.journal.read(sid, 0, 1000) if e.kind is EventKind.USER_MESSAGE_ACCEPTED]
    assert [e.payload["permission_mode"] for e in accepted] == ["default", ""]
    await finish_turn(plane, sid, plain.turn_id)
    assert (await session_of(api, sid)).permission_mode == "plan"

    # Placed again on another agent: its engine starts in the session's mode, not a message's.
    await plane.pool.execute("UPDATE agents SET lease_expires_at = now() - interval '1 s'")
    await plane.sweeper.sweep()
    await plane.connect_agent("agent-2")
    again = await ok(
        api, "SendMessage", session_id=sid, client_message_id="m3", text="c", permission_mode="acceptEdits"
    )
    rows = await plane.pool.fetch(
        "SELECT body FROM agent_commands WHERE agent_id = 'agent-2' AND session_id = $1 ORDER BY command_seq", sid
    )
    moved = [runner_pb2.Command.FromString(r["body"]) for r in rows]
    assert [c.WhichOneof("body") for c in moved] == ["start_runtime", "deliver_input"]
    assert moved[0].start_runtime.permission_mode == "plan"
    assert (moved[1].deliver_input.turn_id, moved[1].deliver_input.permission_mode) == (again.turn_id, "acceptEdits")


async def test_background_tasks_open_and_close_and_can_be_stopped(api, plane):
    sid = await ready(api, plane)
    turn = (await ok(api, "SendMessage", session_id=sid, client_message_id="m", text="background: sleep 1")).turn_id
    await finish_turn(plane, sid, turn)
    await plane.report(sid, **engine("TaskStartedMessage", task_id="t1", description="sleep 1", subtype="task_started"))
    session = await session_of(api, sid)
    assert [(t.task_id, t.description) for t in session.background_tasks] == [("t1", "sleep 1")]
    assert (await refused(api, "StopBackgroundTask", session_id=sid, task_id="t9"))[:2] == (
        grpc.StatusCode.NOT_FOUND,
        "TASK_NOT_FOUND",
    )
    await ok(api, "StopBackgroundTask", session_id=sid, task_id="t1", request_id="stop-1")
    assert [c.stop_task.task_id for c in await commands(plane, sid) if c.HasField("stop_task")] == ["t1"]
    await plane.report(sid, **engine("TaskUpdatedMessage", task_id="t1", patch={"status": "killed"}))
    assert not (await session_of(api, sid)).background_tasks


async def test_engine_info_and_engine_started_turns(api, plane):
    sid = await ready(api, plane)
    await plane.report(
        sid,
        engine_info=runner_pb2.EngineInfo(
            server_info_json=json.dumps({"commands": [{"name": "compact"}, {"name": "review"}]})
        ),
    )
    assert list((await session_of(api, sid)).slash_commands) == ["compact", "review"]
    await plane.report(sid, "engine-turn", engine_turn_started=runner_pb2.EngineTurnStarted(reason="task finished"))
    assert (await session_of(api, sid)).state == session_pb2.SESSION_STATE_RUNNING
    # A message sent meanwhile waits for the engine's own turn.
    queued = (await ok(api, "SendMessage", session_id=sid, client_message_id="m", text="hi")).turn_id
    assert list((await session_of(api, sid)).queued_turn_ids) == [queued]
    await finish_turn(plane, sid, "engine-turn")
    assert (await session_of(api, sid)).current_turn_id == queued


async def test_archive_releases_the_sandbox_and_keeps_history(api, plane):
    sid = await ready(api, plane)
    for _ in range(2):
        archived = await ok(api, "ArchiveSession", session_id=sid, request_id="a1")
        assert archived.session.state == session_pb2.SESSION_STATE_ARCHIVED
    assert [c.WhichOneof("body") for c in await commands(plane, sid)].count("destroy_runtime") == 1
    code, reason, _ = await refused(api, "SendMessage", session_id=sid, client_message_id="m", text="hi")
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "SESSION_NOT_READY")
    history = await ok(api, "ListSessionEvents", session_id=sid)
    assert history.events[-1].HasField("session_archived")


async def test_a_lost_runtime_is_placed_again_with_the_conversation(api, plane):
    sid = await ready(api, plane)
    turn = (await ok(api, "SendMessage", session_id=sid, client_message_id="m1", text="hello")).turn_id
    await finish_turn(plane, sid, turn)
    await plane.report(
        sid,
        turn,
        transcript_snapshot=runner_pb2.TranscriptSnapshot(engine_session_id="conv-1", content=b'{"line": 1}\n'),
    )
    committed = plane.next_output[sid]
    # The agent goes away for good; another one is connected.
    await plane.pool.execute("UPDATE agents SET lease_expires_at = now() - interval '1 s'")
    await plane.sweeper.sweep()
    assert not (await session_of(api, sid)).runtime_available
    await plane.connect_agent("agent-2")
    turn2 = (await ok(api, "SendMessage", session_id=sid, client_message_id="m2", text="again")).turn_id
    rows = await plane.pool.fetch(
        "SELECT agent_id, body FROM agent_commands WHERE session_id = $1 ORDER BY created_at, command_seq", sid
    )
    moved = [(r["agent_id"], runner_pb2.Command.FromString(r["body"])) for r in rows if r["agent_id"] == "agent-2"]
    assert [c.WhichOneof("body") for _, c in moved] == ["start_runtime", "deliver_input"]
    start = moved[0][1].start_runtime
    assert (start.resume_engine_session_id, start.transcript, start.committed_output_seq) == (
        "conv-1",
        b'{"line": 1}\n',
        committed,
    )
    assert moved[1][1].deliver_input.turn_id == turn2
    # Outputs the old agent still sends for the session are acknowledged and dropped.
    stale = await plane.committer.commit(
        "agent-1",
        [runner_pb2.Output(session_id=sid, output_seq=committed + 1, turn_id=turn2, **engine("AssistantMessage"))],
    )
    assert stale.committed[sid] == committed + 1 and not stale.refused
    assert EventKind.ENGINE_MESSAGE not in (await kinds(plane, sid))[-3:]


async def test_a_conversation_with_no_transcript_starts_afresh_on_another_agent(api, plane):
    sid = await ready(api, plane)
    turn = (await ok(api, "SendMessage", session_id=sid, client_message_id="m1", text="hello")).turn_id
    # The engine named its conversation, but no turn of it ended: there is no transcript.
    await plane.report(sid, turn, **engine("SystemMessage", subtype="init", data={"session_id": "conv-1"}))
    await plane.pool.execute("UPDATE agents SET lease_expires_at = now() - interval '1 s'")
    await plane.sweeper.sweep()
    await plane.connect_agent("agent-2")
    await ok(api, "SendMessage", session_id=sid, client_message_id="m2", text="again")
    start = [c.start_runtime for c in await commands(plane, sid) if c.HasField("start_runtime")][-1]
    assert start.resume_engine_session_id == "" and start.transcript == b""


async def test_only_a_confirmed_destruction_releases_the_sandbox(api, plane):
    sid = await ready(api, plane)
    await ok(api, "DeleteSession", session_id=sid)

    async def destroys():
        return await plane.pool.fetch(
            "SELECT command_seq, body FROM agent_commands WHERE session_id = $1 ORDER BY command_seq", sid
        )

    async def sandbox():
        return await plane.pool.fetchval("SELECT sandbox_id FROM sessions WHERE session_id = $1", sid)

    first = [r for r in await destroys() if runner_pb2.Command.FromString(r["body"]).HasField("destroy_runtime")]
    assert len(first) == 1
    for row in await destroys():  # the agent applied the earlier commands
        if row["command_seq"] != first[0]["command_seq"]:
            await plane.verdicts.record("agent-1", row["command_seq"], "")
    await plane.verdicts.record("agent-1", first[0]["command_seq"], "UNAVAILABLE: the sandbox did not go away")
    assert await sandbox() == "sb"  # unconfirmed: the session keeps naming it
    assert await plane.sweeper.sweep() == 1  # so the destruction is tried again
    retry = [r for r in await destroys() if runner_pb2.Command.FromString(r["body"]).HasField("destroy_runtime")]
    assert len(retry) == 2
    await plane.verdicts.record("agent-1", retry[-1]["command_seq"], "")
    assert await sandbox() is None
    assert await plane.sweeper.sweep() == 0


async def test_a_start_that_never_finishes_fails_the_session_and_destroys_what_it_left(api, plane):
    await plane.connect_agent()
    sid = (await ok(api, "CreateSession", request_id="slow")).session.session_id
    await plane.pool.execute("UPDATE sessions SET created_at = now() - interval '1 hour' WHERE session_id = $1", sid)
    assert await plane.sweeper.sweep() == 1
    session = await session_of(api, sid)
    assert session.state == session_pb2.SESSION_STATE_FAILED and "did not start" in session.failure_reason
    assert [c.WhichOneof("body") for c in await commands(plane, sid)] == ["start_runtime", "destroy_runtime"]


async def test_an_idle_runtime_is_stopped_once_and_the_next_message_starts_it_again(api, plane):
    idle = await ready(api, plane)
    busy = await ready(api, plane, request_id="s2")
    await ok(api, "SendMessage", session_id=busy, client_message_id="m", text="a turn still running")
    tasked = await ready(api, plane, request_id="s3")
    turn = (await ok(api, "SendMessage", session_id=tasked, client_message_id="m", text="background: sleep 60")).turn_id
    await finish_turn(plane, tasked, turn)
    await plane.report(
        tasked, **engine("TaskStartedMessage", task_id="t1", description="sleep 60", subtype="task_started")
    )

    def sweeper_after(idle: timedelta) -> DeadlineSweeper:
        return DeadlineSweeper(
            plane.pool, plane.journal, plane.turns, plane.agents, timedelta(seconds=180), idle_stop_after=idle
        )

    # Nothing has been idle that long yet (an hour: however slowly the machine ran the set-up).
    assert await sweeper_after(timedelta(hours=1)).sweep() == 0
    sweeper = sweeper_after(timedelta(milliseconds=300))

    await asyncio.sleep(0.4)
    assert await sweeper.sweep() == 1  # a running turn or an open background task keeps a runtime up
    [stop] = [c.stop_runtime for c in await commands(plane, idle) if c.HasField("stop_runtime")]
    assert stop.reason == "idle for 0.3 s"
    assert (await kinds(plane, idle))[-1] is EventKind.RUNTIME_STOP_REQUESTED
    others = [c for sid in (busy, tasked) for c in await commands(plane, sid)]
    assert not any(c.HasField("stop_runtime") for c in others)
    assert await sweeper.sweep() == 0  # the request is activity: not asked again at once

    await plane.report(idle, runtime_stopped=runner_pb2.RuntimeStopped(reason=stop.reason, sandbox_id="sb"))
    stopped = await session_of(api, idle)
    assert stopped.runtime_stopped and stopped.runtime_available
    assert stopped.state == session_pb2.SESSION_STATE_READY
    await asyncio.sleep(0.4)
    assert await sweeper.sweep() == 0  # a stopped runtime is not stopped again

    # The next message goes to the same agent as ever; its RuntimeStarted clears the flag.
    sent = await ok(api, "SendMessage", session_id=idle, client_message_id="again", text="hello again")
    delivered = [c.deliver_input.turn_id for c in await commands(plane, idle) if c.HasField("deliver_input")]
    assert delivered == [sent.turn_id]
    await plane.runtime_started(idle)
    assert not (await session_of(api, idle)).runtime_stopped


async def test_an_egress_refusal_is_journaled_as_a_refused_network_request(api, plane):
    sid = await ready(api, plane)
    await plane.report(
        sid,
        egress_refused=runner_pb2.EgressRefused(
            host="example.com", port=443, reason="not in this environment's allowed_hosts", suppressed=3
        ),
    )
    events = (await ok(api, "ListSessionEvents", session_id=sid)).events
    refused = [e for e in events if e.WhichOneof("payload") == "network_request_refused"]
    assert len(refused) == 1
    assert refused[0].kind == events_pb2.EVENT_KIND_NETWORK_REQUEST_REFUSED
    assert refused[0].network_request_refused == events_pb2.NetworkRequestRefused(
        host="example.com", port=443, reason="not in this environment's allowed_hosts", suppressed=3
    )
    # A report only: the session goes on as it was.
    assert (await session_of(api, sid)).state == session_pb2.SESSION_STATE_READY
