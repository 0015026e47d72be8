"""A session's agent configuration holds for the session's whole life on the agent, whatever
replaces its engine: the real bundled CLI in the local sandbox, driven through the agent's runtimes
by StartRuntime.config, against the offline model's `report: setup` and `tool:` rows."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from astrabox.agents.v1 import agent_pb2
from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.claude_code import BUNDLED_CLI, ClaudeCodeAdapter
from dataplane_agent.routes.model import ModelRoute
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from tests.dataplane_agent.fakes import Agent, deliver, kinds, running_agent

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore::claude_agent_sdk.CanUseToolShadowedWarning")]

TURN_TIMEOUT = 90.0
APPENDED = "You work for the lighthouse keepers' guild."
CONFIG = agent_pb2.AgentSpec(
    system_prompt=agent_pb2.SystemPrompt(append=APPENDED),
    tools=agent_pb2.Tools(rules=[agent_pb2.ToolRule(tool="Write", policy=agent_pb2.TOOL_POLICY_DENY)]),
)


async def _turn(agent: Agent, turn_id: str, text: str, count: int, permission_mode: str = "") -> str:
    """Deliver `text` as the session's turn `count` and return its result's text."""
    await agent.command("s-1", **deliver(turn_id, text, permission_mode))
    outputs = await agent.wait_for("s-1", "ResultMessage", count, timeout=TURN_TIMEOUT)
    [result] = [o for o in outputs if o.turn_id == turn_id and o.engine_message.type_name == "ResultMessage"]
    return str(json.loads(result.engine_message.payload_json)["result"])


async def _stop_when_idle(agent: Agent) -> None:
    """Stop the runtime, once the turn that just ended has settled (a busy runtime is not stopped)."""
    async with asyncio.timeout(TURN_TIMEOUT):
        while "runtime_stopped" not in kinds(await agent.outputs("s-1")):
            await agent.command("s-1", stop_runtime=pb.StopRuntime(reason="idle"))
            await asyncio.sleep(0.2)


async def test_the_configuration_holds_after_an_idle_stop_and_an_agent_restart(
    tmp_path: Path, sandbox_root: Path, bwrap: str, model_route: ModelRoute
) -> None:
    if not BUNDLED_CLI.is_file():
        pytest.skip("claude-agent-sdk has no bundled CLI on this platform")
    driver = LocalSandboxDriver(sandbox_root, bwrap=bwrap)
    state = tmp_path / "agent"
    start = pb.StartRuntime(engine="claude_code", permission_mode="bypassPermissions", config=CONFIG)
    async with running_agent(state, ClaudeCodeAdapter(), driver, model=model_route) as agent:
        assert not (await agent.command("s-1", start_runtime=start)).HasField("error")
        assert APPENDED in await _turn(agent, "t-1", "report: setup", 1)

        # Stopped when idle: the next message starts a new CLI, resuming the conversation. (The CLI
        # restores an appended system prompt from its transcript on its own; the policy is the
        # agent's alone to restore.)
        await _stop_when_idle(agent)
        write = 'tool: Write {"file_path": "/workspace/denied.txt", "content": "no"}'
        assert "Write is denied by the agent's policy." in await _turn(agent, "t-2", write, 2, "bypassPermissions")
        workspace = (await agent.state.session("s-1")).sandbox.workspace

    # A new agent process on the same state: the first message starts the engine again.
    async with running_agent(state, ClaudeCodeAdapter(), driver, model=model_route) as agent:
        assert APPENDED in await _turn(agent, "t-3", "report: setup", 3)
        assert "Write is denied by the agent's policy." in await _turn(agent, "t-4", write, 4)
    assert not (workspace / "denied.txt").exists()
