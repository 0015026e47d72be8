"""What the egress proxy tests share: a loopback origin that records requests, refusal reports, fixed
credential bindings, and the proxy, policies, sandboxes and commands they run."""

from __future__ import annotations

import asyncio
import base64
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from astrabox.environments.v1 import environment_pb2 as env_pb
from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.mcp_destinations import parse_networks
from dataplane_agent.routes.egress.bindings import BindingSource, CredentialBinding, NoBindings
from dataplane_agent.routes.egress.policy import EgressPolicy
from dataplane_agent.routes.egress.proxy import EgressProxy
from dataplane_agent.sandboxes.base import Sandbox, SandboxSpec
from dataplane_agent.sandboxes.local import LocalSandboxDriver

SECRET = "ghp-bound-secret-0123456789abcdef"


@dataclass
class Origin:
    """An HTTP server on the host's loopback that records what reaches it."""

    port: int
    heads: list[str] = field(default_factory=list)


@dataclass
class Reports:
    items: list[tuple[str, pb.EgressRefused]] = field(default_factory=list)

    async def __call__(self, session_id: str, refused: pb.EgressRefused) -> None:
        self.items.append((session_id, refused))


class StaticBindings:
    """Part C's credential source stands in here: fixed bindings per session."""

    def __init__(self, bindings: dict[str, Sequence[CredentialBinding]]) -> None:
        self._bindings = bindings

    async def bindings(self, session_id: str) -> Sequence[CredentialBinding]:
        return self._bindings.get(session_id, ())


def proxy_for(
    tmp_path: Path, reports: Reports, *, loopback: bool = True, bindings: BindingSource | None = None
) -> EgressProxy:
    return EgressProxy(
        tmp_path / "egress",
        bindings or NoBindings(),
        allowed_networks=parse_networks("127.0.0.0/8" if loopback else ""),
        report=reports,
    )


def policy_of(mode: int, *hosts: str, bound: Sequence[str] = (), port: int = 0, plain: bool = False) -> EgressPolicy:
    """The policy of an environment allowing `hosts` and binding a credential to the `bound` ones on
    `port` (0: 443), plain HTTP too with `plain`."""
    spec = env_pb.EnvironmentSpec(network=env_pb.NetworkPolicy(mode=mode, allowed_hosts=list(hosts)))
    if bound:
        spec.credentials.append(
            env_pb.CredentialBinding(credential="github", hosts=list(bound), port=port, allow_plain_http=plain)
        )
    return EgressPolicy.from_proto(spec, None, ())


LIMITED, NONE, UNRESTRICTED = env_pb.NETWORK_MODE_LIMITED, env_pb.NETWORK_MODE_NONE, env_pb.NETWORK_MODE_UNRESTRICTED


async def sandbox_for(driver: LocalSandboxDriver, proxy: EgressProxy, session_id: str) -> Sandbox:
    return await driver.create(SandboxSpec(session_id=session_id, agent_id="agent-1", egress_socket=proxy.socket))


async def sh(
    driver: LocalSandboxDriver, sandbox: Sandbox, script: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    launcher = await driver.launcher(sandbox, ["/bin/sh", "-c"], env)
    return await asyncio.to_thread(subprocess.run, [str(launcher), script], capture_output=True, text=True, timeout=60)


def curl(url: str, *extra: str) -> str:
    return " ".join(["curl -sS -m 20 -w '\\n%{http_code}'", *extra, f"'{url}'"])


async def raw_request(proxy: EgressProxy, data: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(proxy.socket))
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 20)
    finally:
        writer.close()


def proxy_authorization(proxy: EgressProxy, session_id: str) -> str:
    url = proxy.env(session_id)["HTTP_PROXY"]
    userinfo = url.removeprefix("http://").rpartition("@")[0]
    return "Proxy-Authorization: Basic " + base64.b64encode(userinfo.encode()).decode()
