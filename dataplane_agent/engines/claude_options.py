"""A session's agent configuration as claude-agent-sdk options: what `AgentConfig` sets on the
`ClaudeAgentOptions` the claude_code adapter launches the CLI with. The SDK and the CLI do the work;
this only says which of their options each setting is.

    system prompt, append      the claude_code preset with `append`
    system prompt, replace     the custom prompt (a string)
    tools.enabled              `tools` (empty: the CLI's default set)
    tool policies              a PreToolUse hook, `ToolPolicyHook`
    limits.max_turns           `max_turns` (model round trips for one message)
    mcp_servers, stdio         `mcp_servers` and `strict_mcp_config` (see mcp_servers.py)
    mcp_servers, http          `mcp_servers`: in-process SDK servers forwarding to them (http_mcp.py)
    mcp_servers.enabled_tools  a PreToolUse hook refusing the server's other tools
    skills                     `skills`, their names (installed by skills.py)
    custom_tools               an in-process SDK MCP server "client" (custom_tools.py), its tools in
                               `allowed_tools` and exempt from the tool policies' hook
    subagents                  likewise, a server "subagents": a tool per sub-agent (custom_tools.py)

Not mapped, and refused by the control plane (controlplane/agent_definitions/specs.py): limits.max_cost_usd_per_turn. The SDK's `max_budget_usd` is not a per-message budget
with ClaudeSDKClient: the bundled CLI counts it from its process's start, across every message of
a streaming-input session (its own documentation: "maxBudgetUsd counts only the spend since this
query() call started"), so once the session has spent it every later message ends at once with
error_max_budget_usd, and a restarted engine starts counting afresh. Neither is "per turn", and the
CLI offers no control request to move the budget between messages.

Tool policies, as the bundled CLI really behaves (tests/dataplane_agent/test_claude_code_agent_config.py):
the CLI calls `can_use_tool` only when its permission mode asks (never in bypassPermissions), but it
runs PreToolUse hooks before every tool call in every mode. So the hook decides: ALLOW answers
"allow" (the call runs without asking, even in "default"), ASK answers "ask" (the CLI then asks
`can_use_tool`, the adapter's tool gate, so the call becomes an Interaction exactly as an approval
in "default" does, even in bypassPermissions, acceptEdits or dontAsk), DENY answers "deny" with
a reason the model reads as the tool's result ("PreToolUse:Write hook error: Write is denied by the
agent's policy."). A call no policy covers gets no opinion, and the mode decides as without an
agent. What the hook cannot widen: "allow" does not answer AskUserQuestion's questions for the
user (they still reach the tool gate), nor lift plan mode's refusals. The hook is installed with
`on_failure="block"`: if it cannot answer, the call is refused rather than let through.
A configuration with no policy installs no hook.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions, HookContext, HookInput, HookMatcher, McpSdkServerConfig
from claude_agent_sdk.types import HookJSONOutput, SystemPromptPreset

from dataplane_agent.engines import custom_tools
from dataplane_agent.engines.agent_config import AgentConfig, SystemPrompt, ToolPolicy, Tools
from dataplane_agent.engines.base import InteractionBroker
from dataplane_agent.engines.mcp_servers import enabled_tools_hook, sdk_servers
from dataplane_agent.engines.skills import skill_names

# The engine's own system prompt: what a session without an agent's prompt runs with.
PRESET_PROMPT: SystemPromptPreset = {"type": "preset", "preset": "claude_code"}
# The hook answers at once (no human is waited for in it); a CLI that hears nothing refuses.
_HOOK_TIMEOUT_SECONDS = 30.0


def with_agent_config(
    options: ClaudeAgentOptions,
    config: AgentConfig,
    broker: InteractionBroker | None = None,
    http_servers: Mapping[str, McpSdkServerConfig] | None = None,
) -> ClaudeAgentOptions:
    """`options` with what `config` sets; the default configuration changes nothing. `broker`
    is asked for the client's result of each custom tool call; `http_servers`: the in-process
    servers standing for the agent's HTTP servers that could be reached (http_mcp.py)."""
    if config.is_default:
        return options
    changes: dict[str, Any] = {"system_prompt": system_prompt(config.system_prompt)}
    if config.tools.enabled:
        changes["tools"] = list(config.tools.enabled)
    custom = frozenset(custom_tools.tool_name(tool.name) for tool in config.custom_tools) | frozenset(
        custom_tools.subagent_tool_name(sub.agent) for sub in config.subagents
    )
    if config.tools.has_policies:
        changes["hooks"] = {
            **(options.hooks or {}),
            "PreToolUse": [
                *((options.hooks or {}).get("PreToolUse") or ()),
                HookMatcher(
                    matcher=None,
                    hooks=[ToolPolicyHook(config.tools, exempt=custom)],
                    timeout=_HOOK_TIMEOUT_SECONDS,
                    on_failure="block",
                ),
            ],
        }
    if config.limits.max_turns:
        changes["max_turns"] = config.limits.max_turns
    # The agent's MCP servers and no other: not one the sandbox's own code names in the workspace.
    changes["mcp_servers"] = {**sdk_servers(config.mcp_servers), **(http_servers or {})}
    changes["strict_mcp_config"] = True
    if config.custom_tools:
        # Asking the client for the result is the approval: the CLI asks no one else first.
        changes["mcp_servers"][custom_tools.SERVER] = custom_tools.server(config.custom_tools, broker)
    if config.subagents:
        # The control plane runs the call: asking it is the approval, as for a custom tool.
        changes["mcp_servers"][custom_tools.SUBAGENTS_SERVER] = custom_tools.subagents_server(config.subagents, broker)
    if custom:
        changes["allowed_tools"] = [*options.allowed_tools, *sorted(custom)]
    if restricting := enabled_tools_hook(config.mcp_servers):
        hooks = changes.get("hooks", options.hooks) or {}
        changes["hooks"] = {**hooks, "PreToolUse": [*(hooks.get("PreToolUse") or ()), restricting]}
    if config.skills:
        # The agent's skills and no other are offered to the model.
        changes["skills"] = skill_names(config.skills)
    return dataclasses.replace(options, **changes)


def system_prompt(prompt: SystemPrompt | None) -> str | SystemPromptPreset:
    if prompt is None:
        return PRESET_PROMPT
    if prompt.replace:
        return prompt.text
    return {**PRESET_PROMPT, "append": prompt.text}


def denial(tool_name: str) -> str:
    """What the model is told when the agent's policy denies a call."""
    return f"{tool_name} is denied by the agent's policy."


class ToolPolicyHook:
    """The SDK's PreToolUse hook: each call's policy (the first matching rule, else the default)
    as the CLI's permission decision; no opinion where the agent has none, nor on the `exempt`
    tools (the agent's custom tools: their client answers each call)."""

    def __init__(self, tools: Tools, exempt: frozenset[str] = frozenset()) -> None:
        self._tools = tools
        self._exempt = exempt

    async def __call__(self, hook_input: HookInput, tool_use_id: str | None, context: HookContext) -> HookJSONOutput:
        tool_name = str(hook_input.get("tool_name", ""))
        if tool_name in self._exempt:
            return {}
        policy = self._tools.policy_for(tool_name)
        if policy is ToolPolicy.UNSPECIFIED:
            return {}
        if policy is ToolPolicy.DENY:
            decision = {"permissionDecision": "deny", "permissionDecisionReason": denial(tool_name)}
        elif policy is ToolPolicy.ASK:
            decision = {"permissionDecision": "ask", "permissionDecisionReason": "the agent's policy asks for approval"}
        else:
            decision = {"permissionDecision": "allow", "permissionDecisionReason": "allowed by the agent's policy"}
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse", **decision}}  # type: ignore[typeddict-item]
