"""An agent's custom tools: tools the session's client runs, offered to the model as MCP tools.

They are served by an in-process SDK MCP server named "client" (`mcp__client__<name>`), built per
engine start from the session's AgentConfig. The server runs in the agent process, outside the
sandbox: the CLI reaches it over its control channel, so nothing in the sandbox can answer a call
in the client's place. A call parks the turn exactly as an approval does, through the session's
InteractionBroker, as a ToolRequest marked `custom_tool`; the control plane journals it as an
Interaction of kind CUSTOM_TOOL and the client's `tool_result` comes back as the MCP tool's result
(a denial, an interrupt or a settled turn: an error result the model reads). The SDK checks the
model's input against the tool's schema before the handler runs, so the client is only asked with
input its schema accepts.

The CLI would also ask `can_use_tool` before an MCP tool runs (in "default" mode); asking the
client for its result is the approval, so the tools are in `allowed_tools` and the agent's tool
policies give them no opinion (claude_options.py).

An agent's sub-agents are offered the same way by a second server, "subagents"
(`mcp__subagents__<agent>`, input `{"prompt": ...}`): the ToolRequest is marked `subagent` and the
control plane, not a client, answers it with the child session's final text.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import structlog
from claude_agent_sdk import McpSdkServerConfig, SdkMcpTool, create_sdk_mcp_server

from dataplane_agent.engines.agent_config import CustomTool, SubAgent
from dataplane_agent.engines.base import InteractionBroker, ToolRequest

log = structlog.get_logger(__name__)

SERVER = "client"
SUBAGENTS_SERVER = "subagents"
_NOBODY = "No client can run this tool in this engine session."
_SUBAGENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"prompt": {"type": "string", "description": "The sub-agent's task: its first message."}},
    "required": ["prompt"],
}


def tool_name(name: str) -> str:
    """The name the model calls a custom tool by."""
    return f"mcp__{SERVER}__{name}"


def subagent_tool_name(agent: str) -> str:
    """The name the model calls a sub-agent by."""
    return f"mcp__{SUBAGENTS_SERVER}__{agent}"


def server(tools: Sequence[CustomTool], broker: InteractionBroker | None) -> McpSdkServerConfig:
    """The SDK MCP server offering `tools`; each call asks `broker` for the client's result."""
    return create_sdk_mcp_server(SERVER, tools=[_sdk_tool(tool, broker) for tool in tools])


def subagents_server(subagents: Sequence[SubAgent], broker: InteractionBroker | None) -> McpSdkServerConfig:
    """The SDK MCP server offering a tool per sub-agent; each call asks `broker` for the child's result."""
    tools = [
        _sdk_tool(CustomTool(sub.agent, sub.description, _SUBAGENT_SCHEMA), broker, subagent=True) for sub in subagents
    ]
    return create_sdk_mcp_server(SUBAGENTS_SERVER, tools=tools)


def _sdk_tool(tool: CustomTool, broker: InteractionBroker | None, *, subagent: bool = False) -> SdkMcpTool[Any]:
    # The SDK reads a dict without "properties" as {parameter: python type}: a schema always has them.
    schema = {**tool.input_schema, "properties": tool.input_schema.get("properties", {})}

    async def call(arguments: dict[str, Any]) -> dict[str, Any]:
        if broker is None:
            return _text(_NOBODY, is_error=True)
        request = ToolRequest(
            interaction_id=str(uuid.uuid4()),
            tool_name=tool.name,
            input=dict(arguments),
            tool_use_id="",
            custom_tool=not subagent,
            subagent=subagent,
        )
        try:
            decision = await broker.ask(request)
        except Exception as error:  # nobody can answer: the model reads that the tool failed
            log.warning("custom_tool_ask_failed", interaction_id=request.interaction_id, error=repr(error))
            return _text(f"The client's result could not be obtained: {error}", is_error=True)
        if decision.result is not None:
            return _text(decision.result.content, is_error=decision.result.is_error)
        return _text(decision.message or "The client refused to run this tool.", is_error=True)

    return SdkMcpTool(name=tool.name, description=tool.description, input_schema=schema, handler=call)


def _text(text: str, *, is_error: bool) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "is_error": is_error}
