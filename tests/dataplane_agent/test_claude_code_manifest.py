"""The claude_code manifest names the built-in tools the real CLI offers: agent definitions are
validated against that list (AgentSpec.tools), so it must be the CLI's own, read here from the
init message of a real session in a real sandbox against the offline model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dataplane_agent.engines.base import EngineConfig, ToolDecision, ToolRequest
from dataplane_agent.engines.claude_code import BUNDLED_CLI, MANIFEST, ClaudeCodeAdapter
from dataplane_agent.routes.model import ModelRoute
from dataplane_agent.sandboxes.base import SandboxSpec
from dataplane_agent.sandboxes.local import LocalSandboxDriver

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore::claude_agent_sdk.CanUseToolShadowedWarning")]


class Allowing:
    async def ask(self, request: ToolRequest) -> ToolDecision:
        return ToolDecision(allow=True)


@pytest.fixture
def driver(sandbox_root: Path, bwrap: str) -> LocalSandboxDriver:
    if not BUNDLED_CLI.is_file():
        pytest.skip("claude-agent-sdk has no bundled CLI on this platform")
    return LocalSandboxDriver(sandbox_root, bwrap=bwrap)


async def test_the_manifest_names_exactly_the_tools_the_cli_offers(
    model_route: ModelRoute, driver: LocalSandboxDriver
) -> None:
    sandbox = await driver.create(
        SandboxSpec(session_id="manifest", agent_id="agent-1", model_socket=model_route.socket)
    )
    # As the agent starts every session's engine: with a broker for its tool approvals.
    config = EngineConfig(permission_mode="bypassPermissions", env=model_route.env("manifest"), interactions=Allowing())
    session = await ClaudeCodeAdapter().start(sandbox, driver, config)
    try:
        await session.send("Say hello")
        outputs = []
        async with asyncio.timeout(60):
            async for output in session.outputs():
                outputs.append(output)
                if output.ends_turn:
                    break
    finally:
        await session.close()

    init = next(o for o in outputs if o.type_name == "SystemMessage" and o.payload["subtype"] == "init")
    offered = init.payload["data"]["tools"]
    built_in = sorted(tool for tool in offered if not tool.startswith("mcp__"))
    assert built_in, "the CLI's init message lists no tool"
    assert sorted(MANIFEST.tools) == built_in, "update MANIFEST.tools in dataplane_agent/engines/claude_code.py"
