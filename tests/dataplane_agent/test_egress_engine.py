"""The egress proxy under a real engine: the bundled CLI in a local sandbox, started through the
agent's runtimes with StartRuntime.environment, runs curl with its Bash tool (the offline model's
`run:` row). The allowed host answers (with the bound credential added by the proxy), another is
refused with the reason, and the refusal is an EgressRefused output in the agent's outbox; the
credential is in none of the outputs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from astrabox.environments.v1 import environment_pb2 as env_pb
from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.claude_code import BUNDLED_CLI, ClaudeCodeAdapter
from dataplane_agent.engines.mcp_destinations import parse_networks
from dataplane_agent.routes.egress.bindings import CredentialBinding, Scheme
from dataplane_agent.routes.egress.proxy import EgressProxy
from dataplane_agent.routes.model import ModelRoute
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from serverkit.host_patterns import parse
from tests.dataplane_agent.fakes import Agent, deliver, running_agent
from tests.support.egress import StaticBindings

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore::claude_agent_sdk.CanUseToolShadowedWarning")]

TURN_TIMEOUT = 90.0
SECRET = "tok-engine-bound-secret-9876543210"


async def _turn(agent: Agent, turn_id: str, text: str, count: int) -> str:
    await agent.command("s-1", **deliver(turn_id, text, "bypassPermissions"))
    outputs = await agent.wait_for("s-1", "ResultMessage", count, timeout=TURN_TIMEOUT)
    [result] = [o for o in outputs if o.turn_id == turn_id and o.engine_message.type_name == "ResultMessage"]
    return str(json.loads(result.engine_message.payload_json)["result"])


async def test_the_engines_commands_go_out_through_the_proxy_as_the_environment_allows(
    tmp_path: Path, sandbox_root: Path, bwrap: str, model_route: ModelRoute
) -> None:
    if not BUNDLED_CLI.is_file():
        pytest.skip("claude-agent-sdk has no bundled CLI on this platform")
    heads: list[str] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append((await reader.readuntil(b"\r\n\r\n")).decode("latin-1"))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 14\r\nconnection: close\r\n\r\nlighthouse-ok\n")
        await writer.drain()
        writer.close()

    origin = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = origin.sockets[0].getsockname()[1]
    binding = CredentialBinding(
        "ci", (parse("localhost"),), Scheme.HEADER, "X-Token", SECRET, port=port, allow_plain_http=True
    )
    agents: list[Agent] = []

    async def report(session_id: str, refused: pb.EgressRefused) -> None:
        await agents[0].outbox.append(session_id, "", refused)

    network = env_pb.NetworkPolicy(mode=env_pb.NETWORK_MODE_LIMITED, allowed_hosts=[f"localhost:{port}"])
    bound = env_pb.CredentialBinding(
        credential="ci",
        hosts=["localhost"],
        port=port,
        allow_plain_http=True,  # a loopback host: plain HTTP may carry it
        scheme=env_pb.CREDENTIAL_SCHEME_HEADER,
        header="X-Token",
    )
    spec = env_pb.EnvironmentSpec(network=network, credentials=[bound])
    environment = pb.RuntimeEnvironment(environment_id="e", name="web", version=1, spec=spec)
    start = pb.StartRuntime(engine="claude_code", permission_mode="bypassPermissions", environment=environment)
    try:
        async with (
            EgressProxy(
                tmp_path / "egress",
                StaticBindings({"s-1": [binding]}),
                allowed_networks=parse_networks("127.0.0.0/8"),
                report=report,
            ) as proxy,
            running_agent(
                tmp_path / "agent",
                ClaudeCodeAdapter(),
                LocalSandboxDriver(sandbox_root, bwrap=bwrap),
                model=model_route,
                egress=proxy,
            ) as agent,
        ):
            agents.append(agent)
            assert not (await agent.command("s-1", start_runtime=start)).HasField("error")
            allowed = await _turn(agent, "t-1", f"run: curl -sS http://localhost:{port}/status", 1)
            refused = await _turn(agent, "t-2", "run: curl -sS http://localhost:1/", 2)
            outputs = await agent.outputs("s-1")
    finally:
        origin.close()

    assert "lighthouse-ok" in allowed  # the engine's model route still works beside the proxy
    assert f"X-Token: {SECRET}\r\n" in heads[0]
    assert "localhost:1 is refused: not in this environment's allowed_hosts" in refused
    egress = [o.egress_refused for o in outputs if o.HasField("egress_refused")]
    assert [(e.host, e.port) for e in egress] == [("localhost", 1)]
    assert all(SECRET.encode() not in o.SerializeToString() for o in outputs)
