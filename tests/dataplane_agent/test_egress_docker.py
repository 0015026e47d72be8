"""The egress proxy from inside a docker sandbox (network none): the proxy's socket beside the model
route's, in the directory the container mounts, relayed to 127.0.0.1:41801. Skips when no Docker
daemon answers."""

from __future__ import annotations

import asyncio
import base64
import subprocess
from pathlib import Path

import pytest

from astrabox.environments.v1 import environment_pb2 as env_pb
from dataplane_agent.engines.claude_code import BUNDLED_CLI
from dataplane_agent.engines.mcp_destinations import parse_networks
from dataplane_agent.routes.egress.bindings import NoBindings
from dataplane_agent.routes.egress.policy import EgressPolicy
from dataplane_agent.routes.egress.proxy import EgressProxy
from dataplane_agent.sandboxes.base import AGENT_LABEL, EGRESS_PORT, SESSION_LABEL, SandboxSpec
from dataplane_agent.sandboxes.docker import ContainerLimits, DockerSandboxDriver
from tests.support.containers import Containers, memory_mb, pids


@pytest.fixture
def driver(containers: Containers, sandbox_root: Path, sandbox_runtime: str) -> DockerSandboxDriver:
    """Under runc and under runsc (gVisor, whose relays reach the proxy's socket by --host-uds=open)."""
    return DockerSandboxDriver(
        sandbox_root,
        installation=containers.installation,
        agent_id="agent-1",
        limits=ContainerLimits(cpus=0.5, memory_mb=memory_mb(sandbox_runtime), pids=pids(sandbox_runtime)),
        programs=[BUNDLED_CLI],
        runtime=sandbox_runtime,
    )


async def test_a_docker_sandbox_goes_out_only_through_the_proxy(driver: DockerSandboxDriver, tmp_path: Path) -> None:
    async def origin_serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\nconnection: close\r\n\r\nfrom host")
        await writer.drain()
        writer.close()

    origin = await asyncio.start_server(origin_serve, "127.0.0.1", 0)
    port = origin.sockets[0].getsockname()[1]
    routes = tmp_path / "routes"
    routes.mkdir(mode=0o755)
    model = await asyncio.start_unix_server(lambda reader, writer: writer.close(), str(routes / "model.sock"))
    try:
        async with EgressProxy(routes, NoBindings(), allowed_networks=parse_networks("127.0.0.0/8")) as proxy:
            network = env_pb.NetworkPolicy(mode=env_pb.NETWORK_MODE_LIMITED, allowed_hosts=[f"localhost:{port}"])
            proxy.register("dock", EgressPolicy.from_proto(env_pb.EnvironmentSpec(network=network), None, ()))
            labels = {SESSION_LABEL: "dock", AGENT_LABEL: "agent-1"}
            sandbox = await driver.create(
                SandboxSpec(
                    session_id="dock",
                    agent_id="agent-1",
                    labels=labels,
                    model_socket=routes / "model.sock",
                    egress_socket=proxy.socket,
                )
            )
            userinfo = proxy.env("dock")["HTTP_PROXY"].removeprefix("http://").rpartition("@")[0]
            auth = base64.b64encode(userinfo.encode()).decode()

            def ask(target: str) -> str:
                request = f"GET {target} HTTP/1.1\\r\\nHost: x\\r\\nProxy-Authorization: Basic {auth}\\r\\n\\r\\n"
                return f"printf '{request}' | socat -t10 - TCP:127.0.0.1:{EGRESS_PORT}"

            launcher = await driver.launcher(sandbox, ["/bin/sh", "-c"], {})
            script = (
                f"{ask(f'http://localhost:{port}/')}; echo; {ask('http://localhost:1/')}; echo;"
                f" socat -t2 - TCP:172.17.0.1:{port} </dev/null && echo DIRECT-REACHED"
            )
            result = await asyncio.to_thread(
                subprocess.run, [str(launcher), script], capture_output=True, text=True, timeout=120
            )
    finally:
        origin.close()
        model.close()

    assert "HTTP/1.1 200 OK" in result.stdout and "from host" in result.stdout, result.stderr
    assert "HTTP/1.1 403 Forbidden" in result.stdout
    assert "localhost:1 is refused: not in this environment's allowed_hosts" in result.stdout
    assert "DIRECT-REACHED" not in result.stdout
