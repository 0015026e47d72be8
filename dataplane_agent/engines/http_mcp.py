"""An agent's HTTP MCP servers, reached by the data-plane agent on the engine's behalf: the sandbox
has no network, and the server's credential must never be in it.

At each engine start, for each HTTP server of the session's agent, the agent asks for the secret of
the credential the server names (a credential of the project's encrypted store, given by the
control plane for the session: `McpCredentials`, `dataplane_agent.credentials`), connects with the
`mcp` package's Streamable HTTP client, the secret in a header (`Authorization: Bearer <secret>`,
or the raw secret in the header the definition names), and lists the server's tools. It then offers those tools to the
engine as an in-process SDK MCP server of the same name (`create_sdk_mcp_server`): the CLI in the
sandbox sees `mcp__<name>__<tool>` like any other MCP tool, and asks the SDK, over its control
channel, to call one; the agent makes the call on a connection of its own, adding the credential.
So the secret stays in the agent's process: not in the CLI's environment, command line or
`--mcp-config`, not in a file of the sandbox. `enabled_tools` and the agent's tool policies apply
to these tools as to a stdio server's (mcp_servers.py, claude_options.py: PreToolUse hooks by name),
and more firmly: the CLI, which enforces those hooks, runs in the sandbox, so a tool left out of
`enabled_tools` or denied by a policy is not offered by the in-process server at all, and cannot be
called with the credential whatever the sandbox's code does. (`ask` is the CLI's to hold.)

Every call opens its own short connection (initialize, call, close) and asks for the secret again:
no session to keep alive or lose between turns, and a rotated credential is sent from the next
call on. Every wait is bounded
(`HttpMcpTimeouts`). A server that cannot be reached, answers 401/403, or whose credential this
session's project does not hold, when the engine starts, is left out: the engine starts without it, and the
session's runtime reports it (McpServerUnavailable, journaled as MCP_SERVER_UNAVAILABLE) with the
server's name. A call that fails later is an error result the model reads. No reason, log line or
result carries the secret: every message passes through a redactor that blanks it. A server whose
host is not public (loopback, private, link-local such as a cloud's metadata address) is reached
only inside the networks the operator allows (`mcp_destinations.py`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import httpx2
import structlog
from claude_agent_sdk import McpSdkServerConfig, SdkMcpTool, create_sdk_mcp_server
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from dataplane_agent.credentials import CredentialUnavailable
from dataplane_agent.engines.agent_config import AgentConfig, HttpMcpServer, McpServer, ToolPolicy, Tools
from dataplane_agent.engines.base import McpUnavailable
from dataplane_agent.engines.mcp_destinations import DestinationRefused, McpDestinations
from dataplane_agent.engines.mcp_servers import cli_tool_name

log = structlog.get_logger(__name__)
_T = TypeVar("_T")

AUTHORIZATION = "Authorization"
# At most this many pages of tools/list, and tools, are taken from one server.
_MAX_PAGES = 16
_MAX_TOOLS = 512
_MAX_REASON = 512
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class HttpMcpTimeouts:
    """Seconds allowed for reaching a server and listing its tools, and for one tool call."""

    connect: float = 15.0
    call: float = 120.0


@dataclass(frozen=True, slots=True)
class HttpMcpServers:
    """What connecting an agent's HTTP servers gave: the SDK servers to offer, and those left out."""

    servers: dict[str, McpSdkServerConfig]
    unavailable: tuple[McpUnavailable, ...] = ()


class McpCredentials(Protocol):
    """Where an HTTP MCP server's secret comes from (`dataplane_agent.credentials.ResolvedCredentials`)."""

    async def mcp_secret(self, session_id: str, server: str, credential: str) -> str:
        """The secret of `credential`, named by the session's server `server`, as it is now;
        CredentialUnavailable, saying why without a secret, when it cannot be had."""


class NoMcpCredentials:
    """An agent with no way to credentials: every server naming one is left out."""

    async def mcp_secret(self, session_id: str, server: str, credential: str) -> str:
        raise CredentialUnavailable(f"this agent has no way to its sessions' credentials (so not {credential[:64]!r})")


class HttpMcpConnector:
    """Connects a session's HTTP MCP servers for its engine (see the module docstring)."""

    def __init__(
        self,
        credentials: McpCredentials | None = None,
        timeouts: HttpMcpTimeouts | None = None,
        destinations: McpDestinations | None = None,
    ) -> None:
        self._credentials = credentials if credentials is not None else NoMcpCredentials()
        self._timeouts = timeouts or HttpMcpTimeouts()
        self._destinations = destinations or McpDestinations()

    async def connect(self, config: AgentConfig, session_id: str) -> HttpMcpServers:
        """The SDK servers of the agent's HTTP servers that could be reached, their credentials the
        session's; the others, unavailable."""
        http = [server for server in config.mcp_servers if server.http is not None]
        if not http:
            return HttpMcpServers({})
        results = await asyncio.gather(*(self._connect_one(server, config.tools, session_id) for server in http))
        offered = {name: config for name, config in results if isinstance(config, dict)}
        unavailable = tuple(result for _, result in results if isinstance(result, McpUnavailable))
        return HttpMcpServers(offered, unavailable)

    async def _connect_one(
        self, server: McpServer, policies: Tools, session_id: str
    ) -> tuple[str, McpSdkServerConfig | McpUnavailable]:
        assert server.http is not None
        remote = _Remote(server.name, server.http, self._secret(session_id, server), self._timeouts, self._destinations)
        try:
            async with asyncio.timeout(self._timeouts.connect):
                tools = await remote.list_tools()
        except TimeoutError:
            return server.name, self._left_out(
                server.name, f"{remote.url} did not answer within {self._timeouts.connect:.0f}s"
            )
        except RemoteFailed as failed:  # the session goes on without the server
            return server.name, self._left_out(server.name, str(failed))
        offered = [tool for tool in tools if _offered(server, policies, str(tool.name))]
        log.info("http_mcp_server_connected", server=server.name, tools=len(tools), offered=len(offered))
        sdk_tools = [_sdk_tool(remote, tool, self._timeouts.call) for tool in offered]
        return server.name, create_sdk_mcp_server(server.name, tools=sdk_tools)

    def _secret(self, session_id: str, server: McpServer) -> Callable[[], Awaitable[str]]:
        """How the server's secret is had at each use ("" for a server naming no credential)."""
        assert server.http is not None
        credential = server.http.credential

        async def secret() -> str:
            if not credential:
                return ""
            return await self._credentials.mcp_secret(session_id, server.name, credential)

        return secret

    @staticmethod
    def _left_out(name: str, reason: str) -> McpUnavailable:
        reason = _CONTROL.sub(" ", reason)[:_MAX_REASON]
        log.warning("http_mcp_server_unavailable", server=name, reason=reason)
        return McpUnavailable(name, reason)


class RemoteFailed(Exception):
    """A server could not be used; the message says why, the secret blanked out."""


class _Remote:
    """One HTTP MCP server and how its secret is had: connections that carry it, messages that never do."""

    def __init__(
        self,
        name: str,
        http: HttpMcpServer,
        secret: Callable[[], Awaitable[str]],
        timeouts: HttpMcpTimeouts,
        destinations: McpDestinations,
    ) -> None:
        self.name = name
        self.url = http.url
        self._destinations = destinations
        # Each HTTP exchange within the longest wait (the caller bounds the whole with its own).
        self._http_timeout = httpx2.Timeout(max(timeouts.call, timeouts.connect), connect=timeouts.connect)
        self._secret = secret
        self._header = http.header or AUTHORIZATION

    async def list_tools(self) -> list[Any]:
        """The server's tools (RemoteFailed if it cannot be used)."""

        async def listing(client: Client) -> list[Any]:
            tools: list[Any] = []
            cursor: str | None = None
            for _page in range(_MAX_PAGES):
                listed = await client.list_tools(cursor=cursor)
                tools.extend(listed.tools)
                cursor = listed.next_cursor
                if not cursor or len(tools) >= _MAX_TOOLS:
                    break
            return tools[:_MAX_TOOLS]

        return await self._using(listing)

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        """The server's CallToolResult (RemoteFailed if it cannot be used)."""

        async def calling(client: Client) -> Any:
            return await client.call_tool(tool, arguments)

        return await self._using(calling)

    async def _using(self, use: Callable[[Client], Awaitable[_T]]) -> _T:
        """`use` on a connection of its own, which carries the credential."""
        refusals: list[int] = []

        async def note_refusal(response: httpx2.Response) -> None:
            if response.status_code in (401, 403):
                refusals.append(response.status_code)

        try:
            await self._destinations.check(self.url)
        except DestinationRefused as refused:
            raise RemoteFailed(str(refused)) from None
        try:
            secret = await self._secret()
        except CredentialUnavailable as unavailable:
            raise RemoteFailed(f"its credential is not available: {unavailable}") from None
        header = self._header
        headers = {header: f"Bearer {secret}" if header.lower() == "authorization" else secret} if secret else {}
        try:
            async with httpx2.AsyncClient(
                headers=headers,
                timeout=self._http_timeout,
                follow_redirects=False,
                event_hooks={"response": [note_refusal]},
            ) as http_client:
                transport = streamable_http_client(self.url, http_client=http_client)
                async with Client(transport, mode="legacy", cache=None) as client:
                    return await use(client)
        except Exception as error:
            if refusals:
                raise RemoteFailed(f"{self.url} refused the credential (HTTP {refusals[-1]})") from None
            cause = _innermost(error)
            what = "could not be reached" if isinstance(cause, httpx2.TransportError) else "failed"
            raise RemoteFailed(_redacted(f"{self.url} {what}: {_describe(cause)}", secret)) from None


def _redacted(text: str, secret: str) -> str:
    return text.replace(secret, "[redacted]") if len(secret) >= 4 else text


def _offered(server: McpServer, policies: Tools, tool: str) -> bool:
    """Whether the engine is given `tool` at all: enabled, and not denied by the agent's policies.
    The hooks in the CLI refuse the others too, but the CLI runs in the sandbox; what is not
    offered here cannot be called with the credential whatever the sandbox does."""
    if server.enabled_tools and tool not in server.enabled_tools:
        return False
    return policies.policy_for(cli_tool_name(server.name, tool)) is not ToolPolicy.DENY


def _sdk_tool(remote: _Remote, tool: Any, call_timeout: float) -> SdkMcpTool[Any]:
    """The remote tool as the in-process server offers it: its name, description and input schema;
    each call forwarded to the server."""
    schema = dict(tool.input_schema or {})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})

    async def forward(arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            async with asyncio.timeout(call_timeout):
                result = await remote.call(tool.name, arguments)
        except TimeoutError:
            return _error(f"The MCP server {remote.name!r} did not answer within {call_timeout:.0f}s.")
        except RemoteFailed as failed:  # the model reads what went wrong; the turn goes on
            log.warning("http_mcp_call_failed", server=remote.name, tool=tool.name, error=str(failed))
            return _error(f"The MCP server {remote.name!r} could not be called: {failed}")
        content = [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content]
        return {"content": content, "is_error": bool(result.is_error)}

    return SdkMcpTool(name=tool.name, description=tool.description or "", input_schema=schema, handler=forward)


def _error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "is_error": True}


def _innermost(error: BaseException) -> BaseException:
    """The first leaf of an exception group (anyio's task groups wrap the transport's error)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _describe(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
