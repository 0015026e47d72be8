"""HTTP MCP servers reached by the agent (engines/http_mcp.py) with credentials from its directory
(credentials.py), against the real test server (tests/support/http_mcp_server.py) on loopback.

The in-process SDK server the engine would be given is driven here with the `mcp` package's own
client, as the CLI drives it through the SDK: its tools are the remote server's, and a call is
forwarded with the credential. A server that refuses, a credential file others can read, and a
server gone between calls are each reported without the secret."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp.client.client import Client

from dataplane_agent.credentials import CredentialUnavailable, DirectoryCredentials
from dataplane_agent.engines.agent_config import AgentConfig, HttpMcpServer, McpServer, ToolPolicy, ToolRule, Tools
from dataplane_agent.engines.http_mcp import HttpMcpConnector, HttpMcpTimeouts
from dataplane_agent.engines.mcp_destinations import DestinationRefused, McpDestinations, parse_networks
from tests.support.processes import Process


@pytest.fixture
def secret() -> str:
    return f"mcp-secret-{uuid.uuid4().hex}"


@pytest.fixture
def server(tmp_path: Path, secret: str) -> Iterator[tuple[str, Process]]:
    served = tmp_path / "served"
    served.mkdir()
    process = Process(
        "http-mcp",
        [sys.executable, "-m", "tests.support.http_mcp_server"],
        tmp_path / "http-mcp.log",
        env={"MCP_TEST_SECRET": secret, "MCP_TEST_DIR": str(served)},
    )
    try:
        port = process.wait_for_line(r"listening on (\d+)").group(1)
        yield f"http://127.0.0.1:{port}/mcp", process
    finally:
        process.stop()


@pytest.fixture
def credentials(tmp_path: Path, secret: str) -> Path:
    directory = tmp_path / "credentials"
    directory.mkdir(mode=0o700)
    for name, value in (("good", secret), ("bad", "not-the-secret")):
        (directory / name).write_text(value + "\n")
        (directory / name).chmod(0o600)
    return directory


def _agent(*servers: McpServer, tools: Tools | None = None) -> AgentConfig:
    return AgentConfig(mcp_servers=servers, tools=tools or Tools())


# The test servers listen on loopback, which an agent reaches only when its operator allows it.
LOOPBACK = McpDestinations(parse_networks("127.0.0.0/8"))


def _server(name: str, url: str, credential: str = "good", header: str = "") -> McpServer:
    return McpServer(name=name, http=HttpMcpServer(url=url, credential=credential, header=header))


async def test_the_servers_tools_are_offered_and_a_call_is_forwarded_with_the_credential(
    server, credentials, secret
) -> None:
    url, _ = server
    connector = HttpMcpConnector(DirectoryCredentials(credentials), destinations=LOOPBACK)

    connected = await connector.connect(_agent(_server("tickets", url)))

    assert connected.unavailable == ()
    async with Client(connected.servers["tickets"]["instance"]) as engine_side:
        tools = await engine_side.list_tools()
        assert [tool.name for tool in tools.tools] == ["echo", "add", "where"]
        assert tools.tools[1].input_schema["required"] == ["a", "b"]
        added = await engine_side.call_tool("add", {"a": 2, "b": 40})
        assert not added.is_error and added.content[0].text == "42"


async def test_only_tools_enabled_and_not_denied_are_offered_so_only_they_can_be_called(server, credentials) -> None:
    url, _ = server
    restricted = McpServer(
        name="tickets", http=HttpMcpServer(url=url, credential="good"), enabled_tools=("echo", "add")
    )
    denying = Tools(rules=(ToolRule("mcp__tickets__add", ToolPolicy.DENY),), default_policy=ToolPolicy.ALLOW)

    connected = await HttpMcpConnector(DirectoryCredentials(credentials), destinations=LOOPBACK).connect(
        _agent(restricted, tools=denying)
    )

    async with Client(connected.servers["tickets"]["instance"]) as engine_side:
        assert [tool.name for tool in (await engine_side.list_tools()).tools] == ["echo"]
        for tool, arguments in (("add", {"a": 1, "b": 2}), ("where", {})):
            refused = await engine_side.call_tool(tool, arguments)
            assert refused.is_error and "not found" in refused.content[0].text
    assert not (credentials.parent / "served" / "mcp-calls.log").exists()


async def test_servers_that_cannot_be_used_are_reported_by_name_without_the_secret(server, credentials, secret) -> None:
    url, _ = server
    (credentials / "open").write_text(secret)
    (credentials / "open").chmod(0o644)
    connector = HttpMcpConnector(DirectoryCredentials(credentials), HttpMcpTimeouts(connect=10, call=10), LOOPBACK)

    connected = await connector.connect(
        _agent(
            _server("ok", url),
            _server("wrong", url, credential="bad"),
            _server("header", url, header="X-Api-Key"),  # the secret, but not where the server wants it
            _server("unknown", url, credential="nobody"),
            _server("readable", url, credential="open"),
            _server("down", "http://127.0.0.1:9/mcp"),
        )
    )

    assert list(connected.servers) == ["ok"]
    reasons = {u.server: u.reason for u in connected.unavailable}
    assert list(reasons) == ["wrong", "header", "unknown", "readable", "down"]
    assert "refused the credential (HTTP 401)" in reasons["wrong"]
    assert "refused the credential (HTTP 401)" in reasons["header"]
    assert "no credential 'nobody'" in reasons["unknown"]
    assert "may be read by others (mode 644" in reasons["readable"]
    assert "could not be reached" in reasons["down"]
    assert not [reason for reason in reasons.values() if secret in reason]


async def test_a_server_gone_after_the_start_is_an_error_result_the_model_reads(server, credentials, secret) -> None:
    url, process = server
    connected = await HttpMcpConnector(DirectoryCredentials(credentials), destinations=LOOPBACK).connect(
        _agent(_server("tickets", url))
    )
    process.stop()

    async with Client(connected.servers["tickets"]["instance"]) as engine_side:
        result = await engine_side.call_tool("echo", {"text": "anyone?"})

    assert result.is_error
    text = result.content[0].text
    assert "The MCP server 'tickets' could not be called" in text and "could not be reached" in text
    assert secret not in text


def test_a_credential_is_read_only_from_a_private_file_of_the_agents_user(tmp_path: Path, secret: str) -> None:
    directory = tmp_path / "credentials"
    directory.mkdir(mode=0o700)
    (directory / "token").write_text(secret + "\n")
    (directory / "token").chmod(0o600)
    (tmp_path / "elsewhere").write_text("planted")
    (directory / "link").symlink_to(tmp_path / "elsewhere")
    store = DirectoryCredentials(directory)

    assert store.resolve("token") == secret
    for name, says in (
        ("link", "cannot be read"),
        ("../elsewhere", "not a credential's name"),
        ("none", "no credential"),
    ):
        with pytest.raises(CredentialUnavailable, match=says):
            store.resolve(name)
    directory.chmod(0o755)
    with pytest.raises(CredentialUnavailable, match=r"directory .* may be read by others"):
        store.resolve("token")


async def test_a_server_on_a_network_the_operator_did_not_allow_is_left_out(server, credentials) -> None:
    """A definition cannot make the agent reach what only its host reaches: loopback, the private
    network, a cloud's metadata address."""
    url, _ = server
    connected = await HttpMcpConnector(DirectoryCredentials(credentials)).connect(_agent(_server("tickets", url)))
    assert connected.servers == {}
    [left_out] = connected.unavailable
    assert left_out.server == "tickets" and "loopback address" in left_out.reason
    assert "--mcp-allowed-networks" in left_out.reason
    default = McpDestinations()
    for target in ("http://169.254.169.254/latest/meta-data/", "http://10.1.2.3/mcp", "http://[::1]:80/mcp"):
        with pytest.raises(DestinationRefused):
            await default.check(target)
    await default.check("https://93.184.216.34/mcp")  # a public address needs no allowance
    await McpDestinations(parse_networks("10.0.0.0/8")).check("http://10.1.2.3/mcp")
    with pytest.raises(ValueError, match="not a network"):
        parse_networks("10.0.0.0/8, intranet")
