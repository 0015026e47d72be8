"""The journal and the commit of agent output: exactly once, in order, no gaps."""

from __future__ import annotations

import asyncio
import json

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane.conversation import SendMessage
from controlplane.journal import EventKind, NewEvent
from controlplane.kernel import CreateSession
from controlplane.session import SessionState


def engine_output(session_id: str, seq: int, type_name: str, payload: dict, turn_id: str = "") -> runner_pb2.Output:
    return runner_pb2.Output(
        session_id=session_id,
        output_seq=seq,
        turn_id=turn_id,
        engine_message=runner_pb2.EngineMessage(type_name=type_name, payload_json=json.dumps(payload)),
    )


async def started_turn(plane) -> tuple[str, str]:
    await plane.connect_agent()
    session = await plane.kernel.create_session(CreateSession(request_id="r", project_id=plane.project_id))
    await plane.runtime_started(session.session_id)
    accepted = await plane.conversation.send_message(SendMessage(session.session_id, "m1", "hello"))
    return session.session_id, accepted.turn_id


async def test_concurrent_appends_get_contiguous_seqs(plane):
    await plane.connect_agent()
    session = await plane.kernel.create_session(CreateSession(request_id="r", project_id=plane.project_id))
    session_id = session.session_id

    async def writer(n: int) -> None:
        for _ in range(n):
            async with plane.journal.transaction() as tx:
                await tx.append(session_id, [NewEvent(EventKind.TURN_FAILED, {"reason": "x"})] * 2)

    await asyncio.gather(*(writer(10) for _ in range(4)))
    seqs = [
        r["seq"]
        for r in await plane.pool.fetch("SELECT seq FROM events WHERE session_id = $1 ORDER BY seq", session_id)
    ]
    assert seqs == list(range(1, session.last_seq + 80 + 1))


async def test_engine_messages_are_stored_verbatim_and_complete_the_turn(plane):
    session_id, turn_id = await started_turn(plane)
    assistant = {"content": [{"type_name": "TextBlock", "text": "héllo"}], "model": "m", "big": 2**60, "f": 1.5}
    result = {
        "subtype": "success",
        "is_error": False,
        "duration_ms": 1234,
        "result": "done",
        "session_id": "engine-conv-1",
    }
    outcome = await plane.committer.commit(
        "agent-1",
        [
            engine_output(session_id, 2, "AssistantMessage", assistant, turn_id),
            engine_output(session_id, 3, "ResultMessage", result, turn_id),
        ],
    )
    assert outcome.committed == {session_id: 3} and not outcome.refused
    events = await plane.journal.read(session_id, 0, 100)
    kinds = [e.kind for e in events]
    assert kinds[-3:] == [EventKind.ENGINE_MESSAGE, EventKind.ENGINE_MESSAGE, EventKind.TURN_COMPLETED]
    assert events[-3].payload == {"type_name": "AssistantMessage", "message": assistant}
    assert events[-3].output_seq == 2 and events[-3].turn_id == turn_id
    assert events[-1].payload["duration_ms"] == 1234
    session = await plane.kernel.get_session(session_id)
    assert session.state is SessionState.READY
    assert session.current_turn_id == ""
    assert session.engine_session_id == "engine-conv-1"


async def test_resent_outputs_are_no_ops(plane):
    session_id, turn_id = await started_turn(plane)
    batch = [engine_output(session_id, 2, "AssistantMessage", {"n": 1}, turn_id)]
    await plane.committer.commit("agent-1", batch)
    before = await plane.pool.fetchval("SELECT last_seq FROM sessions WHERE session_id = $1", session_id)
    again = await plane.committer.commit(
        "agent-1", [*batch, engine_output(session_id, 3, "AssistantMessage", {"n": 2}, turn_id)]
    )
    assert again.committed == {session_id: 3}
    rows = await plane.pool.fetch(
        "SELECT output_seq FROM events WHERE session_id = $1 AND output_seq IS NOT NULL ORDER BY seq", session_id
    )
    assert [r["output_seq"] for r in rows] == [1, 2, 3]
    assert await plane.pool.fetchval("SELECT last_seq FROM sessions WHERE session_id = $1", session_id) == before + 1


async def test_a_gap_is_refused_and_nothing_of_it_is_stored(plane):
    session_id, turn_id = await started_turn(plane)
    before = await plane.pool.fetchval("SELECT last_seq FROM sessions WHERE session_id = $1", session_id)
    outcome = await plane.committer.commit(
        "agent-1",
        [
            engine_output(session_id, 3, "AssistantMessage", {}, turn_id),
            engine_output(session_id, 4, "AssistantMessage", {}, turn_id),
        ],
    )
    assert session_id in outcome.refused
    assert outcome.committed[session_id] == 1
    assert "expected output_seq 2" in str(outcome.refused[session_id])
    assert await plane.pool.fetchval("SELECT last_seq FROM sessions WHERE session_id = $1", session_id) == before


async def test_runtime_failure_and_aborted_turns_update_the_projection(plane):
    await plane.connect_agent()
    failing = await plane.kernel.create_session(CreateSession(request_id="f", project_id=plane.project_id))
    await plane.committer.commit(
        "agent-1",
        [
            runner_pb2.Output(
                session_id=failing.session_id,
                output_seq=1,
                runtime_start_failed=runner_pb2.RuntimeStartFailed(reason="bwrap: no namespaces"),
            )
        ],
    )
    failed = await plane.kernel.get_session(failing.session_id)
    assert failed.state is SessionState.FAILED and failed.failure_reason == "bwrap: no namespaces"

    session_id, turn_id = await started_turn(plane)
    await plane.committer.commit(
        "agent-1",
        [
            runner_pb2.Output(
                session_id=session_id,
                output_seq=2,
                turn_id=turn_id,
                turn_aborted=runner_pb2.TurnAborted(reason="agent restarted"),
            )
        ],
    )
    session = await plane.kernel.get_session(session_id)
    assert session.state is SessionState.READY and session.failure_reason == "agent restarted"
    last = (await plane.journal.read(session_id, 0, 100))[-1]
    assert (last.kind, last.turn_id) == (EventKind.TURN_FAILED, turn_id)


async def test_outputs_of_an_unknown_session_are_acknowledged_not_stored(plane):
    stranger = "8c3e2a38-7f8b-4f7e-9d7b-9a0b6e0f0e0e"
    outcome = await plane.committer.commit(
        "agent-1",
        [engine_output(stranger, 1, "AssistantMessage", {}), engine_output(stranger, 2, "AssistantMessage", {})],
    )
    assert outcome.committed == {stranger: 2} and not outcome.refused
    assert await plane.pool.fetchval("SELECT count(*) FROM events") == 0
