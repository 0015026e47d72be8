"""The claude_code adapter: the real bundled CLI, in a real bubblewrap sandbox, driven by the
real ClaudeSDKClient against the offline model."""

from __future__ import annotations

import asyncio
import json
import typing
from pathlib import Path

import pytest

from dataplane_agent.engines.base import EngineConfig, EngineError, EngineOutput
from dataplane_agent.engines.claude_code import BUNDLED_CLI, ClaudeCodeAdapter
from dataplane_agent.engines.claude_transcripts import transcript_path
from dataplane_agent.offline_model import OfflineModel
from dataplane_agent.offline_model.scripts import HELLO_COMMAND
from dataplane_agent.routes.model import ModelRoute
from dataplane_agent.sandboxes.base import MODEL_BASE_URL_INNER, Sandbox, SandboxSpec
from dataplane_agent.sandboxes.local import LocalSandboxDriver

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def driver(sandbox_root: Path, bwrap: str) -> LocalSandboxDriver:
    if not BUNDLED_CLI.is_file():
        pytest.skip("claude-agent-sdk has no bundled CLI on this platform")
    return LocalSandboxDriver(sandbox_root, bwrap=bwrap)


@pytest.fixture
async def sandbox(driver: LocalSandboxDriver, model_route: ModelRoute) -> Sandbox:
    return await driver.create(
        SandboxSpec(session_id="engine-test", agent_id="agent-1", model_socket=model_route.socket)
    )


def _config(route: ModelRoute, resume: str = "") -> EngineConfig:
    env = route.env("engine-test")
    return EngineConfig(permission_mode="bypassPermissions", resume_engine_session_id=resume, env=env)


async def _turn(
    adapter: ClaudeCodeAdapter, sandbox: Sandbox, driver: LocalSandboxDriver, config: EngineConfig, text: str
) -> tuple[list[EngineOutput], str]:
    """One turn in a new engine session: send, read outputs through the Result, close."""
    session = await adapter.start(sandbox, driver, config)
    try:
        await session.send(text)
        outputs = []
        async with asyncio.timeout(60):
            async for output in session.outputs():
                outputs.append(output)
                if output.ends_turn:
                    break
        return outputs, session.engine_session_id
    finally:
        await session.close()


def _blocks(outputs: list[EngineOutput], type_name: str, block: str) -> list[dict]:
    return [
        b
        for o in outputs
        if o.type_name == type_name
        for b in o.payload["content"]
        if isinstance(b, dict) and b["type_name"] == block
    ]


async def test_default_script_runs_bash_in_the_sandbox_and_resumes(
    offline_model: OfflineModel, model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    adapter = ClaudeCodeAdapter()

    outputs, engine_session_id = await _turn(adapter, sandbox, driver, _config(model_route), "Say hello")

    assert (sandbox.workspace / "hello.txt").read_text() == "Hello from AstraBox\n"
    assert [b["input"]["command"] for b in _blocks(outputs, "AssistantMessage", "ToolUseBlock")] == [HELLO_COMMAND]
    results = _blocks(outputs, "UserMessage", "ToolResultBlock")
    assert len(results) == 1 and "Hello from AstraBox" in str(results[0]["content"]) and not results[0]["is_error"]
    result = outputs[-1]
    assert result.ends_turn and [o.ends_turn for o in outputs].count(True) == 1
    assert result.payload["is_error"] is False and "hello.txt" in result.payload["result"]
    assert engine_session_id and engine_session_id == result.payload["session_id"]
    init = next(o for o in outputs if o.type_name == "SystemMessage" and o.payload["subtype"] == "init")
    assert init.payload["data"]["cwd"] == sandbox.inner_workspace
    for output in outputs:  # verbatim and JSON-ready
        assert json.loads(json.dumps(output.payload, allow_nan=False)) == output.payload

    # A new engine session (a new CLI process) resumes the conversation from the sandbox's home.
    outputs, resumed_id = await _turn(
        adapter, sandbox, driver, _config(model_route, resume=engine_session_id), "run: cat hello.txt"
    )

    assert outputs[-1].ends_turn and outputs[-1].payload["is_error"] is False
    assert "Hello from AstraBox" in outputs[-1].payload["result"]
    assert resumed_id
    last_request = [r for r in offline_model.received if r.path == "/v1/messages"][-1]
    history = json.dumps(last_request.body["messages"])
    assert "Say hello" in history and HELLO_COMMAND.replace("\\", "\\\\") in history  # the first turn came back


async def test_the_agent_environment_stays_out_of_the_sandbox(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASTRABOX_AGENT_SECRET", "agent-only-secret")

    outputs, _ = await _turn(
        ClaudeCodeAdapter(), sandbox, driver, _config(model_route), f"run: env; cat {REPO}/pyproject.toml"
    )

    tool_output = str(_blocks(outputs, "UserMessage", "ToolResultBlock")[0]["content"])
    # The model is reached through the route, with the session's token as the key.
    assert f"ANTHROPIC_BASE_URL={MODEL_BASE_URL_INNER}" in tool_output
    assert f"ANTHROPIC_API_KEY={model_route.token('engine-test')}" in tool_output
    assert "HOME=/home/agent" in tool_output
    assert "agent-only-secret" not in tool_output and "ASTRABOX_AGENT_SECRET" not in tool_output
    # The agent's own code is not visible (bubblewrap may create the directory
    # as an empty mount-point skeleton when the CLI lives below it).
    assert f"{REPO}/pyproject.toml: No such file or directory" in tool_output


async def test_a_multi_step_turn_streams_every_step(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    outputs, _ = await _turn(ClaudeCodeAdapter(), sandbox, driver, _config(model_route), "steps: 2")

    assert [str(b["content"]) for b in _blocks(outputs, "UserMessage", "ToolResultBlock")] == ["step 1", "step 2"]
    assert outputs[-1].payload["result"] == "Finished 2 steps."


async def test_a_cli_that_fails_gives_a_readable_error_without_the_key(
    tmp_path: Path, model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    broken = tmp_path / "cli" / "claude"
    broken.parent.mkdir()
    broken.write_text('#!/bin/sh\necho "refusing key $ANTHROPIC_API_KEY" >&2\nexit 3\n')
    broken.chmod(0o755)

    with pytest.raises(EngineError) as raised:
        await ClaudeCodeAdapter(cli_path=broken, connect_timeout=30).start(sandbox, driver, _config(model_route))

    message = str(raised.value)
    assert "exit code 3" in message and "refusing key" in message
    assert model_route.token("engine-test") not in message


async def test_a_missing_cli_is_an_engine_error(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    with pytest.raises(EngineError, match="not found"):
        await ClaudeCodeAdapter(cli_path=Path("/nonexistent/claude")).start(sandbox, driver, _config(model_route))


async def test_a_cli_that_never_answers_times_out(
    tmp_path: Path, model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    silent = tmp_path / "cli" / "claude"
    silent.parent.mkdir()
    silent.write_text("#!/bin/sh\nexec cat > /dev/null\n")
    silent.chmod(0o755)

    with pytest.raises(EngineError, match="did not start within 1s"):
        await ClaudeCodeAdapter(cli_path=silent, connect_timeout=1).start(sandbox, driver, _config(model_route))


def test_sdk_messages_keep_every_field_and_nested_type_names() -> None:
    from claude_agent_sdk import (
        AssistantMessage,
        RateLimitEvent,
        RateLimitInfo,
        ServerToolUseBlock,
        TextBlock,
        ToolUseBlock,
    )

    from dataplane_agent.engines.sdk_messages import message_payload

    message = AssistantMessage(
        content=[
            TextBlock(text="hi"),
            ToolUseBlock(id="toolu_1", name="Bash", input={"command": "ls"}),
            ServerToolUseBlock(id="srv_1", name="web_search", input={"query": "q"}),
        ],
        model="m",
        usage={"input_tokens": 3, "ratio": float("nan")},
    )
    payload = message_payload(message)

    assert [b["type_name"] for b in payload["content"]] == ["TextBlock", "ToolUseBlock", "ServerToolUseBlock"]
    assert payload["content"][1] == {
        "type_name": "ToolUseBlock",
        "id": "toolu_1",
        "name": "Bash",
        "input": {"command": "ls"},
    }
    assert set(payload) == set(AssistantMessage.__dataclass_fields__)
    assert payload["usage"] == {"input_tokens": 3, "ratio": "nan"}
    json.dumps(payload, allow_nan=False)

    event = RateLimitEvent(rate_limit_info=RateLimitInfo(status="allowed", raw={"a": 1}), uuid="u", session_id="s")
    assert message_payload(event)["rate_limit_info"] == {
        "type_name": "RateLimitInfo", "status": "allowed", "resets_at": None, "rate_limit_type": None, "utilization": None,
        "overage_status": None, "overage_resets_at": None, "overage_disabled_reason": None, "raw": {"a": 1},
    }  # fmt: skip


async def test_turns_follow_one_another_in_one_session(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    session = await ClaudeCodeAdapter().start(sandbox, driver, _config(model_route))
    try:
        finals = []
        for prompt in ("run: echo first", "run: echo second"):
            async for output in session.run_turn(prompt):
                if output.ends_turn:
                    finals.append(output.payload["result"])
                    break  # a caller may stop at the Result; the next turn must still work
        with pytest.raises(EngineError, match="already running"):
            async for _ in session.run_turn("run: echo third"):
                async for _ in session.run_turn("run: echo fourth"):
                    pass
    finally:
        await session.close()

    assert "first" in finals[0] and "second" in finals[1]


def test_the_manifest_declares_the_sdks_permission_modes() -> None:
    from claude_agent_sdk import PermissionMode

    manifest = ClaudeCodeAdapter.manifest
    assert manifest.kind == ClaudeCodeAdapter.kind == "claude_code"
    assert manifest.permission_modes == typing.get_args(PermissionMode)
    assert {"default", "bypassPermissions", "plan", "acceptEdits"} <= set(manifest.permission_modes)
    assert manifest.supports_interactions and manifest.supports_background_tasks and manifest.supports_server_info


async def test_server_info_lists_the_slash_commands(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    session = await ClaudeCodeAdapter().start(sandbox, driver, _config(model_route))
    try:
        info = await session.server_info()
    finally:
        await session.close()

    assert info is not None
    names = {command["name"] for command in info["commands"]}
    assert len(names) > 3 and all(isinstance(command["description"], str) for command in info["commands"])
    json.dumps(info)


async def test_unknown_permission_modes_are_refused(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    with pytest.raises(EngineError, match="unknown permission mode 'yolo'; valid: default, "):
        await ClaudeCodeAdapter().start(sandbox, driver, EngineConfig(permission_mode="yolo"))
    session = await ClaudeCodeAdapter().start(sandbox, driver, _config(model_route))
    try:
        with pytest.raises(EngineError, match="unknown permission mode"):
            await session.set_permission_mode("yolo")
        await session.set_permission_mode("plan")
        assert session.permission_mode == "plan"
    finally:
        await session.close()


async def test_a_cli_that_dies_ends_the_outputs_with_an_error(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    session = await ClaudeCodeAdapter().start(sandbox, driver, _config(model_route))
    try:
        await session.send("sleep: 20")
        outputs = session.outputs()
        async with asyncio.timeout(60):
            async for output in outputs:
                if output.type_name == "AssistantMessage" and _blocks([output], "AssistantMessage", "ToolUseBlock"):
                    break
            await driver.destroy(sandbox)  # kills every process the sandbox's launchers started
            with pytest.raises(EngineError, match="the CLI stopped") as raised:
                async for _ in outputs:
                    pass
        assert model_route.token("engine-test") not in str(raised.value)
        with pytest.raises(EngineError, match="closed"):
            await session.send("run: echo too late")
        with pytest.raises(EngineError, match="the CLI stopped"):  # ended for good, and says so again
            await anext(session.outputs())
    finally:
        await session.close()


async def test_closing_ends_the_outputs(model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox) -> None:
    session = await ClaudeCodeAdapter().start(sandbox, driver, _config(model_route))
    reader = asyncio.create_task(anext(session.outputs(), None))
    await asyncio.sleep(0.1)
    await session.close()
    assert await asyncio.wait_for(reader, 10) is None


async def test_a_transcript_needs_the_conversation_it_resumes(driver: LocalSandboxDriver, sandbox: Sandbox) -> None:
    with pytest.raises(EngineError, match="no engine session id"):
        await ClaudeCodeAdapter().start(sandbox, driver, EngineConfig(transcript=b"{}\n"))
    with pytest.raises(EngineError, match="not a Claude Code session id"):
        transcript_path(sandbox, "../../etc/passwd")


@pytest.mark.parametrize("left", [b"", b'{"type":"user","message":{"role":"us'])
async def test_a_transcript_the_cli_left_without_a_conversation_starts_a_new_one(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox, left: bytes
) -> None:
    """A CLI killed while it wrote its first turn down leaves a transcript that holds no
    conversation: resuming it would fail every later turn ("No conversation found")."""
    adapter = ClaudeCodeAdapter()
    _, engine_session_id = await _turn(adapter, sandbox, driver, _config(model_route), "Say hello")
    transcript_path(sandbox, engine_session_id).write_bytes(left)

    outputs, resumed_id = await _turn(
        adapter, sandbox, driver, _config(model_route, resume=engine_session_id), "run: echo again"
    )

    assert outputs[-1].ends_turn and outputs[-1].payload["is_error"] is False, outputs[-1].payload
    assert resumed_id and resumed_id != engine_session_id  # a new conversation
