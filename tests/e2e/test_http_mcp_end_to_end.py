"""An agent's HTTP MCP servers end to end: separate processes, an agent defined through AgentService,
the real bundled CLI in the local sandbox (which has no network), and a real HTTP MCP server on
loopback (tests/support/http_mcp_server.py) requiring a bearer credential.

The credential is put in the project's encrypted credential store (`client.credentials.put`); the
data-plane agent the session is placed on gets it from the control plane (ResolveCredentials),
connects to the server itself and offers its tools to the engine: the model calls one and the
result is journaled. The secret appears nowhere the sandbox, a client or an operator's log could
show it: not in the sandbox's files, not in any file of the agent's host, not in any process's
environment or command line but the server's own, not in the journal, not in the control plane's or
the agent's logs. A tool left out of the server's `enabled_tools` is not offered to the engine at
all. Three servers that cannot be used (the wrong credential, a credential the project does not
hold, an address nobody listens on) are each an MCP_SERVER_UNAVAILABLE event naming the server, and
the turn completes all the same."""

from __future__ import annotations

import base64
import json
import os
import socket
import sys
import uuid
from pathlib import Path

import grpc
import pytest

from astrabox.agents.v1 import agent_pb2 as apb
from astrabox.agents.v1 import agent_service_pb2 as aspb
from astrabox.agents.v1 import agent_service_pb2_grpc
from astrabox.client import AstraBoxClient
from tests.e2e.test_agent_mcp_skills_end_to_end import _tool_results
from tests.e2e.test_session_end_to_end import collect_turn, engine_messages
from tests.support.auth import metadata
from tests.support.processes import Process

pytestmark = pytest.mark.e2e


def _free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _spec(port: int) -> apb.AgentSpec:
    url = f"http://127.0.0.1:{port}/mcp"

    def http(name: str, credential: str, at: str = url) -> apb.McpServer:
        return apb.McpServer(name=name, http=apb.HttpMcpServer(url=at, credential=credential))

    tickets = http("tickets", "tickets.token")
    tickets.enabled_tools.extend(["echo", "where"])
    return apb.AgentSpec(
        description="Uses HTTP MCP servers",
        mcp_servers=[
            tickets,
            http("refused", "wrong.token"),
            http("nocred", "nobody.token"),
            http("gone", "tickets.token", at=f"http://127.0.0.1:{_free_port()}/mcp"),
        ],
    )


def _processes_showing(secret: bytes, but: int) -> dict[int, str]:
    """Every process (but `but`) whose environment or command line holds `secret`."""
    shown = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == but:
            continue
        for part in ("environ", "cmdline"):
            try:
                if secret in (entry / part).read_bytes():
                    shown[int(entry.name)] = part
            except OSError:  # gone meanwhile, or not ours to read
                continue
    return shown


def _files_holding(root: Path, secret: bytes) -> list[Path]:
    holding = []
    for directory, _, files in os.walk(root):
        for name in files:
            path = Path(directory, name)
            try:
                if not path.is_symlink() and path.is_file() and secret in path.read_bytes():
                    holding.append(path)
            except OSError:
                continue
    return holding


async def test_an_http_mcp_server_is_called_through_the_agent_and_its_credential_is_nowhere_else(
    stacks, tmp_path: Path
) -> None:
    secret = f"mcp-secret-{uuid.uuid4().hex}"
    served = tmp_path / "server"
    served.mkdir()
    server = Process(
        "http-mcp",
        [sys.executable, "-m", "tests.support.http_mcp_server"],
        tmp_path / "http-mcp.log",
        env={"MCP_TEST_SECRET": secret, "MCP_TEST_DIR": str(served)},
    )
    try:
        port = int(server.wait_for_line(r"listening on (\d+)").group(1))
        key = tmp_path / "credential-key"
        key.write_text(base64.b64encode(os.urandom(32)).decode())
        key.chmod(0o600)
        stack = stacks(
            controlplane_args=("--credential-key-file", str(key)), args=("--mcp-allowed-networks", "127.0.0.0/8")
        )
        async with AstraBoxClient.connect(stack.address) as client:
            await client.credentials.put("tickets.token", secret)
            await client.credentials.put("wrong.token", f"wrong-{uuid.uuid4().hex}")

        async with grpc.aio.insecure_channel(stack.address) as channel:
            agents = agent_service_pb2_grpc.AgentServiceStub(channel)  # type: ignore[no-untyped-call]
            await agents.CreateAgent(
                aspb.CreateAgentRequest(request_id="http-agent-1", name="http-agent", spec=_spec(port)),
                metadata=metadata(),
            )
        async with AstraBoxClient.connect(stack.address) as client:
            session = await client.create_session(request_id="http-session", agent="http-agent")
            await client.wait_for_state(session.session_id, ["READY"], timeout=120)
            accepted = await client.send_message(
                session.session_id, 'tool: mcp__tickets__echo {"text": "hello over http"}', client_message_id="m1"
            )
            events = await collect_turn(client, session.session_id, accepted.turn_id)
            journal = [event async for event in client.iter_events(session.session_id)]

            # The turn completed; the model saw the server's tools and its call's result.
            assert events[-1].WhichOneof("payload") == "turn_completed" and not events[-1].turn_completed.is_error
            init = next(p for t, p in engine_messages(events) if t == "SystemMessage" and p["subtype"] == "init")
            assert [(s["name"], s["status"]) for s in init["data"]["mcp_servers"]] == [("tickets", "connected")]
            assert {"mcp__tickets__echo", "mcp__tickets__where"} <= set(init["data"]["tools"])
            assert "mcp__tickets__add" not in init["data"]["tools"]  # left out of its enabled_tools
            (result,) = _tool_results(events)
            assert not result["is_error"] and "hello over http" in json.dumps(result["content"])
            calls = (served / "mcp-calls.log").read_text().splitlines()
            assert [json.loads(line) for line in calls] == [{"tool": "echo", "arguments": {"text": "hello over http"}}]

            # Each server that could not be used is an event naming it, with why.
            unavailable = {
                e.mcp_server_unavailable.server: e.mcp_server_unavailable.reason
                for e in journal
                if e.WhichOneof("payload") == "mcp_server_unavailable"
            }
            assert set(unavailable) == {"refused", "nocred", "gone"}, unavailable
            assert "refused the credential (HTTP 401)" in unavailable["refused"]
            assert "the project holds no credential 'nobody.token'" in unavailable["nocred"]
            assert "astrabox credentials put nobody.token" in unavailable["nocred"]
            assert "could not be reached" in unavailable["gone"]

            # A tool left out of enabled_tools is not offered at all: the agent holds the credential,
            # so what the CLI in the sandbox enforces is not all there is.
            accepted = await client.send_message(
                session.session_id, 'tool: mcp__tickets__add {"a": 2, "b": 3}', client_message_id="m2"
            )
            events = await collect_turn(client, session.session_id, accepted.turn_id)
            (refused,) = _tool_results([e for e in events if e.turn_id == accepted.turn_id])
            assert refused["is_error"] and "No such tool available: mcp__tickets__add" in json.dumps(refused["content"])
            assert len((served / "mcp-calls.log").read_text().splitlines()) == 1
            journal = [event async for event in client.iter_events(session.session_id)]

            # The secret is nowhere but the server (and, sealed, the control plane's database).
            needle = secret.encode()
            assert not [e for e in journal if needle in e.SerializeToString()]
            assert _processes_showing(needle, but=server.proc.pid) == {}
            assert _files_holding(stack.agent_state / "sandboxes", needle) == []
            assert _files_holding(stack.log_dir, needle) == []
            assert _files_holding(stack.agent_state, needle) == []
    finally:
        server.stop()
