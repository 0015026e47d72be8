"""A session's agent configuration, as the engine adapters use it: what the control plane sent in
StartRuntime.config (an `astrabox.agents.v1.AgentSpec`), as typed, immutable values.

The proto stays at the boundary: `AgentConfig.from_proto` (and `from_bytes`, for the copy the
agent's state keeps so that every later engine start applies it too) is the one conversion. An
empty spec is `AgentConfig()`, which `is_default`: the engine runs with its own defaults, exactly
as a session without an agent does.

The spec's engine, model and permission mode are not here: StartRuntime carries them on their own
(and the permission mode changes over a session's life), so EngineConfig holds them once.
Neither is the description, which is for people.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from astrabox.agents.v1 import agent_pb2


class ToolPolicy(enum.Enum):
    """What happens when the model calls a tool (agent.proto ToolPolicy)."""

    # No policy: the session's permission mode decides.
    UNSPECIFIED = "unspecified"
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


_POLICIES: dict[int, ToolPolicy] = {
    agent_pb2.TOOL_POLICY_UNSPECIFIED: ToolPolicy.UNSPECIFIED,
    agent_pb2.TOOL_POLICY_ALLOW: ToolPolicy.ALLOW,
    agent_pb2.TOOL_POLICY_ASK: ToolPolicy.ASK,
    agent_pb2.TOOL_POLICY_DENY: ToolPolicy.DENY,
}


@dataclass(frozen=True, slots=True)
class SystemPrompt:
    """Text added after the engine's own system prompt, or (`replace`) used instead of it."""

    text: str
    replace: bool = False


@dataclass(frozen=True, slots=True)
class ToolRule:
    """The policy of the tools `pattern` matches: a tool name, where `*` matches any run of
    characters (and nothing else is special)."""

    pattern: str
    policy: ToolPolicy

    def matches(self, tool_name: str) -> bool:
        if "*" not in self.pattern:
            return tool_name == self.pattern
        regex = ".*".join(re.escape(part) for part in self.pattern.split("*"))
        return re.fullmatch(regex, tool_name, re.DOTALL) is not None


@dataclass(frozen=True, slots=True)
class Tools:
    """Which built-in tools the model is offered (empty: all) and the policy of each call."""

    enabled: tuple[str, ...] = ()
    rules: tuple[ToolRule, ...] = ()
    default_policy: ToolPolicy = ToolPolicy.UNSPECIFIED

    def policy_for(self, tool_name: str) -> ToolPolicy:
        """The first matching rule's policy, else the default."""
        for rule in self.rules:
            if rule.matches(tool_name):
                return rule.policy
        return self.default_policy

    @property
    def has_policies(self) -> bool:
        """Some call has a policy of its own (else the permission mode alone decides, as without an agent)."""
        return self.default_policy is not ToolPolicy.UNSPECIFIED or any(
            rule.policy is not ToolPolicy.UNSPECIFIED for rule in self.rules
        )


@dataclass(frozen=True, slots=True)
class StdioMcpServer:
    """An MCP server the engine runs inside the sandbox, speaking MCP on its stdin/stdout."""

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HttpMcpServer:
    """An MCP server the agent reaches over HTTP for the engine (engines/http_mcp.py): its URL, the
    name of the credential it is sent (empty: none) and the header it goes in (empty: Authorization)."""

    url: str
    credential: str = ""
    header: str = ""


@dataclass(frozen=True, slots=True)
class McpServer:
    """An MCP server whose tools the model is offered as `mcp__<name>__<tool>` (all of them when
    `enabled_tools` is empty)."""

    name: str
    stdio: StdioMcpServer | None = None
    http: HttpMcpServer | None = None
    enabled_tools: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SkillFile:
    """One file of a skill: a relative path inside the skill's directory (as the control plane
    validated it; whoever writes it still confines it) and its content."""

    path: str
    content: bytes


@dataclass(frozen=True, slots=True)
class Skill:
    """A named set of files (one of them SKILL.md) installed where the engine finds skills."""

    name: str
    files: tuple[SkillFile, ...] = ()


@dataclass(frozen=True, slots=True)
class CustomTool:
    """A tool the session's client runs: the model calls it as `mcp__client__<name>` with an input
    `input_schema` (a JSON Schema object, as the control plane checked it) describes."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class SubAgent:
    """An agent the model may call as `mcp__subagents__<agent>`; the control plane runs the call."""

    agent: str
    description: str


@dataclass(frozen=True, slots=True)
class Limits:
    """What one message or the session may spend; zero is no limit. The engine applies the
    per-message ones; the per-session cost and the turn timeout are the control plane's."""

    max_turns: int = 0
    max_cost_usd_per_turn: float = 0.0
    max_cost_usd_per_session: float = 0.0
    turn_timeout_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """Everything of a session's agent that the engine applies. `AgentConfig()` is the engine's defaults."""

    system_prompt: SystemPrompt | None = None
    tools: Tools = field(default_factory=Tools)
    mcp_servers: tuple[McpServer, ...] = ()
    skills: tuple[Skill, ...] = ()
    limits: Limits = field(default_factory=Limits)
    custom_tools: tuple[CustomTool, ...] = ()
    subagents: tuple[SubAgent, ...] = ()

    @property
    def is_default(self) -> bool:
        """Nothing to apply: the engine runs exactly as for a session without an agent."""
        return self == AgentConfig()

    @classmethod
    def from_proto(cls, spec: agent_pb2.AgentSpec) -> AgentConfig:
        return cls(
            system_prompt=_system_prompt(spec),
            tools=Tools(
                enabled=tuple(spec.tools.enabled),
                rules=tuple(ToolRule(rule.tool, _policy(rule.policy)) for rule in spec.tools.rules),
                default_policy=_policy(spec.tools.default_policy),
            ),
            mcp_servers=tuple(
                McpServer(
                    name=server.name,
                    stdio=(
                        StdioMcpServer(
                            command=server.stdio.command,
                            args=tuple(server.stdio.args),
                            env=dict(server.stdio.env),
                        )
                        if server.WhichOneof("transport") == "stdio"
                        else None
                    ),
                    http=(
                        HttpMcpServer(url=server.http.url, credential=server.http.credential, header=server.http.header)
                        if server.WhichOneof("transport") == "http"
                        else None
                    ),
                    enabled_tools=tuple(server.enabled_tools),
                )
                for server in spec.mcp_servers
            ),
            skills=tuple(
                Skill(name=skill.name, files=tuple(SkillFile(f.path, f.content) for f in skill.files))
                for skill in spec.skills
            ),
            limits=Limits(
                max_turns=spec.limits.max_turns,
                max_cost_usd_per_turn=spec.limits.max_cost_usd_per_turn,
                max_cost_usd_per_session=spec.limits.max_cost_usd_per_session,
                turn_timeout_seconds=spec.limits.turn_timeout.ToTimedelta().total_seconds(),
            ),
            custom_tools=tuple(
                CustomTool(tool.name, tool.description, _schema(tool.input_schema_json)) for tool in spec.custom_tools
            ),
            subagents=tuple(SubAgent(sub.agent, sub.description) for sub in spec.subagents),
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> AgentConfig:
        """From a serialized AgentSpec (what the agent's state keeps); empty bytes: the defaults."""
        return cls.from_proto(agent_pb2.AgentSpec.FromString(data))


def _system_prompt(spec: agent_pb2.AgentSpec) -> SystemPrompt | None:
    which = spec.system_prompt.WhichOneof("prompt")
    if which == "append":
        return SystemPrompt(spec.system_prompt.append)
    if which == "replace":
        return SystemPrompt(spec.system_prompt.replace, replace=True)
    return None


def _schema(text: str) -> dict[str, Any]:
    # The control plane checked it is a JSON Schema object; anything else (an older control plane)
    # takes an input of any object rather than failing the engine's start.
    try:
        schema = json.loads(text or "{}")
    except (ValueError, RecursionError):
        schema = None
    if not isinstance(schema, dict):
        return {"type": "object", "properties": {}}
    return schema


def _policy(value: int) -> ToolPolicy:
    # A policy newer than this agent knows (the control plane's validation should have refused it)
    # is not guessed at: the call is refused, which is the safe side.
    return _POLICIES.get(value, ToolPolicy.DENY)
