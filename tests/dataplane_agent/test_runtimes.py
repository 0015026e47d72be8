"""Runtimes and command application: startup, turns, destruction, restart, idempotence."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc

from astrabox.agents.v1 import agent_pb2
from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.agent_config import AgentConfig, ToolPolicy
from dataplane_agent.engines.base import McpUnavailable
from dataplane_agent.runtimes.runtimes import RESTART_ABORT_REASON, RESTART_QUEUED_REASON
from dataplane_agent.runtimes.starts import NO_MANIFEST_REASON
from dataplane_agent.sandboxes.base import DestroyVerdict
from tests.dataplane_agent.fakes import (
    MODEL_ENV,
    STARTED,
    Ask,
    DirectorySandboxDriver,
    Forever,
    Raise,
    ScriptedEngine,
    assistant,
    deliver,
    init,
    kinds,
    result_turn,
    running_agent,
    start,
)


async def test_start_runtime_reports_its_phases_engine_info_and_runtime_started(tmp_path: Path) -> None:
    info = {"commands": [{"name": "compact"}, {"name": "review"}], "output_style": "default"}
    engine = ScriptedEngine(result_turn(), server_info=info)
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        ack = await agent.command("s-1", **start())
        assert not ack.HasField("error")
        outputs = await agent.outputs("s-1")
        assert kinds(outputs) == ["startup_phase", "startup_phase", "engine_info", "startup_phase", "runtime_started"]
        assert [o.startup_phase.phase for o in outputs if o.HasField("startup_phase")] == [
            "sandbox_created",
            "engine_connected",
            "ready",
        ]
        assert all(o.turn_id == "" for o in outputs)
        assert [o.output_seq for o in outputs] == [1, 2, 3, 4, 5]
        assert json.loads(outputs[2].engine_info.server_info_json) == info
        started = outputs[-1].runtime_started
        assert started.sandbox_id == "sb-s-1-1"
        assert started.workspace == "/workspace"  # as the sandbox sees it: no host path leaves the agent
        config = engine.last.config
        assert (config.permission_mode, config.model) == ("default", "m-1")
        assert dict(config.env) == MODEL_ENV
        assert config.interactions is not None
        assert [r.session_id for r in await agent.state.sessions()] == ["s-1"]


async def test_an_engine_without_a_manifest_fails_the_start_as_a_contract_violation(tmp_path: Path) -> None:
    engine, driver = ScriptedEngine(result_turn(), manifest=None), DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        ack = await agent.command("s-1", **start())
        assert not ack.HasField("error")
        [failed] = await agent.outputs("s-1")
        assert NO_MANIFEST_REASON in failed.runtime_start_failed.reason
        assert "contract violation: the engine declared no capability manifest" in failed.runtime_start_failed.reason
        assert engine.sessions == [] and driver.created == []
        assert await agent.state.sessions() == []


async def test_start_with_a_transcript_restores_the_conversation_in_the_new_sandbox(tmp_path: Path) -> None:
    engine, driver = ScriptedEngine(result_turn("eng-old")), DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start(resume_engine_session_id="eng-old", transcript=b'{"turn": 1}\n'))
        config = engine.last.config
        assert (config.resume_engine_session_id, config.transcript) == ("eng-old", b'{"turn": 1}\n')
        assert await agent.transcripts.load("s-1") == b'{"turn": 1}\n'
        assert (await agent.state.session("s-1")).engine_session_id == "eng-old"


async def test_start_numbers_outputs_after_the_committed_output_seq(tmp_path: Path) -> None:
    engine, driver = ScriptedEngine(result_turn()), DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start(committed_output_seq=40))
        assert [o.output_seq for o in await agent.outputs("s-1")] == [41, 42, 43, 44]


async def test_deliver_input_relays_the_turn_ending_with_the_result_and_a_transcript_snapshot(tmp_path: Path) -> None:
    engine = ScriptedEngine(result_turn("eng-42"), transcript=b'{"type": "user"}\n')
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        ack = await agent.command("s-1", **deliver("t-1", "write a poem"))
        assert not ack.HasField("error")
        outputs = (await agent.wait_for("s-1", "transcript_snapshot"))[len(STARTED) :]
        assert kinds(outputs) == [
            "input_consumed",
            "SystemMessage",
            "AssistantMessage",
            "ResultMessage",
            "transcript_snapshot",
        ]
        assert all(o.turn_id == "t-1" for o in outputs)
        assert json.loads(outputs[2].engine_message.payload_json) == assistant().payload
        assert outputs[-1].transcript_snapshot.engine_session_id == "eng-42"
        assert outputs[-1].transcript_snapshot.content == b'{"type": "user"}\n'
        assert await agent.transcripts.load("s-1") == b'{"type": "user"}\n'
        assert engine.last.sent == [("write a poem", "acceptEdits")]
        record = await agent.state.session("s-1")
        # The session's mode stays StartRuntime's: the message's own was for its turn only.
        assert (record.turn_id, record.engine_session_id, record.permission_mode) == ("", "eng-42", "default")
        # The session is free for the next turn.
        await agent.command("s-1", **deliver("t-2"))
        outputs = await agent.wait_for("s-1", "transcript_snapshot", 2)
        assert [o.turn_id for o in outputs[-5:]] == ["t-2"] * 5


async def test_a_large_transcript_is_kept_locally_but_not_sent(tmp_path: Path) -> None:
    from dataplane_agent.turns.session import TurnLimits

    engine = ScriptedEngine(result_turn(), transcript=b"x" * 2048)
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver, TurnLimits(transcript_cap=1024)) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        await agent.wait_for("s-1", "ResultMessage")
        await agent.command("s-1", **deliver("t-2"))
        outputs = await agent.wait_for("s-1", "ResultMessage", 2)
        assert "transcript_snapshot" not in kinds(outputs)
        assert await agent.transcripts.load("s-1") == b"x" * 2048


async def test_a_turn_in_flight_at_a_crash_is_aborted_at_start_and_the_next_turn_resumes(tmp_path: Path) -> None:
    blocking = ScriptedEngine([init("eng-7"), Ask("Bash", {"command": "ls"}), Forever()])
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, blocking, driver) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        await agent.command("s-1", **deliver("t-2"))  # queued behind t-1
        await agent.wait_for("s-1", "interaction_requested")
        assert len(await agent.state.pending_interactions("s-1")) == 1
    # The process "died" with t-1 parked and t-2 queued; a new agent opens the same state.
    engine = ScriptedEngine(result_turn("eng-7"))
    async with running_agent(tmp_path, engine, driver) as agent:
        outputs = await agent.outputs("s-1")
        assert kinds(outputs)[-2:] == ["turn_aborted", "turn_aborted"]
        assert [(o.turn_id, o.turn_aborted.reason) for o in outputs[-2:]] == [
            ("t-1", RESTART_ABORT_REASON),
            ("t-2", RESTART_QUEUED_REASON),
        ]
        assert await agent.state.pending_interactions("s-1") == []
        assert await agent.state.queued_turns("s-1") == []
        await agent.command("s-1", **deliver("t-3"))
        outputs = await agent.wait_for("s-1", "ResultMessage")
        assert [o.turn_id for o in outputs[-4:]] == ["t-3"] * 4
        assert engine.last.config.resume_engine_session_id == "eng-7"
        assert engine.last.config.transcript == b""  # the sandbox still has it
        seen = len(await agent.outputs("s-1"))
    async with running_agent(tmp_path, engine, driver) as agent:
        assert len(await agent.outputs("s-1")) == seen  # nothing aborted twice


async def test_an_engine_failure_mid_turn_aborts_the_turn_with_the_reason(tmp_path: Path) -> None:
    engine = ScriptedEngine([assistant(), Raise("CLI exited with 1")])
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        outputs = (await agent.wait_for("s-1", "turn_aborted"))[len(STARTED) :]
        assert kinds(outputs) == ["input_consumed", "AssistantMessage", "turn_aborted"]
        assert "CLI exited with 1" in outputs[-1].turn_aborted.reason
        async with asyncio.timeout(5):  # the failed engine is closed just after the abort is recorded
            while not engine.last.closed:
                await asyncio.sleep(0.01)
        assert (await agent.state.session("s-1")).turn_id == ""


async def test_a_failed_engine_start_reports_runtime_start_failed_and_removes_the_sandbox(tmp_path: Path) -> None:
    engine, driver = ScriptedEngine(fail_start="no CLI found"), DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        ack = await agent.command("s-1", **start())
        assert not ack.HasField("error")
        outputs = await agent.outputs("s-1")
        assert kinds(outputs) == ["startup_phase", "runtime_start_failed"]
        assert "no CLI found" in outputs[-1].runtime_start_failed.reason
        assert driver.destroyed == ["sb-s-1-1"]
        assert await agent.state.sessions() == []
        unknown = await agent.command("s-2", **start("nope"))
        assert "'nope' is not available" in (await agent.outputs("s-2"))[0].runtime_start_failed.reason
        assert not unknown.HasField("error")


async def test_redelivered_command_has_no_second_effect_and_a_stale_copy_is_not_acknowledged(tmp_path: Path) -> None:
    engine, driver = ScriptedEngine(result_turn()), DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        first = await agent.command("s-1", command_id="c-start", **start())
        again = await agent.command("s-1", command_id="c-start", **start())
        assert first.command_id == again.command_id == "c-start"
        assert not again.HasField("error")
        assert len(await agent.outputs("s-1")) == len(STARTED) and len(engine.sessions) == 1

        await agent.state.raise_lease_generation(5)
        # A copy from a replaced stream: the control plane sends it again under the current lease.
        assert await agent.command("s-1", command_id="c-old", lease=4, **deliver("t-1")) is None
        assert engine.last.sent == []
        # An applied command keeps its answer even when redelivered under an old lease.
        assert not (await agent.command("s-1", command_id="c-start", lease=1, **start())).HasField("error")

        missing = await agent.command("s-9", lease=5, **deliver("t-1"))
        assert missing.error.code == grpc.StatusCode.NOT_FOUND.value[0]


async def test_the_same_turn_delivered_twice_runs_once(tmp_path: Path) -> None:
    engine, driver = ScriptedEngine([init(), assistant(), Forever()]), DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        await agent.wait_for("s-1", "AssistantMessage")
        again = await agent.command("s-1", **deliver("t-1"))  # a second command id for the same turn
        assert not again.HasField("error")
        assert engine.last.sent == [("hi", "acceptEdits")]
        assert kinds(await agent.outputs("s-1")).count("input_consumed") == 1


async def test_destroy_forgets_the_session_only_when_destruction_is_confirmed(tmp_path: Path) -> None:
    engine, driver = ScriptedEngine(result_turn(), transcript=b"t"), DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        await agent.wait_for("s-1", "transcript_snapshot")
        driver.verdict = DestroyVerdict.UNCONFIRMED
        refused = await agent.command("s-1", destroy_runtime=pb.DestroyRuntime(reason="archived"))
        assert refused.error.code == grpc.StatusCode.UNAVAILABLE.value[0]
        assert refused.destroy_verdict == pb.DESTROY_VERDICT_UNCONFIRMED
        assert [r.session_id for r in await agent.state.sessions()] == ["s-1"]
        driver.verdict = DestroyVerdict.REFUSED
        refused = await agent.command("s-1", destroy_runtime=pb.DestroyRuntime(reason="archived"))
        assert refused.error.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
        assert refused.destroy_verdict == pb.DESTROY_VERDICT_REFUSED
        driver.verdict = DestroyVerdict.CONFIRMED
        done = await agent.command("s-1", command_id="c-destroy", destroy_runtime=pb.DestroyRuntime(reason="archived"))
        assert not done.HasField("error") and done.destroy_verdict == pb.DESTROY_VERDICT_CONFIRMED
        again = await agent.command("s-1", command_id="c-destroy", destroy_runtime=pb.DestroyRuntime(reason="archived"))
        assert not again.HasField("error") and again.destroy_verdict == pb.DESTROY_VERDICT_CONFIRMED
        assert await agent.state.sessions() == []
        assert engine.last.closed
        assert not (tmp_path / "sandboxes" / "s-1" / "workspace").exists()
        assert await agent.transcripts.load("s-1") == b""


async def test_a_retaining_agent_keeps_the_sandbox_stopped_and_answers_retained(tmp_path: Path) -> None:
    engine, driver = ScriptedEngine([assistant(), Forever()]), DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver, retain_sandboxes=True) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        await agent.wait_for("s-1", "AssistantMessage")
        (tmp_path / "sandboxes" / "s-1" / "workspace" / "notes.txt").write_text("look at me")

        kept = await agent.command("s-1", command_id="c-del", destroy_runtime=pb.DestroyRuntime(reason="deleted"))

        assert not kept.HasField("error") and kept.destroy_verdict == pb.DESTROY_VERDICT_RETAINED
        assert engine.last.closed and driver.stopped == ["sb-s-1-1"]
        assert (tmp_path / "sandboxes" / "s-1" / "workspace" / "notes.txt").read_text() == "look at me"
        assert await agent.state.sessions() == []  # no longer held: no slot, no Hello entry
        [retained] = await agent.state.retained()
        assert (retained.session_id, retained.sandbox.sandbox_id, retained.reason) == ("s-1", "sb-s-1-1", "deleted")
        outputs = (await agent.outputs("s-1"))[len(STARTED) :]
        assert kinds(outputs)[-1] == "turn_aborted" and "destroyed (deleted)" in outputs[-1].turn_aborted.reason
        # The same command again, and a later DestroyRuntime of the session, say the same.
        again = await agent.command("s-1", command_id="c-del", destroy_runtime=pb.DestroyRuntime(reason="deleted"))
        later = await agent.command("s-1", destroy_runtime=pb.DestroyRuntime(reason="retrying"))
        assert [again.destroy_verdict, later.destroy_verdict] == [pb.DESTROY_VERDICT_RETAINED] * 2
        assert driver.stopped == ["sb-s-1-1"] and (tmp_path / "sandboxes" / "s-1").is_dir()


async def test_destroy_during_a_turn_aborts_it_and_the_queued_inputs(tmp_path: Path) -> None:
    engine = ScriptedEngine([assistant(), Forever()])
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        await agent.command("s-1", **deliver("t-2"))
        await agent.wait_for("s-1", "AssistantMessage")
        await agent.command("s-1", destroy_runtime=pb.DestroyRuntime(reason="deleted"))
        outputs = (await agent.outputs("s-1"))[len(STARTED) :]
        assert kinds(outputs) == ["input_consumed", "AssistantMessage", "turn_aborted", "turn_aborted"]
        assert [o.turn_id for o in outputs[-2:]] == ["t-1", "t-2"]
        assert all("destroyed (deleted)" in o.turn_aborted.reason for o in outputs[-2:])
        assert engine.last.sent == [("hi", "acceptEdits")]


async def test_permission_mode_and_stop_task_reach_the_engine_and_the_mode_is_remembered(tmp_path: Path) -> None:
    engine, driver = ScriptedEngine(result_turn()), DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        ack = await agent.command("s-1", set_permission_mode=pb.SetPermissionMode(permission_mode="plan"))
        assert not ack.HasField("error")
        ack = await agent.command("s-1", stop_task=pb.StopTask(task_id="task-9"))
        assert not ack.HasField("error")
        assert (engine.last.modes, engine.last.stopped_tasks) == (["plan"], ["task-9"])
        assert (await agent.state.session("s-1")).permission_mode == "plan"
        bad = await agent.command("s-1", set_permission_mode=pb.SetPermissionMode())
        assert bad.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        missing = await agent.command("s-9", stop_task=pb.StopTask(task_id="task-9"))
        assert missing.error.code == grpc.StatusCode.NOT_FOUND.value[0]
    # After a restart the remembered mode starts the engine.
    async with running_agent(tmp_path, engine, driver) as agent:
        ack = await agent.command("s-1", stop_task=pb.StopTask(task_id="task-9"))
        assert not ack.HasField("error")  # no engine runs, so neither does the task
        await agent.command("s-1", **deliver("t-1", permission_mode=""))
        await agent.wait_for("s-1", "ResultMessage")
        assert engine.last.config.permission_mode == "plan"


async def test_a_messages_own_mode_ends_with_its_turn_and_a_restarted_engine_starts_in_the_sessions(
    tmp_path: Path,
) -> None:
    engine, driver = ScriptedEngine(result_turn()), DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())  # the session's mode: default
        await agent.command("s-1", **deliver("t-1", permission_mode="bypassPermissions"))
        await agent.wait_for("s-1", "ResultMessage")
        await agent.command("s-1", **deliver("t-2", permission_mode=""))
        await agent.wait_for("s-1", "ResultMessage", 2)
        first = engine.last
        assert first.sent == [("hi", "bypassPermissions"), ("hi", "")]
        assert first.turn_modes_ended == 1  # after t-1 only: t-2 ran in the session's mode
        assert (await agent.state.session("s-1")).permission_mode == "default"
        await agent.command("s-1", **deliver("t-3", permission_mode="bypassPermissions"))
        await agent.wait_for("s-1", "ResultMessage", 3)
    # Whatever the last message asked for, a restarted engine starts in the session's mode.
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **deliver("t-4", permission_mode=""))
        await agent.wait_for("s-1", "ResultMessage", 4)
        assert engine.last is not first and engine.last.config.permission_mode == "default"


async def test_a_mode_the_engine_refuses_aborts_that_turn_unsent_and_the_engine_runs_the_next(tmp_path: Path) -> None:
    engine = ScriptedEngine(result_turn(), refused_modes=["bypassPermissions"])
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1", permission_mode="bypassPermissions"))
        outputs = (await agent.wait_for("s-1", "turn_aborted"))[len(STARTED) :]
        assert kinds(outputs) == ["turn_aborted"] and outputs[0].turn_id == "t-1"
        assert outputs[0].turn_aborted.reason == (
            "the message was not sent: the engine refused permission mode 'bypassPermissions'"
        )
        await agent.command("s-1", **deliver("t-2", permission_mode=""))
        outputs = (await agent.wait_for("s-1", "ResultMessage"))[len(STARTED) + 1 :]
        assert kinds(outputs)[0] == "input_consumed" and {o.turn_id for o in outputs} == {"t-2"}
        assert len(engine.sessions) == 1 and not engine.last.closed  # the same engine, never restarted
        assert engine.last.sent == [("hi", "")]


async def test_an_idle_runtime_is_stopped_and_the_next_input_starts_it_again_resuming(tmp_path: Path) -> None:
    engine = ScriptedEngine(result_turn("eng-3"))
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        await agent.wait_for("s-1", "ResultMessage")
        first = engine.last
        (driver.root / "s-1" / "workspace" / "kept.txt").write_text("kept")

        ack = await agent.command("s-1", stop_runtime=pb.StopRuntime(reason="idle for 900 s"))
        assert not ack.HasField("error")
        assert first.closed and driver.stopped == ["sb-s-1-1"] and driver.destroyed == []
        stopped = (await agent.outputs("s-1"))[-1]
        assert stopped.runtime_stopped.reason == "idle for 900 s" and stopped.runtime_stopped.sandbox_id == "sb-s-1-1"

        await agent.command("s-1", **deliver("t-2"))
        outputs = await agent.wait_for("s-1", "ResultMessage", count=2)
        after = outputs[outputs.index(stopped) + 1 :]
        assert kinds(after)[0] == "runtime_started" and [o.turn_id for o in after[1:]] == ["t-2"] * len(after[1:])
        assert engine.last is not first and engine.last.config.resume_engine_session_id == "eng-3"
        assert driver.created == ["s-1", "s-1"]  # re-opened in place: the files are still there
        assert (driver.root / "s-1" / "workspace" / "kept.txt").read_text() == "kept"


async def test_a_busy_runtime_is_not_stopped(tmp_path: Path) -> None:
    engine = ScriptedEngine(turns=[[init("eng-4"), assistant("working"), Forever()]])
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        await agent.wait_for("s-1", "AssistantMessage")
        ack = await agent.command("s-1", stop_runtime=pb.StopRuntime(reason="idle for 900 s"))
        assert not ack.HasField("error")
        assert not engine.last.closed and driver.stopped == []
        assert "runtime_stopped" not in kinds(await agent.outputs("s-1"))


async def test_the_sessions_agent_configuration_reaches_every_engine_start(tmp_path: Path) -> None:
    spec = agent_pb2.AgentSpec(
        system_prompt=agent_pb2.SystemPrompt(append="Answer in French."),
        tools=agent_pb2.Tools(
            enabled=["Bash", "Read"],
            rules=[agent_pb2.ToolRule(tool="Bash", policy=agent_pb2.TOOL_POLICY_ASK)],
            default_policy=agent_pb2.TOOL_POLICY_ALLOW,
        ),
        limits=agent_pb2.Limits(max_turns=3),
    )
    expected = AgentConfig.from_proto(spec)
    assert not expected.is_default and expected.tools.policy_for("Bash") is ToolPolicy.ASK
    engine, driver = ScriptedEngine(result_turn("eng-5")), DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start(config=spec))
        assert engine.last.config.agent_config == expected
        first = engine.last
        # An idle stop: the next message starts a new engine, with the same configuration.
        await agent.command("s-1", stop_runtime=pb.StopRuntime(reason="idle"))
        await agent.command("s-1", **deliver("t-1"))
        await agent.wait_for("s-1", "ResultMessage")
        assert engine.last is not first and engine.last.config.agent_config == expected
    # An agent restart: its state keeps the configuration for the engine started then.
    async with running_agent(tmp_path, engine, driver) as agent:
        before = engine.last
        await agent.command("s-1", **deliver("t-2"))
        await agent.wait_for("s-1", "ResultMessage", 2)
        assert engine.last is not before and engine.last.config.agent_config == expected


async def test_mcp_servers_an_engine_started_without_are_reported_at_each_start(tmp_path: Path) -> None:
    down = McpUnavailable("tickets", "http://127.0.0.1:9/mcp could not be reached: ConnectError")
    engine = ScriptedEngine(result_turn("eng-5"), mcp_unavailable=[down])
    async with running_agent(tmp_path, engine, DirectorySandboxDriver(tmp_path / "sandboxes")) as agent:
        await agent.command("s-1", **start())
        outputs = await agent.outputs("s-1")
        assert kinds(outputs)[-3:] == ["mcp_server_unavailable", "startup_phase", "runtime_started"]
        reported = outputs[-3].mcp_server_unavailable
        assert (reported.server, reported.reason) == (down.server, down.reason) and outputs[-3].turn_id == ""
        # The session goes on: a stopped runtime started again reports it again, beside RuntimeStarted.
        await agent.command("s-1", stop_runtime=pb.StopRuntime(reason="idle"))
        await agent.command("s-1", **deliver("t-1"))
        await agent.wait_for("s-1", "ResultMessage")
        later = kinds(await agent.outputs("s-1"))
        assert later.count("mcp_server_unavailable") == 2
        assert later[later.index("runtime_started", later.index("runtime_stopped")) + 1] == "mcp_server_unavailable"


async def test_a_session_without_an_agent_runs_the_engines_defaults(tmp_path: Path) -> None:
    engine, driver = ScriptedEngine(result_turn()), DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        assert engine.last.config.agent_config.is_default
