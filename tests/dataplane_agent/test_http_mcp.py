"""HTTP MCP servers reached by the agent (engines/http_mcp.py) with the secrets the session's
credentials give (`McpCredentials`: in the agent, `dataplane_agent.credentials.ResolvedCredentials`
asking the control plane's credential store, which tests/controlplane/test_credential_store.py
drives for real), against the real test server (tests/support/http_mcp_server.py) on loopback.

The in-process SDK server the engine would be given is driven here with the `mcp` package's own
client, as the CLI drives it through the SDK: its tools are the remote server's, and a call is
forwarded with the credential, asked for again at each call. A server that refuses, a credential
the project lacks, and a server gone between calls are each reported without the secret."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp.client.client import Client

from dataplane_agent.credentials import CredentialUnavailable
from dataplane_agent.engines.agent_config import AgentConfig, HttpMcpServer, McpServer, ToolPolicy, ToolRule, Tools
from dataplane_agent.engines.http_mcp import HttpMcpConnector, HttpMcpTimeouts
from dataplane_agent.engines.mcp_destinations import DestinationRefused, McpDestinations, parse_networks
from tests.support.processes import Process

SESSION = "0b5c8a52-6d1e-4a57-9f4e-2f3c1d9e8a70"


class StoreCredentials:
    """A project's credentials as the control plane gives them for one session: by credential name,
    every ask recorded (session, server, credential)."""

    def __init__(self, secrets: dict[str, str]) -> None:
        self.secrets = secrets
        self.asked: list[tuple[str, str, str]] = []

    async def mcp_secret(self, session_id: str, server: str, credential: str) -> str:
        self.asked.append((session_id, server, credential))
        if session_id != SESSION or credential not in self.secrets:
            raise CredentialUnavailable(f"the project holds no credential {credential!r}")
        return self.secrets[credential]


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
def credentials(secret: str) -> StoreCredentials:
    return StoreCredentials({"good": secret, "bad": "not-the-secret"})


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
    connector = HttpMcpConnector(credentials, destinations=LOOPBACK)

    connected = await connector.connect(_agent(_server("tickets", url)), SESSION)

    assert connected.unavailable == ()
    async with Client(connected.servers["tickets"]["instance"]) as engine_side:
        tools = await engine_side.list_tools()
        assert [tool.name for tool in tools.tools] == ["echo", "add", "search", "where"]
        assert tools.tools[1].input_schema["required"] == ["a", "b"]
        added = await engine_side.call_tool("add", {"a": 2, "b": 40})
        assert not added.is_error and added.content[0].text == "42"


async def test_only_tools_enabled_and_not_denied_are_offered_so_only_they_can_be_called(
    server, credentials, tmp_path: Path
) -> None:
    url, _ = server
    restricted = McpServer(
        name="tickets", http=HttpMcpServer(url=url, credential="good"), enabled_tools=("echo", "add")
    )
    denying = Tools(rules=(ToolRule("mcp__tickets__add", ToolPolicy.DENY),), default_policy=ToolPolicy.ALLOW)

    connected = await HttpMcpConnector(credentials, destinations=LOOPBACK).connect(
        _agent(restricted, tools=denying), SESSION
    )

    async with Client(connected.servers["tickets"]["instance"]) as engine_side:
        assert [tool.name for tool in (await engine_side.list_tools()).tools] == ["echo"]
        for tool, arguments in (("add", {"a": 1, "b": 2}), ("where", {})):
            refused = await engine_side.call_tool(tool, arguments)
            assert refused.is_error and "not found" in refused.content[0].text
    assert not (tmp_path / "served" / "mcp-calls.log").exists()


async def test_servers_that_cannot_be_used_are_reported_by_name_without_the_secret(server, credentials, secret) -> None:
    url, _ = server
    connector = HttpMcpConnector(credentials, HttpMcpTimeouts(connect=10, call=10), LOOPBACK)

    connected = await connector.connect(
        _agent(
            _server("ok", url),
            _server("wrong", url, credential="bad"),
            _server("header", url, header="X-Api-Key"),  # the secret, but not where the server wants it
            _server("unknown", url, credential="nobody"),
            _server("down", "http://127.0.0.1:9/mcp"),
        ),
        SESSION,
    )

    assert list(connected.servers) == ["ok"]
    reasons = {u.server: u.reason for u in connected.unavailable}
    assert list(reasons) == ["wrong", "header", "unknown", "down"]
    assert "refused the credential (HTTP 401)" in reasons["wrong"]
    assert "refused the credential (HTTP 401)" in reasons["header"]
    assert "its credential is not available: the project holds no credential 'nobody'" in reasons["unknown"]
    assert "could not be reached" in reasons["down"]
    assert not [reason for reason in reasons.values() if secret in reason]
    # Each server's own credential, asked for under the session (the unreachable one too: the
    # destination is checked first, then the secret, then the connection).
    assert sorted(credentials.asked) == sorted(
        (SESSION, name, credential)
        for name, credential in (
            ("ok", "good"),
            ("wrong", "bad"),
            ("header", "good"),
            ("unknown", "nobody"),
            ("down", "good"),
        )
    )


async def test_a_server_gone_after_the_start_is_an_error_result_the_model_reads(server, credentials, secret) -> None:
    url, process = server
    connected = await HttpMcpConnector(credentials, destinations=LOOPBACK).connect(
        _agent(_server("tickets", url)), SESSION
    )
    process.stop()

    async with Client(connected.servers["tickets"]["instance"]) as engine_side:
        result = await engine_side.call_tool("echo", {"text": "anyone?"})

    assert result.is_error
    text = result.content[0].text
    assert "The MCP server 'tickets' could not be called" in text and "could not be reached" in text
    assert secret not in text


async def test_the_credential_is_asked_for_at_each_call_so_a_rotated_one_is_sent_from_the_next(
    server, credentials, secret
) -> None:
    url, _ = server
    connected = await HttpMcpConnector(credentials, destinations=LOOPBACK).connect(
        _agent(_server("tickets", url)), SESSION
    )
    async with Client(connected.servers["tickets"]["instance"]) as engine_side:
        first = await engine_side.call_tool("echo", {"text": "one"})
        credentials.secrets["good"] = f"rotated-{uuid.uuid4().hex}"  # the server still wants the old one
        second = await engine_side.call_tool("echo", {"text": "two"})
        credentials.secrets["good"] = secret
        third = await engine_side.call_tool("echo", {"text": "three"})
        del credentials.secrets["good"]  # deleted from the store
        fourth = await engine_side.call_tool("echo", {"text": "four"})

    assert not first.is_error and not third.is_error
    assert second.is_error and "refused the credential (HTTP 401)" in second.content[0].text
    assert fourth.is_error and "the project holds no credential 'good'" in fourth.content[0].text
    assert [asked for asked in credentials.asked if asked[1] == "tickets"] == [(SESSION, "tickets", "good")] * 5
    assert secret not in second.content[0].text + fourth.content[0].text


def test_the_agent_refuses_the_credentials_directory_it_once_read_naming_the_store(tmp_path: Path) -> None:
    from dataplane_agent.settings import AgentSettings, RetiredSetting

    for argv, environ in (
        (["--credentials-dir", str(tmp_path)], {}),
        ([f"--credentials-dir={tmp_path}"], {}),
        ([], {"ASTRABOX_AGENT_CREDENTIALS_DIR": str(tmp_path)}),
    ):
        with pytest.raises(RetiredSetting) as refused:
            AgentSettings.from_args(["--state-dir", str(tmp_path / "state"), *argv], environ)
        assert "is no longer a setting" in str(refused.value)
        assert "`astrabox credentials put NAME`" in str(refused.value)
    assert AgentSettings.from_args(["--state-dir", str(tmp_path / "state")], {}).state_dir == tmp_path / "state"


async def test_a_server_on_a_network_the_operator_did_not_allow_is_left_out(server, credentials) -> None:
    """A definition cannot make the agent reach what only its host reaches: loopback, the private
    network, a cloud's metadata address."""
    url, _ = server
    connected = await HttpMcpConnector(credentials).connect(_agent(_server("tickets", url)), SESSION)
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
