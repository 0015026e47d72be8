"""Tool approvals and questions: the real CLI asks through the SDK's can_use_tool, the adapter
hands each request to the InteractionBroker, and the answer decides what runs."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from dataplane_agent.engines.base import (
    EngineConfig,
    EngineOutput,
    PermissionModeRefused,
    ToolDecision,
    ToolRequest,
)
from dataplane_agent.engines.claude_code import BUNDLED_CLI, ClaudeCodeAdapter, ClaudeCodeSession
from dataplane_agent.routes.model import ModelRoute
from dataplane_agent.sandboxes.base import Sandbox, SandboxSpec
from dataplane_agent.sandboxes.local import LocalSandboxDriver

# pytest resets warning filters per test; the adapter silences this one for the same reason in production.
pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore::claude_agent_sdk.CanUseToolShadowedWarning")]

TURN_TIMEOUT = 60.0


class RecordingBroker:
    """Answers each request with the next scripted decision (or waits forever), recording every request."""

    def __init__(self, *decisions: ToolDecision | None) -> None:
        self.requests: list[ToolRequest] = []
        self.cancelled: list[ToolRequest] = []
        self._decisions = list(decisions)

    async def ask(self, request: ToolRequest) -> ToolDecision:
        self.requests.append(request)
        decision = self._decisions.pop(0) if self._decisions else None
        if decision is not None:
            return decision
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.append(request)
            raise
        raise AssertionError("unreachable")


@pytest.fixture
def driver(sandbox_root: Path, bwrap: str) -> LocalSandboxDriver:
    if not BUNDLED_CLI.is_file():
        pytest.skip("claude-agent-sdk has no bundled CLI on this platform")
    return LocalSandboxDriver(sandbox_root, bwrap=bwrap)


@pytest.fixture
async def sandbox(driver: LocalSandboxDriver, model_route: ModelRoute) -> Sandbox:
    return await driver.create(
        SandboxSpec(session_id="interactions", agent_id="agent-1", model_socket=model_route.socket)
    )


async def _start(
    route: ModelRoute, sandbox: Sandbox, driver: LocalSandboxDriver, broker: RecordingBroker, mode: str
) -> ClaudeCodeSession:
    env = route.env("interactions")
    return await ClaudeCodeAdapter().start(
        sandbox, driver, EngineConfig(permission_mode=mode, env=env, interactions=broker)
    )


async def _exchange(session: ClaudeCodeSession, text: str, permission_mode: str = "") -> list[EngineOutput]:
    await session.send(text, permission_mode)
    return await _until_result(session)


async def _until_result(session: ClaudeCodeSession) -> list[EngineOutput]:
    outputs: list[EngineOutput] = []
    async with asyncio.timeout(TURN_TIMEOUT):
        async for output in session.outputs():
            outputs.append(output)
            if output.ends_turn:
                return outputs
    raise AssertionError("the engine stopped before the turn's result")


def _tool_results(outputs: list[EngineOutput]) -> list[dict]:
    return [
        b
        for o in outputs
        if o.type_name == "UserMessage"
        for b in o.payload["content"]
        if isinstance(b, dict) and b["type_name"] == "ToolResultBlock"
    ]


async def test_a_denied_command_does_not_run_and_an_approved_one_does(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    broker = RecordingBroker(ToolDecision(allow=False, message="Not in this folder, please."), ToolDecision(allow=True))
    session = await _start(model_route, sandbox, driver, broker, "default")
    try:
        denied = await _exchange(session, "run: touch approved.txt")
        assert not (sandbox.workspace / "approved.txt").exists()
        assert denied[-1].payload["result"] == "The command was denied: Not in this folder, please."
        assert _tool_results(denied)[0]["is_error"] is True

        allowed = await _exchange(session, "run: touch approved.txt && echo made it")
    finally:
        await session.close()

    assert (sandbox.workspace / "approved.txt").exists()
    assert "made it" in allowed[-1].payload["result"]
    first, second = broker.requests
    assert first.tool_name == "Bash" and first.input["command"] == "touch approved.txt"
    tool_use = next(
        b
        for o in denied
        if o.type_name == "AssistantMessage"
        for b in o.payload["content"]
        if b["type_name"] == "ToolUseBlock"
    )
    assert first.tool_use_id == tool_use["id"]
    assert first.interaction_id != second.interaction_id and len(first.interaction_id) == 36


async def test_an_approval_with_edited_input_runs_the_edited_command(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    edited = {"command": "echo edited > edited.txt && cat edited.txt", "description": "Edited by a human"}
    session = await _start(
        model_route, sandbox, driver, RecordingBroker(ToolDecision(allow=True, updated_input=edited)), "default"
    )
    try:
        outputs = await _exchange(session, "run: touch original.txt")
    finally:
        await session.close()

    assert sorted(path.name for path in sandbox.workspace.iterdir()) == ["edited.txt"]
    assert _tool_results(outputs)[0]["content"] == "edited"


async def test_a_question_is_answered_through_the_broker(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    class Answering(RecordingBroker):
        async def ask(self, request: ToolRequest) -> ToolDecision:
            self.requests.append(request)
            question = request.input["questions"][0]
            return ToolDecision(
                allow=True,
                updated_input={**request.input, "answers": {question["question"]: question["options"][1]["label"]}},
            )

    broker = Answering()
    # The question reaches the broker whatever the permission mode: it needs a human, not a permission.
    session = await _start(model_route, sandbox, driver, broker, "bypassPermissions")
    try:
        outputs = await _exchange(session, "ask: Which colour should the logo be? red|blue")
    finally:
        await session.close()

    [request] = broker.requests
    assert request.tool_name == "AskUserQuestion"
    assert request.input["questions"] == [
        {
            "question": "Which colour should the logo be?",
            "header": "Question",
            "options": [{"label": "red", "description": "Choose red"}, {"label": "blue", "description": "Choose blue"}],
            "multiSelect": False,
        }
    ]
    assert '"Which colour should the logo be?"="blue"' in _tool_results(outputs)[0]["content"]
    assert outputs[-1].payload["result"] == "You chose: blue."


async def test_the_permission_mode_decides_whether_to_ask(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    broker = RecordingBroker(ToolDecision(allow=False, message="No."), ToolDecision(allow=False, message="Still no."))
    session = await _start(model_route, sandbox, driver, broker, "bypassPermissions")
    try:
        await _exchange(session, "run: touch bypassed.txt")
        assert (sandbox.workspace / "bypassed.txt").exists() and broker.requests == []

        await session.set_permission_mode("default")
        assert session.permission_mode == "default"
        await _exchange(session, "run: touch asked.txt")
        assert not (sandbox.workspace / "asked.txt").exists() and len(broker.requests) == 1
    finally:
        await session.close()


ASKS = {"default": 1, "bypassPermissions": 0}


@pytest.mark.parametrize(
    ("session_mode", "message_mode"), [("bypassPermissions", "default"), ("default", "bypassPermissions")]
)
async def test_a_messages_own_mode_lasts_for_its_turn_only(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox, session_mode: str, message_mode: str
) -> None:
    # Whatever mode the CLI was started in, a message may ask for any other, bypassPermissions too.
    broker = RecordingBroker(*[ToolDecision(allow=True)] * 4)
    session = await _start(model_route, sandbox, driver, broker, session_mode)
    try:
        await _exchange(session, "run: touch own-1.txt", permission_mode=message_mode)
        assert len(broker.requests) == ASKS[message_mode] and session.permission_mode == message_mode
        await session.end_turn_mode()
        assert session.permission_mode == session_mode
        await _exchange(session, "run: touch session-1.txt")
        assert len(broker.requests) == ASKS[message_mode] + ASKS[session_mode]

        # Without end_turn_mode, the next message naming no mode runs in the session's all the same.
        await _exchange(session, "run: touch own-2.txt", permission_mode=message_mode)
        await _exchange(session, "run: touch session-2.txt")
        assert len(broker.requests) == 2 * (ASKS[message_mode] + ASKS[session_mode])
    finally:
        await session.close()

    files = {"own-1.txt", "session-1.txt", "own-2.txt", "session-2.txt"}
    assert files <= {path.name for path in sandbox.workspace.iterdir()}
    asked = [Path(r.input["command"].split()[-1]).name for r in broker.requests]
    assert asked == (["own-1.txt", "own-2.txt"] if message_mode == "default" else ["session-1.txt", "session-2.txt"])


async def test_a_mode_the_settings_forbid_is_refused_before_the_message_and_the_engine_goes_on(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    settings = sandbox.home / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({"permissions": {"disableBypassPermissionsMode": "disable"}}))
    broker = RecordingBroker(ToolDecision(allow=True))
    session = await _start(model_route, sandbox, driver, broker, "default")
    try:
        with pytest.raises(PermissionModeRefused, match="bypassPermissions"):
            await session.send("run: touch refused.txt", permission_mode="bypassPermissions")
        assert session.permission_mode == "default" and not session.ended

        outputs = await _exchange(session, "run: touch asked.txt")
    finally:
        await session.close()

    assert [r.input["command"] for r in broker.requests] == ["touch asked.txt"]
    assert (sandbox.workspace / "asked.txt").exists() and not (sandbox.workspace / "refused.txt").exists()
    assert "refused.txt" not in json.dumps([o.payload for o in outputs])


async def test_an_interrupt_cancels_a_pending_approval_and_ends_the_turn(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    broker = RecordingBroker(None)  # never answers
    session = await _start(model_route, sandbox, driver, broker, "default")
    try:
        await session.send("run: touch never.txt")
        async with asyncio.timeout(TURN_TIMEOUT):
            while not broker.requests:
                await asyncio.sleep(0.02)
        started = time.monotonic()
        await session.interrupt()
        outputs = await _until_result(session)
        elapsed = time.monotonic() - started
    finally:
        await session.close()

    assert broker.cancelled == broker.requests  # the broker learns the question is moot
    assert outputs[-1].payload["subtype"] == "error_during_execution" and outputs[-1].payload["is_error"] is True
    assert not (sandbox.workspace / "never.txt").exists()
    assert elapsed < 5, f"the interrupted turn took {elapsed:.2f}s to end"
