"""What happens around and between turns, with the real CLI: interrupts, background tasks and the
turn the engine starts on its own when one finishes, stopping a task, and resuming a conversation
in a brand-new sandbox from its stored transcript."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dataplane_agent.engines.base import EngineConfig, EngineOutput
from dataplane_agent.engines.claude_code import BUNDLED_CLI, ClaudeCodeAdapter, ClaudeCodeSession
from dataplane_agent.engines.claude_transcripts import transcript_path
from dataplane_agent.offline_model import OfflineModel
from dataplane_agent.offline_model.scripts import HELLO_COMMAND
from dataplane_agent.routes.model import ModelRoute
from dataplane_agent.sandboxes.base import Sandbox, SandboxSpec
from dataplane_agent.sandboxes.local import LocalSandboxDriver

pytestmark = pytest.mark.e2e

TIMEOUT = 60.0


@pytest.fixture
def driver(sandbox_root: Path, bwrap: str) -> LocalSandboxDriver:
    if not BUNDLED_CLI.is_file():
        pytest.skip("claude-agent-sdk has no bundled CLI on this platform")
    return LocalSandboxDriver(sandbox_root, bwrap=bwrap)


@pytest.fixture
async def sandbox(driver: LocalSandboxDriver, model_route: ModelRoute) -> Sandbox:
    return await driver.create(SandboxSpec(session_id="lifecycle", agent_id="agent-1", model_socket=model_route.socket))


def _config(route: ModelRoute, **overrides: object) -> EngineConfig:
    env = route.env("lifecycle")
    return EngineConfig(permission_mode="bypassPermissions", env=env, **overrides)  # type: ignore[arg-type]


async def _read_until(
    session: ClaudeCodeSession, done: Callable[[list[EngineOutput]], bool], into: list[EngineOutput]
) -> None:
    async with asyncio.timeout(TIMEOUT):
        async for output in session.outputs():
            into.append(output)
            if done(into):
                return
    raise AssertionError("the engine stopped early")


def _results(outputs: list[EngineOutput]) -> list[int]:
    return [index for index, output in enumerate(outputs) if output.ends_turn]


def _subtypes(outputs: list[EngineOutput]) -> list[tuple[str, str]]:
    return [(o.type_name, o.payload.get("subtype", "")) for o in outputs]


def _texts(outputs: list[EngineOutput]) -> list[str]:
    return [
        b["text"]
        for o in outputs
        if o.type_name == "AssistantMessage"
        for b in o.payload["content"]
        if b["type_name"] == "TextBlock"
    ]


async def test_an_interrupt_ends_a_long_tool_promptly_and_the_session_goes_on(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    session = await ClaudeCodeAdapter().start(sandbox, driver, _config(model_route))
    try:
        await session.interrupt()  # an idle session shrugs it off
        await session.send("sleep: 30")
        outputs: list[EngineOutput] = []
        # Wait until the CLI has made the long command a (foreground) task: it is surely running.
        await _read_until(session, lambda seen: seen[-1].type_name == "TaskStartedMessage", outputs)
        started = time.monotonic()
        await session.interrupt()
        await _read_until(session, lambda seen: seen[-1].ends_turn, outputs)
        elapsed = time.monotonic() - started

        after: list[EngineOutput] = []
        await session.send("run: echo after")
        await _read_until(session, lambda seen: seen[-1].ends_turn, after)
    finally:
        await session.close()

    print(f"interrupt to result: {elapsed * 1000:.0f} ms")
    assert elapsed < 5, f"the interrupted turn took {elapsed:.2f}s to end"
    # A foreground command that runs for seconds becomes a task; the interrupt stops it.
    task = next(o.payload for o in outputs if o.type_name == "TaskStartedMessage")
    assert task["task_type"] == "local_bash" and task["data"]["is_backgrounded"] is False
    notification = next(o.payload for o in outputs if o.type_name == "TaskNotificationMessage")
    assert notification["task_id"] == task["task_id"] and notification["status"] == "stopped"
    result = outputs[-1].payload
    assert result["subtype"] == "error_during_execution" and result["is_error"] is True
    [tool_result] = [
        b
        for o in outputs
        if o.type_name == "UserMessage"
        for b in o.payload["content"]
        if b["type_name"] == "ToolResultBlock"
    ]
    assert tool_result["is_error"] is True and "stopped while running" in tool_result["content"]
    assert after[-1].payload["result"] == "The command `echo after` printed:\nafter"


async def test_a_background_task_reports_after_the_result_and_the_engine_answers_it_on_its_own(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    session = await ClaudeCodeAdapter().start(sandbox, driver, _config(model_route))
    try:
        await session.send("background: sleep 1; echo done > bg.txt")
        outputs: list[EngineOutput] = []
        # No second message is sent: the second Result is a turn the engine started itself.
        await _read_until(session, lambda seen: len(_results(seen)) == 2, outputs)
    finally:
        await session.close()

    assert (sandbox.workspace / "bg.txt").read_text() == "done\n"
    first_result, second_result = _results(outputs)
    kinds = _subtypes(outputs)
    started = kinds.index(("TaskStartedMessage", "task_started"))
    updated = kinds.index(("TaskUpdatedMessage", "task_updated"))
    notified = kinds.index(("TaskNotificationMessage", "task_notification"))
    assert started < first_result < updated < notified < second_result
    task_id = outputs[started].payload["task_id"]
    assert outputs[started].payload["data"]["is_backgrounded"] is True
    assert outputs[updated].payload["task_id"] == task_id and outputs[updated].payload["status"] == "completed"
    assert outputs[notified].payload["task_id"] == task_id and outputs[notified].payload["status"] == "completed"
    # The engine's own turn: no user message, an init, the reply, a Result.
    own_turn = outputs[notified + 1 : second_result + 1]
    assert "UserMessage" not in [o.type_name for o in own_turn]
    assert ("SystemMessage", "init") in _subtypes(own_turn)
    assert _texts(own_turn) == [f"Background task finished: {outputs[notified].payload['summary']}"]
    assert outputs[first_result].payload["result"] == "Started in the background."


async def test_a_background_task_can_be_stopped(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    session = await ClaudeCodeAdapter().start(sandbox, driver, _config(model_route))
    try:
        await session.send("background: sleep 30; echo done > bg.txt")
        outputs: list[EngineOutput] = []
        await _read_until(session, lambda seen: seen[-1].ends_turn, outputs)
        task_id = next(o.payload["task_id"] for o in outputs if o.type_name == "TaskStartedMessage")
        await session.stop_task(task_id)
        stopped: list[EngineOutput] = []
        await _read_until(session, lambda seen: seen[-1].type_name == "TaskNotificationMessage", stopped)
    finally:
        await session.close()

    updated = next(o.payload for o in stopped if o.type_name == "TaskUpdatedMessage")
    assert updated["task_id"] == task_id and updated["status"] == "killed"
    assert stopped[-1].payload["task_id"] == task_id and stopped[-1].payload["status"] == "stopped"
    assert not (sandbox.workspace / "bg.txt").exists()


async def test_a_stored_transcript_resumes_the_conversation_in_a_new_sandbox(
    offline_model: OfflineModel, model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    session = await ClaudeCodeAdapter().start(sandbox, driver, _config(model_route))
    try:
        await session.send("Say hello")
        await _read_until(session, lambda seen: seen[-1].ends_turn, [])
        transcript = await session.transcript()
        engine_session_id = session.engine_session_id
    finally:
        await session.close()
    # Taken at the Result; the CLI appends only bookkeeping (its cost state) when it exits.
    assert transcript_path(sandbox, engine_session_id).read_bytes().startswith(transcript)
    assert all(json.loads(line) for line in transcript.splitlines())
    await driver.destroy(sandbox)  # the sandbox is lost, and its home with it

    fresh = await driver.create(
        SandboxSpec(session_id="lifecycle-recovered", agent_id="agent-2", model_socket=model_route.socket)
    )
    assert fresh.home != sandbox.home and not (fresh.home / ".claude").exists()
    config = _config(model_route, resume_engine_session_id=engine_session_id, transcript=transcript)
    session = await ClaudeCodeAdapter().start(fresh, driver, config)
    try:
        assert transcript_path(fresh, engine_session_id).read_bytes().startswith(transcript)
        resumed: list[EngineOutput] = []
        await session.send("run: echo again")
        await _read_until(session, lambda seen: seen[-1].ends_turn, resumed)
        assert session.engine_session_id == engine_session_id
        assert len(await session.transcript()) > len(transcript)
    finally:
        await session.close()

    assert resumed[-1].payload["result"] == "The command `echo again` printed:\nagain"
    last_request = [r for r in offline_model.received if r.path == "/v1/messages" and r.body.get("tools")][-1]
    history = json.dumps(last_request.body["messages"])
    assert "Say hello" in history and HELLO_COMMAND.replace("\\", "\\\\") in history  # the first turn came back


async def test_a_conversation_the_cli_never_wrote_down_starts_anew_rather_than_failing_every_turn(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    # A CLI killed in its conversation's first turn has reported the conversation's id but may not
    # have written its transcript: resuming it would answer "No conversation found" for ever.
    never_written = "0f5c3a52-6d1e-4d43-9a8e-1c2b3d4e5f60"
    assert not transcript_path(sandbox, never_written).exists()
    session = await ClaudeCodeAdapter().start(
        sandbox, driver, _config(model_route, resume_engine_session_id=never_written)
    )
    try:
        outputs: list[EngineOutput] = []
        await session.send("run: echo anew")
        await _read_until(session, lambda seen: seen[-1].ends_turn, outputs)
        assert session.engine_session_id not in ("", never_written)
    finally:
        await session.close()
    assert outputs[-1].payload["result"] == "The command `echo anew` printed:\nanew"
    assert transcript_path(sandbox, session.engine_session_id).exists()


async def test_a_message_sent_mid_turn_joins_the_running_turn(
    offline_model: OfflineModel, model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    """The CLI hands a message that arrives during a turn to the model at its next request, inside
    that same turn: one Result for both. (Why the agent holds queued inputs until a Result.)"""
    session = await ClaudeCodeAdapter().start(sandbox, driver, _config(model_route))
    try:
        await session.send("steps: 3")
        outputs: list[EngineOutput] = []
        await _read_until(
            session,
            lambda seen: seen[-1].type_name == "AssistantMessage" and "Step 1" in str(seen[-1].payload),
            outputs,
        )
        await session.send("run: echo second")
        await _read_until(session, lambda seen: seen[-1].ends_turn, outputs)
        with pytest.raises(TimeoutError):  # and no second Result follows
            async with asyncio.timeout(3):
                await anext(session.outputs())
    finally:
        await session.close()

    assert len(_results(outputs)) == 1
    assert outputs[-1].payload["result"] == "The command `echo second` printed:\nsecond"
    # The model saw the new message beside the first prompt's tool result, in one user message.
    requests = [r for r in offline_model.received if r.path == "/v1/messages" and r.body.get("tools")]
    folded = requests[1].body["messages"][-1]["content"]
    assert [block["type"] for block in folded] == ["tool_result", "text"] and folded[0]["content"] == "step 1"
    assert folded[1]["text"].startswith("The user sent a new message while you were working:\nrun: echo second")
