"""Network policies as the egress proxy applies them, and the addresses it never connects to."""

from __future__ import annotations

import ipaddress

import pytest

from astrabox.agents.v1 import agent_pb2
from astrabox.environments.v1 import environment_pb2 as env_pb
from dataplane_agent.engines.mcp_destinations import parse_networks, refused_kind
from dataplane_agent.routes.egress.policy import DEFAULT_PACKAGE_REGISTRIES, EgressPolicy, Mode, parse_patterns
from dataplane_agent.routes.egress.reports import RefusalReports

REGISTRIES = parse_patterns(DEFAULT_PACKAGE_REGISTRIES)


def _policy(mode: int, *hosts: str, registries: bool = False, mcp: bool = False, agent=None) -> EgressPolicy:
    network = env_pb.NetworkPolicy(
        mode=mode, allowed_hosts=list(hosts), allow_package_registries=registries, allow_mcp_servers=mcp
    )
    return EgressPolicy.from_proto(env_pb.EnvironmentSpec(network=network), agent, REGISTRIES)


def test_no_environment_or_no_policy_is_none() -> None:
    assert EgressPolicy.from_proto(None, None, REGISTRIES).mode is Mode.NONE
    assert EgressPolicy.from_proto(env_pb.EnvironmentSpec(), None, REGISTRIES).mode is Mode.NONE
    assert _policy(env_pb.NETWORK_MODE_UNSPECIFIED).mode is Mode.NONE
    assert _policy(env_pb.NETWORK_MODE_NONE, "example.com").refusal("example.com", 443) is not None
    assert not _policy(env_pb.NETWORK_MODE_NONE).open


def test_limited_allows_what_its_patterns_name() -> None:
    policy = _policy(env_pb.NETWORK_MODE_LIMITED, "github.com:443", "*.example.org", "10.1.2.3")
    assert policy.refusal("github.com", 443) is None
    assert policy.refusal("GitHub.com.", 443) is None
    assert "allowed_hosts" in (policy.refusal("github.com", 22) or "")
    assert policy.refusal("a.b.example.org", 8080) is None
    assert policy.refusal("example.org", 443) is not None  # subdomains only
    assert policy.refusal("evil-example.org", 443) is not None
    assert policy.refusal("10.1.2.3", 1) is None
    assert policy.refusal("pypi.org", 443) is not None  # registries only when allowed


def test_limited_adds_the_registries_and_the_agents_http_mcp_hosts_when_asked() -> None:
    agent = agent_pb2.AgentSpec(
        mcp_servers=[
            agent_pb2.McpServer(name="tickets", http=agent_pb2.HttpMcpServer(url="https://mcp.example.com/mcp")),
            agent_pb2.McpServer(name="local", stdio=agent_pb2.StdioMcpServer(command="srv")),
        ]
    )
    with_both = _policy(env_pb.NETWORK_MODE_LIMITED, registries=True, mcp=True, agent=agent)
    assert with_both.refusal("files.pythonhosted.org", 443) is None
    assert with_both.refusal("mcp.example.com", 443) is None
    assert with_both.refusal("mcp.example.com", 80) is not None  # the URL's port only
    without = _policy(env_pb.NETWORK_MODE_LIMITED, agent=agent)
    assert without.refusal("mcp.example.com", 443) is not None
    assert without.refusal("registry.npmjs.org", 443) is not None


def test_a_pattern_that_does_not_parse_widens_nothing() -> None:
    policy = _policy(env_pb.NETWORK_MODE_LIMITED, "*", "exa mple.com", "ok.example")
    assert policy.allowed and all(p.host == "ok.example" for p in policy.allowed)
    assert policy.refusal("anything.com", 443) is not None


def test_unrestricted_allows_any_host() -> None:
    assert _policy(env_pb.NETWORK_MODE_UNRESTRICTED).refusal("anything.example", 1) is None


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("10.0.0.5", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "private"),
        ("fc00::1", "private"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("203.0.113.7", None),  # documentation ranges are ordinary destinations
        ("198.51.100.1", None),
        ("93.184.216.34", None),
    ],
)
def test_the_addresses_never_reached_for_a_sandbox(address: str, kind: str | None) -> None:
    assert refused_kind(ipaddress.ip_address(address), ()) == kind


def test_the_operator_allows_networks() -> None:
    allowed = parse_networks("127.0.0.0/8, 10.20.0.0/16")
    assert refused_kind(ipaddress.ip_address("127.0.0.1"), allowed) is None
    assert refused_kind(ipaddress.ip_address("10.20.3.4"), allowed) is None
    assert refused_kind(ipaddress.ip_address("10.21.0.1"), allowed) == "private"


def test_reports_burst_then_one_per_interval_counting_the_rest() -> None:
    now = [0.0]
    reports = RefusalReports(burst=3, interval=10.0, clock=lambda: now[0])
    taken = [reports.take("s") for _ in range(8)]
    assert taken == [0, 0, 0, None, None, None, None, None]
    now[0] = 10.0
    assert reports.take("s") == 5  # the five counted meanwhile ride on this report
    assert reports.take("s") is None
    assert reports.take("other") == 0  # per session


async def test_a_forgotten_session_drops_its_cached_secrets(tmp_path) -> None:
    from dataplane_agent.routes.egress.proxy import EgressProxy

    class Cached:
        def __init__(self) -> None:
            self.forgotten: list[str] = []

        async def bindings(self, session_id: str):
            return ()

        def forget(self, session_id: str) -> None:
            self.forgotten.append(session_id)

    source = Cached()
    proxy = EgressProxy(tmp_path / "egress", source)
    proxy.register("s-1", _policy(env_pb.NETWORK_MODE_UNRESTRICTED))
    proxy.forget("s-1")
    assert source.forgotten == ["s-1"] and proxy.env("s-1") == {}
