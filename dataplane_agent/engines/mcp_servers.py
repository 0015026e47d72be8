"""An agent's MCP servers, as Claude Code runs them: stdio programs inside the sandbox, and only
the tools the agent enabled.

The SDK hands the servers to the CLI on its command line (`--mcp-config`); the CLI, running inside
the sandbox, starts each one there, so a server sees exactly what the sandbox's other programs see
(its workspace, its home, its user), on both drivers; it is a child of the CLI and ends with it.
With an agent, the CLI loads no other server (`strict_mcp_config`): not one a `.mcp.json` in the
workspace names, which the sandbox's own code may have written.

`enabled_tools` cannot be given to the CLI up front: it only hides tools it is told by name, and a
server's tool names are known once it runs (and it runs sandbox code, which may change them). So a
PreToolUse hook, which the CLI consults in every permission mode, refuses any call to a tool of a
server that is not among its enabled tools, with a message the model sees.

A stdio server that does not start (its program or file is missing, it exits, it speaks no MCP)
leaves the CLI running without it. The CLI says so in the `init` message that opens each turn
(`mcp_servers: [{name, status}]`, status "failed"; it gives no reason there), and `unavailable`
turns the agent's servers it names so into reports, the first time only.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from claude_agent_sdk import HookContext, HookInput, HookJSONOutput, HookMatcher, McpServerConfig
from claude_agent_sdk.types import McpStdioServerConfig, PreToolUseHookSpecificOutput

from dataplane_agent.engines.agent_config import McpServer, StdioMcpServer
from dataplane_agent.engines.base import McpUnavailable

# The CLI names a server's tool `mcp__<server>__<tool>`, each name with every character outside
# [A-Za-z0-9_-] turned into `_`.
_PREFIX = "mcp__"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
# How much of a server's command line a report quotes.
_MAX_COMMAND_LINE = 300


def sdk_servers(servers: Sequence[McpServer]) -> dict[str, McpServerConfig]:
    """The SDK's `mcp_servers`: each stdio server's program, arguments and extra environment
    (servers of a transport this engine does not run are left out)."""
    return {
        server.name: McpStdioServerConfig(
            type="stdio", command=server.stdio.command, args=list(server.stdio.args), env=dict(server.stdio.env)
        )
        for server in servers
        if server.stdio is not None
    }


def unavailable(servers: Sequence[McpServer], init: Mapping[str, Any]) -> list[McpUnavailable]:
    """The agent's stdio servers that the CLI's `init` message (its `data`) reports as failed, in
    the agent's order, each with a reason its owner can act on."""
    reported = init.get("mcp_servers")
    if not isinstance(reported, list):
        return []
    failed = {
        str(entry.get("name")) for entry in reported if isinstance(entry, Mapping) and entry.get("status") == "failed"
    }
    return [
        McpUnavailable(server=server.name, reason=_did_not_start(server.stdio))
        for server in servers
        if server.stdio is not None and server.name in failed
    ]


def _did_not_start(stdio: StdioMcpServer) -> str:
    command = shlex.join([stdio.command, *stdio.args])
    if len(command) > _MAX_COMMAND_LINE:
        command = command[: _MAX_COMMAND_LINE - 1] + "…"
    return (
        f"the stdio server did not start in the sandbox: Claude Code could not run `{command}` as an MCP "
        "server (the program or a file it names is missing there, it exited, or it does not speak MCP on "
        "stdin/stdout); the session goes on without its tools"
    )


def mcp_tool_refusal(servers: Sequence[McpServer], tool_name: str) -> str | None:
    """Why the model may not call `tool_name`, if it is a tool of one of `servers` that the
    server's `enabled_tools` leaves out; None for any other tool."""
    server = _server_of(servers, tool_name)
    if server is None or not server.enabled_tools:
        return None
    tool = tool_name[len(f"{_PREFIX}{_cli_name(server.name)}__") :]
    if tool in {_cli_name(enabled) for enabled in server.enabled_tools}:
        return None
    return (
        f"The tool {tool_name} is not enabled for this agent: of the MCP server {server.name!r} "
        f"it may use only {', '.join(server.enabled_tools)}."
    )


def enabled_tools_hook(servers: Sequence[McpServer]) -> HookMatcher | None:
    """The SDK's PreToolUse hook that holds `enabled_tools` (None when no server restricts its tools)."""
    if not any(server.enabled_tools for server in servers):
        return None
    restricted = tuple(servers)

    async def refuse_disabled(hook_input: HookInput, tool_use_id: str | None, context: HookContext) -> HookJSONOutput:
        refusal = mcp_tool_refusal(restricted, str(hook_input.get("tool_name", "")))
        if refusal is None:
            return {}
        deny = PreToolUseHookSpecificOutput(
            hookEventName="PreToolUse", permissionDecision="deny", permissionDecisionReason=refusal
        )
        return {"hookSpecificOutput": deny}

    # "block": should the hook fail, the call is refused rather than let through. Beside the
    # agent's tool policies' hook, a "deny" here wins over an "allow" there, in either order.
    return HookMatcher(matcher=f"{_PREFIX}.*", hooks=[refuse_disabled], on_failure="block")


def _server_of(servers: Sequence[McpServer], tool_name: str) -> McpServer | None:
    """The server whose prefix `tool_name` carries (the longest, should one name start another)."""
    if not tool_name.startswith(_PREFIX):
        return None
    owners = [server for server in servers if tool_name.startswith(f"{_PREFIX}{_cli_name(server.name)}__")]
    return max(owners, key=lambda server: len(server.name), default=None)


def cli_tool_name(server: str, tool: str) -> str:
    """The name the CLI gives `tool` of `server`: `mcp__<server>__<tool>`."""
    return f"{_PREFIX}{_cli_name(server)}__{_cli_name(tool)}"


def _cli_name(name: str) -> str:
    return _UNSAFE.sub("_", name)
