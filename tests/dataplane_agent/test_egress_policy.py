"""Network policies as the egress proxy applies them, and the addresses it never connects to."""

from __future__ import annotations

import ipaddress

import pytest

from astrabox.agents.v1 import agent_pb2
from astrabox.environments.v1 import environment_pb2 as env_pb
from dataplane_agent.engines.mcp_destinations import (
    DestinationRefused,
    McpDestinations,
    parse_networks,
    reachable,
    refused_kind,
)
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


# IPv4 addresses a sandbox never reaches, with their kind; and public ones.
LOCAL_IPV4 = {
    "127.0.0.1": "loopback",
    "127.255.255.254": "loopback",
    "169.254.169.254": "link-local",
    "10.0.0.5": "private",
    "172.31.255.255": "private",
    "192.168.0.1": "private",
    "100.64.0.1": "private",
    "100.127.255.254": "private",
    "0.0.0.0": "unspecified",
    "0.1.2.3": "private",
    "224.0.0.251": "multicast",
    "255.255.255.255": "private",  # as Python counts it
    "192.0.0.8": "non-public",
}
PUBLIC_IPV4 = ["93.184.216.34", "8.8.8.8", "1.1.1.1"]


def embeddings(v4: str) -> dict[str, str]:
    """Every IPv6 form that stands for the IPv4 address `v4`, by name."""
    n = int(ipaddress.IPv4Address(v4))
    forms = {
        "mapped": (0xFFFF << 32) | n,
        "translated": (0xFFFF << 48) | n,
        "compatible": n,
        "nat64": (0x64FF9B << 96) | n,
        "6to4": (0x2002 << 112) | (n << 80) | 1,
    }
    return {name: str(ipaddress.IPv6Address(value)) for name, value in forms.items()}


HOSTILE = [
    *LOCAL_IPV4.items(),
    *[(form, kind) for v4, kind in LOCAL_IPV4.items() for form in embeddings(v4).values()],
    ("::ffff:127.0.0.1", "loopback"),  # the dotted spellings parse to the same addresses
    ("64:ff9b::169.254.169.254", "link-local"),
    ("::127.0.0.1", "loopback"),
    ("2002:7f00:1:ffff:ffff:ffff:ffff:ffff", "loopback"),
    ("2002:a9fe:a9fe::", "link-local"),
    ("64:ff9b:1::a9fe:a9fe", "local-use NAT64"),
    ("64:ff9b:1:ffff:ffff:ffff:ffff:ffff", "local-use NAT64"),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
    ("2001::1", "Teredo"),
    ("::1", "loopback"),
    ("::", "unspecified"),
    ("fe80::1", "link-local"),
    ("fec0::1", "private"),
    ("fd00:ec2::254", "private"),
    ("fc00::1", "private"),
    ("ff02::1", "multicast"),
]


@pytest.mark.parametrize(("address", "kind"), HOSTILE)
def test_every_form_of_a_local_address_is_refused(address: str, kind: str) -> None:
    """IPv4 addresses of the host, its networks and the metadata service, and every IPv6 form that
    carries one (mapped, translated, compatible, NAT64, 6to4) or a tunnel that hides one: refused to
    sandboxes, and never an MCP server's."""
    parsed = ipaddress.ip_address(address)
    assert refused_kind(parsed, ()) == kind
    assert not reachable(parsed, ())


def test_the_hostile_corpus_is_large() -> None:
    assert len(HOSTILE) >= 70


@pytest.mark.parametrize("address", [*PUBLIC_IPV4, *[form for v4 in PUBLIC_IPV4 for form in embeddings(v4).values()]])
def test_an_ipv6_form_of_a_public_ipv4_address_is_judged_by_it(address: str) -> None:
    parsed = ipaddress.ip_address(address)
    assert refused_kind(parsed, ()) is None
    assert reachable(parsed, ())


def test_an_embedding_or_tunnel_network_the_operator_allows_is_reached() -> None:
    nat64 = ipaddress.ip_address("64:ff9b::a00:5")  # 10.0.0.5
    assert refused_kind(nat64, ()) == "private"
    assert refused_kind(nat64, parse_networks("10.0.0.0/8")) is None  # its IPv4 network
    assert refused_kind(nat64, parse_networks("64:ff9b::/96")) is None  # or the prefix itself
    assert reachable(nat64, parse_networks("64:ff9b::/96"))
    local_nat64 = ipaddress.ip_address("64:ff9b:1::a00:5")
    assert refused_kind(local_nat64, parse_networks("10.0.0.0/8")) == "local-use NAT64"
    assert refused_kind(local_nat64, parse_networks("64:ff9b:1::/48")) is None


async def test_an_mcp_server_at_an_embedded_local_address_is_left_out() -> None:
    destinations = McpDestinations()
    for v4 in ("127.0.0.1", "169.254.169.254", "10.1.2.3"):
        for form in embeddings(v4).values():
            with pytest.raises(DestinationRefused, match=f"{LOCAL_IPV4.get(v4, 'private')} address"):
                await destinations.check(f"http://[{form}]:8080/mcp")
    await destinations.check("https://[64:ff9b::5db8:d822]/mcp")  # 93.184.216.34


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
