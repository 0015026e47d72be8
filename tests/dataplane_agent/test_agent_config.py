"""AgentConfig: the whole AgentSpec the control plane sends, as the engine adapters read it, and
which policy a tool call gets."""

from __future__ import annotations

from datetime import timedelta

from google.protobuf import duration_pb2

from astrabox.agents.v1 import agent_pb2
from dataplane_agent.engines.agent_config import (
    AgentConfig,
    Limits,
    McpServer,
    Skill,
    SkillFile,
    StdioMcpServer,
    SystemPrompt,
    ToolPolicy,
    ToolRule,
    Tools,
)


def test_every_part_of_the_spec_is_carried() -> None:
    spec = agent_pb2.AgentSpec(
        description="For people only",
        model="m-1",
        system_prompt=agent_pb2.SystemPrompt(replace="You write release notes."),
        tools=agent_pb2.Tools(
            enabled=["Bash", "Read"],
            rules=[agent_pb2.ToolRule(tool="mcp__docs__*", policy=agent_pb2.TOOL_POLICY_ASK)],
            default_policy=agent_pb2.TOOL_POLICY_DENY,
        ),
        mcp_servers=[
            agent_pb2.McpServer(
                name="docs",
                stdio=agent_pb2.StdioMcpServer(command="docs-mcp", args=["--root", "/workspace"], env={"LEVEL": "2"}),
                enabled_tools=["search"],
            )
        ],
        skills=[agent_pb2.Skill(name="notes", files=[agent_pb2.SkillFile(path="SKILL.md", content=b"---\n")])],
        limits=agent_pb2.Limits(
            max_turns=7,
            max_cost_usd_per_turn=0.5,
            max_cost_usd_per_session=3.0,
            turn_timeout=duration_pb2.Duration(seconds=90),
        ),
    )
    config = AgentConfig.from_bytes(spec.SerializeToString())
    assert config == AgentConfig(
        system_prompt=SystemPrompt("You write release notes.", replace=True),
        tools=Tools(
            enabled=("Bash", "Read"),
            rules=(ToolRule("mcp__docs__*", ToolPolicy.ASK),),
            default_policy=ToolPolicy.DENY,
        ),
        mcp_servers=(
            McpServer(
                name="docs",
                stdio=StdioMcpServer("docs-mcp", ("--root", "/workspace"), {"LEVEL": "2"}),
                enabled_tools=("search",),
            ),
        ),
        skills=(Skill("notes", (SkillFile("SKILL.md", b"---\n"),)),),
        limits=Limits(7, 0.5, 3.0, timedelta(seconds=90).total_seconds()),
    )
    assert not config.is_default


def test_an_empty_spec_is_the_engines_defaults() -> None:
    # The spec's engine, model and permission mode travel beside it in StartRuntime.
    for spec in (agent_pb2.AgentSpec(), agent_pb2.AgentSpec(model="m-1", permission_mode="plan")):
        assert AgentConfig.from_proto(spec).is_default
    assert AgentConfig.from_bytes(b"") == AgentConfig()
    assert not AgentConfig.from_proto(agent_pb2.AgentSpec(system_prompt=agent_pb2.SystemPrompt(append=""))).is_default


def test_the_first_matching_rule_decides_else_the_default() -> None:
    tools = Tools(
        rules=(
            ToolRule("mcp__docs__search", ToolPolicy.ALLOW),
            ToolRule("mcp__docs__*", ToolPolicy.DENY),
            ToolRule("*Edit*", ToolPolicy.ASK),
        ),
        default_policy=ToolPolicy.UNSPECIFIED,
    )
    assert tools.policy_for("mcp__docs__search") is ToolPolicy.ALLOW
    assert tools.policy_for("mcp__docs__delete") is ToolPolicy.DENY
    assert tools.policy_for("NotebookEdit") is ToolPolicy.ASK and tools.policy_for("Edit") is ToolPolicy.ASK
    assert tools.policy_for("Bash") is ToolPolicy.UNSPECIFIED
    # Only `*` is special: a name with other glob or regex characters matches itself alone.
    assert ToolRule("a.c?", ToolPolicy.DENY).matches("a.c?") and not ToolRule("a.c?", ToolPolicy.DENY).matches("abcd")
    assert not ToolRule("mcp__docs__*", ToolPolicy.DENY).matches("mcp__docsearch__x")
