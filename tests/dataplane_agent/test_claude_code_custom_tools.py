"""An agent's custom tools in the real bundled CLI (the offline model, the local sandbox): offered as
`mcp__client__<name>` by the agent's in-process SDK MCP server, each call asks the session's broker
once (never also for an approval, whatever the tool policies say), the client's result is what the
model reads, input the tool's schema refuses never reaches the client, and an interrupt lets go of a
parked call."""

from __future__ import annotations

import asyncio

import pytest

from dataplane_agent.engines.agent_config import AgentConfig, CustomTool, ToolPolicy, Tools
from dataplane_agent.engines.base import EngineConfig, ToolDecision, ToolResult
from dataplane_agent.engines.claude_code import ClaudeCodeAdapter, ClaudeCodeSession
from dataplane_agent.routes.model import ModelRoute
from dataplane_agent.sandboxes.base import Sandbox
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from tests.dataplane_agent.test_claude_code_interactions import (  # noqa: F401 - fixtures
    TURN_TIMEOUT,
    RecordingBroker,
    _exchange,
    _tool_results,
    _until_result,
    driver,
    sandbox,
)

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore::claude_agent_sdk.CanUseToolShadowedWarning")]

LOOKUP = CustomTool(
    "lookup_order",
    "Looks an order up by its id",
    {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
)
# Every call would need an approval: the custom tool's own call must not.
ASK_ALL = AgentConfig(tools=Tools(default_policy=ToolPolicy.ASK), custom_tools=(LOOKUP,))


async def _start(
    route: ModelRoute, sandbox: Sandbox, driver: LocalSandboxDriver, broker: RecordingBroker
) -> ClaudeCodeSession:
    config = EngineConfig(
        permission_mode="default", env=route.env("interactions"), interactions=broker, agent_config=ASK_ALL
    )
    return await ClaudeCodeAdapter().start(sandbox, driver, config)


async def test_a_custom_tool_asks_the_client_once_and_the_model_reads_its_result(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    broker = RecordingBroker(ToolDecision(allow=True, result=ToolResult("A-7 left Lyon on Monday")))
    session = await _start(model_route, sandbox, driver, broker)
    try:
        refused = await _exchange(session, 'tool: mcp__client__lookup_order {"order_id": 7}')
        answered = await _exchange(session, 'tool: mcp__client__lookup_order {"order_id": "A-7"}')
    finally:
        await session.close()

    # The schema refused the first input before anyone was asked; the second asked the client once.
    assert _tool_results(refused)[0]["is_error"] is True
    assert "Input validation error" in str(_tool_results(refused)[0]["content"])
    [request] = broker.requests
    assert (request.custom_tool, request.tool_name, request.input) == (True, "lookup_order", {"order_id": "A-7"})
    assert answered[-1].payload["result"] == "mcp__client__lookup_order returned: A-7 left Lyon on Monday"


async def test_an_interrupt_lets_go_of_a_parked_custom_tool_call(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    broker = RecordingBroker(None)  # the client never answers
    session = await _start(model_route, sandbox, driver, broker)
    try:
        await session.send('tool: mcp__client__lookup_order {"order_id": "A-7"}')
        async with asyncio.timeout(TURN_TIMEOUT):
            while not broker.requests:
                await asyncio.sleep(0.02)
        await session.interrupt()
        outputs = await _until_result(session)
    finally:
        await session.close()

    assert broker.cancelled == broker.requests
    assert outputs[-1].payload["is_error"] is True
