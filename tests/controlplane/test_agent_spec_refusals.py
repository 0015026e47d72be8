"""AgentService refuses a bad definition or name naming the field, and stores nothing: a corpus of
bad agent specs, each checked on create and on update, through a real control plane on a real
PostgreSQL (fixtures: tests/controlplane/test_agent_definitions.py)."""

from __future__ import annotations

import uuid

import grpc
import pytest

from astrabox.agents.v1 import agent_pb2 as apb
from astrabox.agents.v1 import agent_service_pb2 as pb
from tests.controlplane.test_agent_definitions import SKILL, reviewer, stored
from tests.controlplane.test_agent_definitions import callers as callers
from tests.controlplane.test_agent_definitions import running as running


def _with(change) -> apb.AgentSpec:
    spec = reviewer()
    change(spec)
    return spec


BAD_SPECS = {
    "unknown enabled tool": (
        lambda s: s.tools.enabled.append("Bsh"),
        "spec.tools.enabled[3]",
        "unknown tool 'Bsh' for claude_code; its built-in tools: AskUserQuestion, Bash,",
    ),
    "unknown tool in a rule": (
        lambda s: s.tools.rules.append(apb.ToolRule(tool="Shell", policy=apb.TOOL_POLICY_DENY)),
        "spec.tools.rules[3].tool",
        "unknown tool 'Shell'",
    ),
    "unknown permission mode": (
        lambda s: setattr(s, "permission_mode", "yolo"),
        "spec.permission_mode",
        "valid: default, acceptEdits, plan, bypassPermissions",
    ),
    "unknown engine": (lambda s: setattr(s, "engine", "vim"), "spec.engine", "agents run: claude_code"),
    "rule without a policy": (
        lambda s: s.tools.rules.append(apb.ToolRule(tool="Write")),
        "spec.tools.rules[3].policy",
        "TOOL_POLICY_ALLOW, TOOL_POLICY_ASK, TOOL_POLICY_DENY",
    ),
    "skill without SKILL.md": (lambda s: s.skills[0].files.pop(0), "spec.skills[0].files", "must include SKILL.md"),
    "skill path climbing out": (
        lambda s: s.skills[0].files.append(apb.SkillFile(path="../../etc/passwd", content=b"x")),
        "spec.skills[0].files[2].path",
        "relative path inside the skill's directory",
    ),
    "absolute skill path": (
        lambda s: s.skills[0].files.append(apb.SkillFile(path="/etc/profile", content=b"x")),
        "spec.skills[0].files[2].path",
        "no leading '/'",
    ),
    "NUL in a skill path": (
        lambda s: s.skills[0].files.append(apb.SkillFile(path="a\x00b", content=b"x")),
        "spec.skills[0].files[2].path",
        "control characters",
    ),
    "skill file that is also a directory": (
        lambda s: s.skills[0].files.append(apb.SkillFile(path="scripts", content=b"x")),
        "spec.skills[0].files[2].path",
        "a file and a directory",
    ),
    "bad skill name": (lambda s: setattr(s.skills[0], "name", "Release Notes"), "spec.skills[0].name", "[a-z0-9-]"),
    "duplicate skill": (lambda s: s.skills.append(SKILL), "spec.skills[1]", "the skill name 'release-notes'"),
    "duplicate MCP server": (
        lambda s: s.mcp_servers.append(apb.McpServer(name="docs", stdio=apb.StdioMcpServer(command="other"))),
        "spec.mcp_servers[1]",
        "the MCP server name 'docs' appears twice",
    ),
    "bad MCP server name": (
        lambda s: setattr(s.mcp_servers[0], "name", "docs server"),
        "spec.mcp_servers[0].name",
        "[a-z0-9_-]",
    ),
    "MCP server without a transport": (
        lambda s: s.mcp_servers.append(apb.McpServer(name="bare")),
        "spec.mcp_servers[1].stdio",
        "set stdio or http",
    ),
    "HTTP MCP server with a file URL": (
        lambda s: s.mcp_servers.append(apb.McpServer(name="web", http=apb.HttpMcpServer(url="file:///etc/passwd"))),
        "spec.mcp_servers[1].http.url",
        "an http or https URL with a host",
    ),
    "HTTP MCP server with a secret in its URL": (
        lambda s: s.mcp_servers.append(
            apb.McpServer(name="web", http=apb.HttpMcpServer(url="https://bob:hunter2-secret@mcp.example/mcp"))
        ),
        "spec.mcp_servers[1].http.url",
        "must not carry user information",
    ),
    "HTTP MCP server with a URL too long": (
        lambda s: s.mcp_servers.append(
            apb.McpServer(name="web", http=apb.HttpMcpServer(url="https://mcp.example/" + "a" * 2048))
        ),
        "spec.mcp_servers[1].http.url",
        "at most 2048 bytes",
    ),
    "HTTP MCP credential that is not a name": (
        lambda s: s.mcp_servers.append(
            apb.McpServer(name="web", http=apb.HttpMcpServer(url="https://mcp.example/mcp", credential="../etc/shadow"))
        ),
        "spec.mcp_servers[1].http.credential",
        "[A-Za-z0-9_.-]",
    ),
    "HTTP MCP header that is not a header name": (
        lambda s: s.mcp_servers.append(
            apb.McpServer(
                name="web", http=apb.HttpMcpServer(url="https://mcp.example/mcp", header="X-Key: injected\r\n")
            )
        ),
        "spec.mcp_servers[1].http.header",
        "an HTTP header name",
    ),
    "bad MCP env name": (
        lambda s: s.mcp_servers[0].stdio.env.update({"BAD NAME": "x"}),
        "spec.mcp_servers[0].stdio.env",
        "environment variable names",
    ),
    "system prompt set but empty": (
        lambda s: s.system_prompt.ClearField("append"),
        "spec.system_prompt",
        "append or replace",
    ),
    "description too long": (lambda s: setattr(s, "description", "d" * 1025), "spec.description", "at most 1024"),
    "negative max turns": (lambda s: setattr(s.limits, "max_turns", -1), "spec.limits.max_turns", "0 (no limit)"),
    "NaN cost": (
        lambda s: setattr(s.limits, "max_cost_usd_per_session", float("nan")),
        "spec.limits.max_cost_usd_per_session",
        "positive amount",
    ),
    "a cost per turn, which nothing could hold": (
        lambda s: setattr(s.limits, "max_cost_usd_per_turn", 0.5),
        "spec.limits.max_cost_usd_per_turn",
        "not supported yet",
    ),
    "bad model": (lambda s: setattr(s, "model", "opus 4"), "spec.model", "[A-Za-z0-9._:/@+[]-]"),
    "custom tool schema not JSON": (
        lambda s: s.custom_tools.append(apb.CustomTool(name="lookup", input_schema_json="{type: object")),
        "spec.custom_tools[1].input_schema_json",
        "must be a JSON Schema",
    ),
    "custom tool schema not an object schema": (
        lambda s: s.custom_tools.append(apb.CustomTool(name="lookup", input_schema_json='{"type": "string"}')),
        "spec.custom_tools[1].input_schema_json",
        '"type": "object"',
    ),
    "custom tool schema invalid": (
        lambda s: s.custom_tools.append(
            apb.CustomTool(name="lookup", input_schema_json='{"type": "object", "properties": {"id": {"type": 7}}}')
        ),
        "spec.custom_tools[1].input_schema_json",
        "not a valid JSON Schema at 'properties/id/type'",
    ),
    "custom tool schema nested too deep": (
        lambda s: s.custom_tools.append(apb.CustomTool(name="lookup", input_schema_json="[" * 60_000)),
        "spec.custom_tools[1].input_schema_json",
        "nested too deeply",
    ),
    "bad custom tool name": (
        lambda s: s.custom_tools.append(apb.CustomTool(name="look-up", input_schema_json='{"type": "object"}')),
        "spec.custom_tools[1].name",
        "[a-z0-9_]",
    ),
    "duplicate custom tool": (
        lambda s: s.custom_tools.extend([apb.CustomTool(name="lookup", input_schema_json='{"type": "object"}')] * 2),
        "spec.custom_tools[2]",
        "the custom tool name 'lookup' appears twice",
    ),
    "too many custom tools": (
        lambda s: s.custom_tools.extend(
            apb.CustomTool(name=f"t{i}", input_schema_json='{"type": "object"}') for i in range(33)
        ),
        "spec.custom_tools",
        "at most 32 entries",
    ),
    "custom tool description too long": (
        lambda s: s.custom_tools.append(
            apb.CustomTool(name="lookup", description="d" * 4097, input_schema_json='{"type": "object"}')
        ),
        "spec.custom_tools[1].description",
        "at most 4096",
    ),
    "MCP server named like the custom tools' server": (
        lambda s: (
            s.mcp_servers.append(apb.McpServer(name="client", stdio=apb.StdioMcpServer(command="x"))),
            s.custom_tools.append(apb.CustomTool(name="lookup", input_schema_json='{"type": "object"}')),
        ),
        "spec.mcp_servers[1].name",
        "serves them as the MCP server 'client'",
    ),
    "bad sub-agent name": (
        lambda s: s.subagents.append(apb.SubAgent(agent="Re_viewer")),
        "spec.subagents[0].agent",
        "an agent's name",
    ),
    "negative sub-agent version": (
        lambda s: s.subagents.append(apb.SubAgent(agent="reviewer", version=-1)),
        "spec.subagents[0].version",
        "0 (the newest) or a version",
    ),
    "duplicate sub-agent": (
        lambda s: s.subagents.extend([apb.SubAgent(agent="reviewer")] * 2),
        "spec.subagents[1]",
        "the sub-agent 'reviewer' appears twice",
    ),
    "too many sub-agents": (
        lambda s: s.subagents.extend(apb.SubAgent(agent=f"a{i}") for i in range(17)),
        "spec.subagents",
        "at most 16 entries",
    ),
    "MCP server named like the sub-agents' server": (
        lambda s: (
            s.mcp_servers.append(apb.McpServer(name="subagents", stdio=apb.StdioMcpServer(command="x"))),
            s.subagents.append(apb.SubAgent(agent="reviewer")),
        ),
        "spec.mcp_servers[1].name",
        "offers them as the MCP server 'subagents'",
    ),
    "too large": (
        lambda s: s.skills[0].files.extend(apb.SkillFile(path=f"big-{i}", content=b"x" * 300_000) for i in range(4)),
        "spec",
        "at most 1048576 bytes in all",
    ),
}


@pytest.mark.parametrize("case", BAD_SPECS)
async def test_a_bad_definition_is_refused_naming_its_field_and_nothing_is_stored(running, callers, case) -> None:
    change, field, says = BAD_SPECS[case]
    spec = _with(change)
    refused = await callers.developer.refused(
        "CreateAgent", pb.CreateAgentRequest(request_id="bad", name="reviewer", spec=spec)
    )
    assert (refused.code, refused.reason, refused.field) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_AGENT_SPEC",
        field,
    ), refused
    assert says in refused.message and len(refused.message) < 600
    assert await stored(running) == (0, 0)

    # The same definition as an update: refused alike, and the agent keeps its one version.
    await callers.developer.CreateAgent(pb.CreateAgentRequest(request_id="good", name="reviewer", spec=reviewer()))
    again = await callers.developer.refused("UpdateAgent", pb.UpdateAgentRequest(agent="reviewer", spec=spec))
    assert (again.reason, again.field) == ("INVALID_AGENT_SPEC", field)
    assert await stored(running) == (1, 1)


@pytest.mark.parametrize("name", ["", "Reviewer", "1st", "code_review", "a" * 65, str(uuid.uuid4()), "a" * 32])
async def test_a_bad_name_is_refused(running, callers, name) -> None:
    refused = await callers.developer.refused(
        "CreateAgent", pb.CreateAgentRequest(request_id="n", name=name, spec=reviewer())
    )
    assert (refused.code, refused.field) == (grpc.StatusCode.INVALID_ARGUMENT, "name")
    assert "[a-z0-9-]" in refused.message
    assert await stored(running) == (0, 0)
