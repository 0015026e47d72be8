"""Tool grants on the agent: a call a grant matches runs without an interaction, others still ask,
a new set replaces the old one, and the set outlives an agent restart. The real bundled CLI in the
local sandbox, in the "default" permission mode (Bash asks), against the offline model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.claude_code import BUNDLED_CLI, ClaudeCodeAdapter
from dataplane_agent.routes.model import ModelRoute
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from tests.dataplane_agent.fakes import Agent, allow, deliver, kinds, running_agent

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore::claude_agent_sdk.CanUseToolShadowedWarning")]

TIMEOUT = 90.0
# `touch` asks in the "default" mode (a read-only command such as `echo` would not).
TOUCH_GRANT = pb.ToolGrant(grant_id="g-1", tool_name="Bash", input_pattern="touch /workspace/granted-*")


async def _result(agent: Agent, turn_id: str, count: int) -> str:
    outputs = await agent.wait_for("s-1", "ResultMessage", count, timeout=TIMEOUT)
    [result] = [o for o in outputs if o.turn_id == turn_id and o.engine_message.type_name == "ResultMessage"]
    return str(json.loads(result.engine_message.payload_json)["result"])


async def _asked(agent: Agent) -> list[pb.InteractionRequested]:
    return [o.interaction_requested for o in await agent.outputs("s-1") if o.HasField("interaction_requested")]


async def test_granted_calls_run_without_asking_and_others_still_ask(
    tmp_path: Path, sandbox_root: Path, bwrap: str, model_route: ModelRoute
) -> None:
    if not BUNDLED_CLI.is_file():
        pytest.skip("claude-agent-sdk has no bundled CLI on this platform")
    driver = LocalSandboxDriver(sandbox_root, bwrap=bwrap)
    state = tmp_path / "agent"
    start = pb.StartRuntime(engine="claude_code", permission_mode="default", tool_grants=[TOUCH_GRANT])
    async with running_agent(state, ClaudeCodeAdapter(), driver, model=model_route) as agent:
        assert not (await agent.command("s-1", start_runtime=start)).HasField("error")
        await agent.command("s-1", **deliver("t-1", "run: touch /workspace/granted-1", "default"))
        await _result(agent, "t-1", 1)
        assert await _asked(agent) == []
        workspace = (await agent.state.session("s-1")).sandbox.workspace
        assert (workspace / "granted-1").exists()

        # Not matched by the pattern: asks as before.
        await agent.command("s-1", **deliver("t-2", "run: touch /workspace/made.txt", "default"))
        await agent.wait_for("s-1", "interaction_requested", 1, TIMEOUT)
        [asked] = await _asked(agent)
        assert asked.tool_name == "Bash"
        await agent.command("s-1", **allow(asked.interaction_id))
        await _result(agent, "t-2", 2)

        # The set is replaced whole: with none, the same call asks again.
        assert not (await agent.command("s-1", set_tool_grants=pb.SetToolGrants())).HasField("error")
        await agent.command("s-1", **deliver("t-3", "run: touch /workspace/granted-3", "default"))
        await agent.wait_for("s-1", "interaction_requested", 2, TIMEOUT)
        asked = (await _asked(agent))[-1]
        await agent.command("s-1", **allow(asked.interaction_id))
        await _result(agent, "t-3", 3)
        await agent.command("s-1", set_tool_grants=pb.SetToolGrants(grants=[TOUCH_GRANT]))

    # A new agent process on the same state keeps the set.
    async with running_agent(state, ClaudeCodeAdapter(), driver, model=model_route) as agent:
        await agent.command("s-1", **deliver("t-4", "run: touch /workspace/granted-4", "default"))
        await _result(agent, "t-4", 4)
        assert kinds(await agent.outputs("s-1")).count("interaction_requested") == 2
    assert (workspace / "granted-4").exists()
