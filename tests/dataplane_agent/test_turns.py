"""Turn routing over the engine's single output stream, queued inputs, interrupts, lost sandboxes."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from dataplane_agent.engines.base import EngineOutput
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.runtimes.runtimes import WORKSPACE_GONE_REASON
from dataplane_agent.sandboxes.base import SandboxSpec
from dataplane_agent.state import AgentState
from dataplane_agent.state_database import Database
from dataplane_agent.turns.session import (
    INTERRUPTED_AT_DEADLINE,
    INTERRUPTED_BEFORE_SEND,
    INTERRUPTED_BY_ENGINE,
    Input,
    SessionTurns,
    TurnLimits,
)
from dataplane_agent.turns.transcripts import TranscriptStore
from tests.dataplane_agent.fakes import (
    STARTED,
    Ask,
    DirectorySandboxDriver,
    Exit,
    Forever,
    ScriptedEngine,
    UntilInterrupted,
    assistant,
    deliver,
    init,
    interrupt,
    kinds,
    result,
    result_turn,
    running_agent,
    start,
)


async def eventually(condition: Callable[[], bool]) -> None:
    """Wait until `condition` holds: an engine is closed after the outcome that replaces it is recorded."""
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0.01)


def task_started(task_id: str = "task-1") -> EngineOutput:
    return EngineOutput(
        "TaskStartedMessage", {"subtype": "task_started", "data": {}, "task_id": task_id, "description": "sleep 5"}
    )


def task_notification(task_id: str = "task-1", status: str = "completed") -> EngineOutput:
    return EngineOutput(
        "TaskNotificationMessage", {"subtype": "task_notification", "data": {}, "task_id": task_id, "status": status}
    )


async def test_background_task_messages_are_session_level_and_the_engines_own_turn_gets_a_new_turn_id(
    tmp_path: Path,
) -> None:
    engine = ScriptedEngine([init(), assistant("started a background task"), task_started(), result()])
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        await agent.wait_for("s-1", "ResultMessage")
        # After the Result: the task reports on its own, then the engine answers it in a turn of its own.
        engine.last.emit(
            EngineOutput("TaskProgressMessage", {"subtype": "task_progress", "data": {}, "task_id": "task-1"}),
            task_notification(),
            EngineOutput("SystemMessage", {"subtype": "background_tasks_changed", "data": {"tasks": []}}),
            init(),
            assistant("the background task finished"),
            result(),
        )
        outputs = (await agent.wait_for("s-1", "ResultMessage", 2))[len(STARTED) :]
        assert kinds(outputs) == [
            "input_consumed",
            "SystemMessage",
            "AssistantMessage",
            "TaskStartedMessage",
            "ResultMessage",
            "TaskProgressMessage",
            "TaskNotificationMessage",
            "SystemMessage",
            "engine_turn_started",
            "SystemMessage",
            "AssistantMessage",
            "ResultMessage",
        ]
        turn_ids = [o.turn_id for o in outputs]
        assert turn_ids[:5] == ["t-1"] * 5
        assert turn_ids[5:8] == ["", "", ""]
        engine_turn = turn_ids[8]
        assert engine_turn not in ("", "t-1") and turn_ids[8:] == [engine_turn] * 4
        assert "background task task-1 is completed" in outputs[8].engine_turn_started.reason
        assert (await agent.state.session("s-1")).turn_id == ""


async def test_an_input_waits_for_the_engines_own_turn_and_then_runs(tmp_path: Path) -> None:
    engine = ScriptedEngine(result_turn())
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        session = engine.last
        session.emit(assistant("reporting on my own"))
        await agent.wait_for("s-1", "engine_turn_started")
        ack = await agent.command("s-1", **deliver("t-1"))
        assert not ack.HasField("error")
        await asyncio.sleep(0.05)
        assert session.sent == []  # the engine's own turn is still running
        session.emit(result())
        outputs = (await agent.wait_for("s-1", "ResultMessage", 2))[len(STARTED) :]
        assert kinds(outputs) == [
            "engine_turn_started",
            "AssistantMessage",
            "ResultMessage",
            "input_consumed",
            "SystemMessage",
            "AssistantMessage",
            "ResultMessage",
        ]
        assert outputs[3].turn_id == "t-1" and outputs[0].turn_id not in ("", "t-1")
        assert session.sent == [("hi", "acceptEdits")]


async def test_an_engine_turn_that_does_not_end_is_interrupted_for_a_waiting_input(tmp_path: Path) -> None:
    engine = ScriptedEngine(result_turn())
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    limits = TurnLimits(engine_turn_wait=0.1, interrupt_deadline=0.1)
    async with running_agent(tmp_path, engine, driver, limits) as agent:
        await agent.command("s-1", **start())
        first = engine.last
        first.emit(assistant("a turn that never ends"))
        await agent.command("s-1", **deliver("t-1"))
        outputs = (await agent.wait_for("s-1", "ResultMessage"))[len(STARTED) :]
        assert kinds(outputs)[:3] == ["engine_turn_started", "AssistantMessage", "turn_interrupted"]
        assert outputs[2].turn_interrupted.reason == INTERRUPTED_AT_DEADLINE
        await eventually(lambda: first.closed)
        assert first.interrupts == 1
        # The replacement engine reports the runtime up again, then runs the waiting input.
        assert kinds(outputs)[3] == "runtime_started"
        assert [o.turn_id for o in outputs[4:]] == ["t-1"] * 4
        assert engine.last is not first and engine.last.sent == [("hi", "acceptEdits")]


async def test_inputs_sent_back_to_back_run_one_after_another_in_order(tmp_path: Path) -> None:
    engine = ScriptedEngine(result_turn())
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        for n in (1, 2, 3):
            ack = await agent.command("s-1", **deliver(f"t-{n}", f"message {n}"))
            assert not ack.HasField("error")
        outputs = (await agent.wait_for("s-1", "ResultMessage", 3))[len(STARTED) :]
        assert [o.turn_id for o in outputs] == [t for t in ("t-1", "t-2", "t-3") for _ in range(4)]
        assert kinds(outputs[:4]) == ["input_consumed", "SystemMessage", "AssistantMessage", "ResultMessage"]
        assert [text for text, _ in engine.last.sent] == ["message 1", "message 2", "message 3"]


async def test_interrupt_with_a_cooperative_engine_ends_the_turn_after_its_result(tmp_path: Path) -> None:
    interruptible = [init(), assistant("working"), UntilInterrupted(), result(subtype="error_during_execution")]
    engine = ScriptedEngine(result_turn(), turns=[interruptible])
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        assert not (await agent.command("s-1", **interrupt("t-1"))).HasField("error")  # idle: a no-op
        await agent.command("s-1", **deliver("t-1"))
        await agent.wait_for("s-1", "AssistantMessage")
        assert not (await agent.command("s-1", **interrupt("t-other"))).HasField("error")  # another turn: a no-op
        assert engine.last.interrupts == 0
        ack = await agent.command("s-1", **interrupt("t-1"))
        assert not ack.HasField("error")
        assert not (await agent.command("s-1", **interrupt("t-1"))).HasField("error")  # repeated: idempotent
        outputs = (await agent.wait_for("s-1", "turn_interrupted"))[len(STARTED) :]
        assert kinds(outputs) == [
            "input_consumed",
            "SystemMessage",
            "AssistantMessage",
            "ResultMessage",
            "turn_interrupted",
        ]
        assert outputs[-1].turn_id == "t-1" and outputs[-1].turn_interrupted.reason == INTERRUPTED_BY_ENGINE
        assert engine.last.interrupts == 1 and not engine.last.closed
        assert (await agent.state.session("s-1")).turn_id == ""
        assert not (await agent.command("s-1", **interrupt("t-1"))).HasField("error")  # finished: a no-op
        await agent.command("s-1", **deliver("t-2"))
        outputs = await agent.wait_for("s-1", "ResultMessage", 2)
        assert kinds(outputs).count("turn_interrupted") == 1 and outputs[-1].turn_id == "t-2"
        assert len(engine.sessions) == 1


async def test_interrupt_with_a_stuck_engine_replaces_it_at_the_deadline_and_the_next_input_resumes(
    tmp_path: Path,
) -> None:
    engine = ScriptedEngine(turns=[[init("eng-5"), assistant("stuck"), Forever()]], cooperative=False)
    engine.default_turn = result_turn("eng-5")
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        await agent.wait_for("s-1", "AssistantMessage")
        stuck = engine.last
        await agent.command("s-1", **interrupt("t-1", deadline_ms=100))
        outputs = (await agent.wait_for("s-1", "turn_interrupted"))[len(STARTED) :]
        assert kinds(outputs) == ["input_consumed", "SystemMessage", "AssistantMessage", "turn_interrupted"]
        assert outputs[-1].turn_interrupted.reason == INTERRUPTED_AT_DEADLINE
        await eventually(lambda: stuck.closed)
        assert stuck.interrupts == 1
        assert (await agent.state.session("s-1")).turn_id == ""
        # The next input starts a new engine on the same conversation, in the same sandbox.
        await agent.command("s-1", **deliver("t-2"))
        outputs = await agent.wait_for("s-1", "ResultMessage")
        assert "runtime_lost" not in kinds(outputs)
        assert [o.turn_id for o in outputs[-4:]] == ["t-2"] * 4
        assert engine.last is not stuck
        assert engine.last.config.resume_engine_session_id == "eng-5"
        assert driver.created == ["s-1", "s-1"]


async def test_after_a_deadline_the_next_input_waits_for_the_stuck_engine_to_close_before_starting_another(
    tmp_path: Path,
) -> None:
    engine = ScriptedEngine(turns=[[init("eng-5"), assistant("stuck"), Forever()]], cooperative=False, close_delay=0.5)
    engine.default_turn = result_turn("eng-5")
    async with running_agent(tmp_path, engine, DirectorySandboxDriver(tmp_path / "sandboxes")) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        await agent.wait_for("s-1", "AssistantMessage")
        stuck = engine.last
        await agent.command("s-1", **interrupt("t-1", deadline_ms=50))
        await agent.wait_for("s-1", "turn_interrupted")
        assert not stuck.closed  # still closing: the deadline settled the turn without waiting for it
        await agent.command("s-1", **deliver("t-2"))
        await agent.wait_for("s-1", "ResultMessage")
        # Never two CLIs on one conversation: the new engine started only once the stuck one was closed.
        assert [(what, session is stuck) for what, session in engine.events[1:]] == [
            ("closed", True),
            ("started", False),
        ]


async def test_interrupting_a_queued_turn_settles_it_without_sending_it(tmp_path: Path) -> None:
    engine = ScriptedEngine(turns=[[init(), assistant(), UntilInterrupted(), result()]])
    engine.default_turn = result_turn()
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1", "first"))
        await agent.command("s-1", **deliver("t-2", "second"))
        await agent.command("s-1", **deliver("t-3", "third"))
        await agent.wait_for("s-1", "AssistantMessage")
        await agent.command("s-1", **interrupt("t-2"))
        assert await agent.state.queued_turns("s-1") == ["t-3"]
        await agent.command("s-1", **interrupt("t-1"))
        outputs = (await agent.wait_for("s-1", "ResultMessage", 2))[len(STARTED) :]
        assert (outputs[3].turn_id, outputs[3].turn_interrupted.reason) == ("t-2", INTERRUPTED_BEFORE_SEND)
        assert [text for text, _ in engine.last.sent] == ["first", "third"]
        assert kinds(outputs).count("turn_interrupted") == 2


async def test_a_lost_sandbox_is_recreated_with_the_kept_transcript_and_the_message_runs(tmp_path: Path) -> None:
    engine = ScriptedEngine(result_turn("eng-9"), transcript=b'{"conversation": 1}\n')
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        await agent.wait_for("s-1", "transcript_snapshot")
        first = engine.last
        shutil.rmtree(tmp_path / "sandboxes" / "s-1")  # destroyed behind the agent's back; the CLI lingers
        await agent.command("s-1", **deliver("t-2", "are you still there?"))
        outputs = await agent.wait_for("s-1", "transcript_snapshot", 2)
        tail = outputs[outputs.index(next(o for o in outputs if o.HasField("runtime_lost"))) :]
        assert kinds(tail) == [
            "runtime_lost",
            "runtime_started",
            "input_consumed",
            "SystemMessage",
            "AssistantMessage",
            "ResultMessage",
            "transcript_snapshot",
        ]
        assert tail[0].runtime_lost.reason == WORKSPACE_GONE_REASON
        assert first.closed
        assert tail[0].turn_id == "" and tail[1].turn_id == ""
        assert tail[1].runtime_started.sandbox_id == "sb-s-1-2"
        assert [o.turn_id for o in tail[2:]] == ["t-2"] * 5
        restored = engine.last.config
        assert (restored.resume_engine_session_id, restored.transcript) == ("eng-9", b'{"conversation": 1}\n')
        assert engine.last.sent == [("are you still there?", "acceptEdits")]
        assert (tmp_path / "sandboxes" / "s-1" / "workspace").is_dir()
        assert (await agent.state.session("s-1")).sandbox.sandbox_id == "sb-s-1-2"


async def test_a_missing_workspace_is_noticed_at_the_next_input_after_an_agent_restart(tmp_path: Path) -> None:
    engine = ScriptedEngine(result_turn("eng-3"), transcript=b"kept")
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        await agent.wait_for("s-1", "transcript_snapshot")
    shutil.rmtree(tmp_path / "sandboxes" / "s-1")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **deliver("t-2"))
        outputs = await agent.wait_for("s-1", "ResultMessage", 2)
        lost = next(o for o in outputs if o.HasField("runtime_lost"))
        assert lost.runtime_lost.reason == WORKSPACE_GONE_REASON
        assert engine.last.config.transcript == b"kept"
        assert engine.last.config.resume_engine_session_id == "eng-3"


async def test_an_engine_dying_mid_turn_aborts_it_and_the_next_input_recovers(tmp_path: Path) -> None:
    engine = ScriptedEngine(turns=[[init("eng-2"), assistant(), Exit()]])
    engine.default_turn = result_turn("eng-2")
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        outputs = await agent.wait_for("s-1", "turn_aborted")
        assert outputs[-1].turn_aborted.reason == "the engine process ended during the turn"
        await agent.command("s-1", **deliver("t-2"))
        outputs = await agent.wait_for("s-1", "ResultMessage")
        assert kinds(outputs)[-6:-4] == ["runtime_lost", "runtime_started"]
        assert engine.last.config.resume_engine_session_id == "eng-2"


async def test_a_parked_turn_keeps_waiting_while_nothing_answers(tmp_path: Path) -> None:
    engine = ScriptedEngine([init(), Ask("Write", {"file_path": "a.txt"}), result()])
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver, TurnLimits(interrupt_deadline=0.05)) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        await agent.wait_for("s-1", "interaction_requested")
        await asyncio.sleep(0.2)  # no deadline applies to a question
        outputs = await agent.outputs("s-1")
        assert kinds(outputs)[-1] == "interaction_requested"
        assert (await agent.state.session("s-1")).turn_id == "t-1"


class StopsTheAgentForItsTranscript:
    """An engine that answers every message at once; asking for its transcript stops the agent.

    The task owning the session's task group is cancelled while the transcript
    call completes, the moment at which `asyncio.wait_for` on Python 3.11
    returns the result and drops the cancellation."""

    engine_session_id = "eng-1"

    def __init__(self) -> None:
        self.agent: asyncio.Task[None] | None = None
        self._outputs: asyncio.Queue[EngineOutput | None] = asyncio.Queue()

    async def outputs(self) -> AsyncIterator[EngineOutput]:
        while (output := await self._outputs.get()) is not None:
            yield output

    async def send(self, text: str, permission_mode: str = "") -> None:
        for output in result_turn():
            self._outputs.put_nowait(output)

    async def transcript(self) -> bytes:
        assert self.agent is not None
        self.agent.cancel()
        return b""

    async def close(self) -> None:
        self._outputs.put_nowait(None)


async def test_a_turn_ending_as_the_agent_stops_does_not_keep_it_from_stopping(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "agent.db")
    outbox = Outbox(db)
    sandbox = await DirectorySandboxDriver(tmp_path / "sandboxes").create(SandboxSpec("s-1", "agent-1"))
    engine = StopsTheAgentForItsTranscript()

    async def start_engine() -> StopsTheAgentForItsTranscript:
        raise AssertionError("the attached engine is used")

    async def run() -> None:
        async with asyncio.TaskGroup() as tasks:
            turns = SessionTurns(
                "s-1",
                db=db,
                state=AgentState(db),
                outbox=outbox,
                transcripts=TranscriptStore(tmp_path / "transcripts"),
                tasks=tasks,
                start_engine=start_engine,
            )
            turns.attach(engine, sandbox)
            turns.enqueue(Input("t-1", "hi"))
            await asyncio.Event().wait()

    agent = engine.agent = asyncio.create_task(run())
    try:
        stopped, _ = await asyncio.wait([agent], timeout=5)
        assert stopped, "the session's tasks outlived the agent's stop"
        outputs = [o for o in await outbox.pending({}, limit=100) if o.session_id == "s-1"]
        assert kinds(outputs)[-1] == "ResultMessage"
    finally:
        await engine.close()  # lets a reader that missed its cancellation end
        await asyncio.wait([agent], timeout=5)
        await db.close()
