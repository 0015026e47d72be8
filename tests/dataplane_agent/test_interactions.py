"""Interactions: a tool approval parks the turn until AnswerInteraction; answers take effect once."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.turns.session import INTERRUPTED_BY_ENGINE
from tests.dataplane_agent.fakes import (
    STARTED,
    Ask,
    DirectorySandboxDriver,
    ScriptedEngine,
    allow,
    deliver,
    deny,
    init,
    interrupt,
    kinds,
    result,
    running_agent,
    start,
)

BASH = Ask("Bash", {"command": "touch hello.txt"})


async def test_an_interaction_is_requested_and_an_allow_with_edited_input_reaches_the_engine(tmp_path: Path) -> None:
    engine = ScriptedEngine([init(), BASH, result()])
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        outputs = await agent.wait_for("s-1", "interaction_requested")
        requested = outputs[-1]
        assert requested.turn_id == "t-1"
        question = requested.interaction_requested
        assert question.tool_name == "Bash" and question.tool_use_id == "toolu-0"
        assert json.loads(question.input_json) == {"command": "touch hello.txt"}
        [pending] = await agent.state.pending_interactions("s-1")
        assert (pending.interaction_id, pending.turn_id) == (question.interaction_id, "t-1")

        ack = await agent.command("s-1", **allow(question.interaction_id, '{"command": "touch other.txt"}'))
        assert not ack.HasField("error")
        outputs = (await agent.wait_for("s-1", "ResultMessage"))[len(STARTED) :]
        assert kinds(outputs) == [
            "input_consumed",
            "SystemMessage",
            "interaction_requested",
            "AssistantMessage",
            "ResultMessage",
        ]
        [decision] = engine.last.decisions
        assert decision.allow and decision.updated_input == {"command": "touch other.txt"}
        assert await agent.state.pending_interactions("s-1") == []


async def test_a_deny_reaches_the_engine_and_a_second_answer_or_an_unknown_id_has_no_effect(tmp_path: Path) -> None:
    engine = ScriptedEngine([init(), BASH, BASH, result()])
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        first = (await agent.wait_for("s-1", "interaction_requested"))[-1].interaction_requested.interaction_id
        ack = await agent.command("s-1", **deny(first, "not in this repository"))
        assert not ack.HasField("error")
        second = (await agent.wait_for("s-1", "interaction_requested", 2))[-1].interaction_requested.interaction_id
        # The first one again (a second answer from another client), and one nobody asked.
        assert not (await agent.command("s-1", **allow(first))).HasField("error")
        assert not (await agent.command("s-1", **allow("i-unknown"))).HasField("error")
        assert len(engine.last.decisions) == 1
        await agent.command("s-1", **allow(second))
        await agent.wait_for("s-1", "ResultMessage")
        denied, allowed = engine.last.decisions
        assert (denied.allow, denied.message, denied.interrupt) == (False, "not in this repository", False)
        assert allowed.allow and allowed.updated_input is None


async def test_an_answer_must_carry_a_decision_and_edited_input_must_be_a_json_object(tmp_path: Path) -> None:
    engine = ScriptedEngine([init(), BASH, result()])
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        asked = (await agent.wait_for("s-1", "interaction_requested"))[-1].interaction_requested.interaction_id
        empty = pb.AnswerInteraction(interaction_id=asked)
        for body in ({"answer_interaction": empty}, allow(asked, "[1, 2]"), allow(asked, "{not json")):
            refused = await agent.command("s-1", **body)
            assert refused.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert engine.last.decisions == []
        await agent.command("s-1", **allow(asked))
        await agent.wait_for("s-1", "ResultMessage")


async def test_interrupting_a_parked_turn_denies_the_question_and_settles_the_turn(tmp_path: Path) -> None:
    engine = ScriptedEngine([init(), BASH, result(subtype="error_during_execution")])
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        asked = (await agent.wait_for("s-1", "interaction_requested"))[-1].interaction_requested.interaction_id
        await agent.command("s-1", **interrupt("t-1"))
        outputs = (await agent.wait_for("s-1", "turn_interrupted"))[len(STARTED) :]
        assert kinds(outputs)[-3:] == ["AssistantMessage", "ResultMessage", "turn_interrupted"]
        assert outputs[-1].turn_interrupted.reason == INTERRUPTED_BY_ENGINE
        [decision] = engine.last.decisions
        assert not decision.allow and decision.interrupt
        assert await agent.state.pending_interactions("s-1") == []
        # The answer arrives too late: acknowledged, without effect.
        assert not (await agent.command("s-1", **allow(asked))).HasField("error")
        assert len(engine.last.decisions) == 1


async def test_a_question_between_turns_opens_a_turn_of_the_engines_own(tmp_path: Path) -> None:
    engine = ScriptedEngine([])
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        # No send: the engine plays a script on its own, as after a background task.
        play = asyncio.create_task(engine.last.play([BASH, result()]))
        outputs = await agent.wait_for("s-1", "interaction_requested")
        opened, requested = outputs[-2:]
        assert kinds([opened]) == ["engine_turn_started"] and requested.turn_id == opened.turn_id
        await agent.command("s-1", **allow(requested.interaction_requested.interaction_id))
        outputs = await agent.wait_for("s-1", "ResultMessage")
        assert {o.turn_id for o in outputs[-4:]} == {opened.turn_id}
        await play
