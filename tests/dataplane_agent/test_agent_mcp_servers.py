"""An agent's stdio MCP servers: the real CLI, in a real bubblewrap sandbox, starts the test server
(tests/support/mcp_server.py) inside the sandbox, the offline model calls its tools, and only the
tools the agent enabled can be used; a server the sandbox's own code names in `.mcp.json` is not
loaded. In a docker sandbox (whose image has no python3) the server is the CLI's own
`claude mcp serve`, mounted into the container like the CLI."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from dataplane_agent.engines.agent_config import (
    AgentConfig,
    McpServer,
    Skill,
    SkillFile,
    StdioMcpServer,
    ToolPolicy,
    ToolRule,
    Tools,
)
from dataplane_agent.engines.base import EngineConfig, EngineOutput, EngineSession
from dataplane_agent.engines.claude_code import BUNDLED_CLI, ClaudeCodeAdapter
from dataplane_agent.engines.mcp_servers import mcp_tool_refusal
from dataplane_agent.routes.model import ModelRoute
from dataplane_agent.sandboxes.base import AGENT_LABEL, SESSION_LABEL, Sandbox, SandboxSpec
from dataplane_agent.sandboxes.docker import DockerSandboxDriver
from dataplane_agent.sandboxes.docker_container import inner_program
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from tests.support.containers import Containers

pytestmark = pytest.mark.e2e

MCP_SERVER = Path(__file__).resolve().parents[1] / "support" / "mcp_server.py"
SERVER = McpServer(
    name="tools",
    stdio=StdioMcpServer(command="python3", args=("mcp_server.py",), env={"MCP_TEST_TAG": "from-the-agent"}),
    enabled_tools=("echo", "where"),
)


@pytest.fixture
def driver(sandbox_root: Path, bwrap: str) -> LocalSandboxDriver:
    if not BUNDLED_CLI.is_file():
        pytest.skip("claude-agent-sdk has no bundled CLI on this platform")
    if not Path("/usr/bin/python3").is_file():
        pytest.skip("the test MCP server needs /usr/bin/python3, which the local sandbox mounts")
    return LocalSandboxDriver(sandbox_root, bwrap=bwrap)


@pytest.fixture
async def sandbox(driver: LocalSandboxDriver, model_route: ModelRoute) -> Sandbox:
    sandbox = await driver.create(
        SandboxSpec(session_id="mcp-test", agent_id="agent-1", model_socket=model_route.socket)
    )
    # The server is the sandbox's own file, as an upload into the workspace would make it.
    shutil.copy(MCP_SERVER, sandbox.workspace / "mcp_server.py")
    return sandbox


async def _turn(engine: EngineSession, text: str) -> list[EngineOutput]:
    await engine.send(text)
    outputs = []
    async with asyncio.timeout(90):
        async for output in engine.outputs():
            outputs.append(output)
            if output.ends_turn:
                return outputs
    raise AssertionError("the engine ended before the turn did")


def _blocks(outputs: list[EngineOutput], type_name: str, block: str) -> list[dict]:
    return [
        b
        for o in outputs
        if o.type_name == type_name
        for b in o.payload["content"]
        if isinstance(b, dict) and b["type_name"] == block
    ]


def _calls(sandbox: Sandbox) -> list[str]:
    log = sandbox.workspace / "mcp-calls.log"
    return [json.loads(line)["tool"] for line in log.read_text().splitlines()] if log.exists() else []


async def test_an_agents_stdio_server_runs_in_the_sandbox_and_only_its_enabled_tools_can_be_called(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    # What the sandbox's own code could write: a project MCP server the CLI would otherwise load.
    planted = {"mcpServers": {"planted": {"type": "stdio", "command": "python3", "args": ["mcp_server.py"]}}}
    (sandbox.workspace / ".mcp.json").write_text(json.dumps(planted))
    config = EngineConfig(
        permission_mode="bypassPermissions",
        env=model_route.env("mcp-test"),
        # A policy allowing every tool of the server does not widen its enabled tools.
        agent_config=AgentConfig(
            mcp_servers=(SERVER,), tools=Tools(rules=(ToolRule("mcp__tools__*", ToolPolicy.ALLOW),))
        ),
    )
    engine = await ClaudeCodeAdapter().start(sandbox, driver, config)
    try:
        outputs = await _turn(engine, "tool: mcp__tools__where {}")

        init = next(o for o in outputs if o.type_name == "SystemMessage" and o.payload["subtype"] == "init")
        assert {"name": "tools", "status": "connected"}.items() <= init.payload["data"]["mcp_servers"][0].items()
        assert [s["name"] for s in init.payload["data"]["mcp_servers"]] == ["tools"]
        assert sorted(t for t in init.payload["data"]["tools"] if t.startswith("mcp__")) == [
            "mcp__tools__add",
            "mcp__tools__echo",
            "mcp__tools__search",
            "mcp__tools__where",
        ]
        # It ran inside the sandbox (its /workspace, not the host's directory), with the agent's env.
        (result,) = _blocks(outputs, "UserMessage", "ToolResultBlock")
        assert not result["is_error"]
        assert "cwd=/workspace uid=" in str(result["content"]) and "tag=from-the-agent" in str(result["content"])
        assert outputs[-1].payload["result"].startswith("mcp__tools__where returned: cwd=/workspace")
        assert _calls(sandbox) == ["where"]

        # `add` is the server's, but not among the agent's enabled tools: refused, never reaching it.
        outputs = await _turn(engine, 'tool: mcp__tools__add {"a": 2, "b": 3}')

        (result,) = _blocks(outputs, "UserMessage", "ToolResultBlock")
        assert result["is_error"] and "mcp__tools__add is not enabled for this agent" in str(result["content"])
        assert outputs[-1].payload["result"].startswith("The command was denied:")
        assert _calls(sandbox) == ["where"]

        outputs = await _turn(engine, 'tool: mcp__tools__echo {"text": "still here"}')

        assert outputs[-1].payload["result"] == "mcp__tools__echo returned: still here"
        assert _calls(sandbox) == ["where", "echo"]
    finally:
        await engine.close()


async def test_stdio_servers_that_do_not_start_are_reported_once_after_the_first_init_and_the_engine_goes_on(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    missing_file = McpServer("notes", StdioMcpServer(command="python3", args=("/workspace/not-uploaded-yet.py",)))
    missing_program = McpServer("nope", StdioMcpServer(command="no-such-program", args=("--stdio",)))
    config = EngineConfig(
        permission_mode="bypassPermissions",
        env=model_route.env("mcp-test"),
        agent_config=AgentConfig(mcp_servers=(missing_file, SERVER, missing_program)),
    )
    engine = await ClaudeCodeAdapter().start(sandbox, driver, config)
    try:
        outputs = await _turn(engine, 'tool: mcp__tools__echo {"text": "still works"}')

        init = next(i for i, o in enumerate(outputs) if o.type_name == "SystemMessage")
        statuses = {s["name"]: s["status"] for s in outputs[init].payload["data"]["mcp_servers"]}
        assert statuses == {"notes": "failed", "tools": "connected", "nope": "failed"}
        # Right after the init that said so, in the agent's order; never the server that runs.
        reports = [o.unavailable for o in outputs[init + 1 : init + 3]]
        assert [r.server for r in reports if r is not None] == ["notes", "nope"]
        assert [o for o in outputs if o.unavailable is not None and o.unavailable.server == "tools"] == []
        notes = reports[0]
        assert notes is not None and "`python3 /workspace/not-uploaded-yet.py`" in notes.reason
        assert "did not start in the sandbox" in notes.reason
        assert outputs[-1].payload["result"] == "mcp__tools__echo returned: still works"

        outputs = await _turn(engine, "hello again")

        assert [o for o in outputs if o.unavailable is not None] == []  # once per engine start
        assert outputs[-1].type_name == "ResultMessage" and not outputs[-1].payload["is_error"]
    finally:
        await engine.close()


async def test_in_a_docker_sandbox_the_server_runs_in_the_container_and_the_skill_is_listed(
    containers: Containers, sandbox_root: Path, model_route: ModelRoute
) -> None:
    if not BUNDLED_CLI.is_file():
        pytest.skip("claude-agent-sdk has no bundled CLI on this platform")
    driver = DockerSandboxDriver(
        sandbox_root, installation=containers.installation, agent_id="agent-1", programs=[BUNDLED_CLI]
    )
    labels = {SESSION_LABEL: "mcp-test", AGENT_LABEL: "agent-1"}
    sandbox = await driver.create(
        SandboxSpec(session_id="mcp-test", agent_id="agent-1", labels=labels, model_socket=model_route.socket)
    )
    serve = StdioMcpServer(command=inner_program(BUNDLED_CLI), args=("mcp", "serve"))
    skill = Skill("greet", (SkillFile("SKILL.md", b"---\nname: greet\ndescription: Greets warmly.\n---\nHi.\n"),))
    config = EngineConfig(
        permission_mode="bypassPermissions",
        env=model_route.env("mcp-test"),
        agent_config=AgentConfig(mcp_servers=(McpServer("cc", serve, enabled_tools=("Bash",)),), skills=(skill,)),
    )
    engine = await ClaudeCodeAdapter().start(sandbox, driver, config)
    try:
        outputs = await _turn(engine, 'tool: mcp__cc__Bash {"command": "pwd; hostname; echo made > by-mcp.txt"}')

        init = next(o for o in outputs if o.type_name == "SystemMessage" and o.payload["subtype"] == "init")
        assert "mcp__cc__Bash" in init.payload["data"]["tools"] and "greet" in init.payload["data"]["skills"]
        (result,) = _blocks(outputs, "UserMessage", "ToolResultBlock")
        # The container's directory and host name, not the host's.
        assert json.loads(result["content"][0]["text"])["stdout"].split() == ["/workspace", "astrabox"]
        assert (sandbox.workspace / "by-mcp.txt").read_text() == "made\n"

        outputs = await _turn(engine, 'tool: mcp__cc__Write {"file_path": "/workspace/w.txt", "content": "x"}')

        (result,) = _blocks(outputs, "UserMessage", "ToolResultBlock")
        assert result["is_error"] and "mcp__cc__Write is not enabled for this agent" in str(result["content"])
        assert not (sandbox.workspace / "w.txt").exists()
    finally:
        await engine.close()


def test_the_refusal_names_the_server_and_its_enabled_tools_and_lets_other_tools_be() -> None:
    other = McpServer(name="tools__x", stdio=SERVER.stdio, enabled_tools=("y",))
    everything = McpServer(name="open", stdio=SERVER.stdio)

    refusal = mcp_tool_refusal((SERVER, other, everything), "mcp__tools__add")

    assert refusal is not None and "'tools'" in refusal and "echo, where" in refusal
    assert mcp_tool_refusal((SERVER, other), "mcp__tools__echo") is None
    # The longest server name decides, should one start another.
    assert mcp_tool_refusal((SERVER, other), "mcp__tools__x__y") is None
    assert mcp_tool_refusal((SERVER, other), "mcp__tools__x__z") is not None
    assert mcp_tool_refusal((SERVER, everything), "mcp__open__anything") is None
    assert mcp_tool_refusal((SERVER,), "Bash") is None
