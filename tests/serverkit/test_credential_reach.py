"""Where a credential binding's secret may go (serverkit.credential_reach): its hosts on one port,
and plain HTTP only to hosts that are clearly not on the internet, whatever spelling is tried."""

from __future__ import annotations

import ipaddress

import pytest

from serverkit import credential_reach
from serverkit.host_patterns import parse


def test_a_binding_without_a_port_means_443() -> None:
    assert credential_reach.port(0) == 443
    assert credential_reach.port(8443) == 8443


def test_pinned_puts_the_port_on_each_pattern_and_drops_one_naming_another() -> None:
    patterns = [parse("git.test"), parse("*.api.test"), parse("old.test:9000"), parse("same.test:8443")]

    pinned = credential_reach.pinned(patterns, 8443)

    assert [str(p) for p in pinned] == ["git.test:8443", "*.api.test:8443", "same.test:8443"]
    assert pinned[0].matches("git.test", 8443) and not pinned[0].matches("git.test", 443)
    assert credential_reach.pinned([parse("old.test:9000")], 443) == ()


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("localhost", True),
        ("LOCALHOST.", True),
        ("app.localhost", True),
        ("db.corp.internal", True),
        ("*.corp.internal", True),
        ("internal", True),
        ("printer.local", True),
        ("nas.home.arpa", True),
        ("*.home.arpa", True),
        ("127.0.0.1", True),
        ("10.1.2.3", True),
        ("172.31.255.255", True),
        ("192.168.0.10", True),
        ("[::1]", True),
        ("[fd00::5]", True),
        ("example.com", False),
        ("localhost.example.com", False),
        ("internal.example.com", False),
        ("evil-internal", False),
        ("xlocal", False),
        ("home.arpa.evil.com", False),
        ("*.example.com", False),
        ("8.8.8.8", False),
        ("172.32.0.1", False),
        ("169.254.169.254", False),  # link-local, a cloud's metadata service: not taken as private
        ("100.64.0.1", False),
        ("[::ffff:127.0.0.1]", False),
        ("[2001:db8::1]", False),
    ],
)
def test_only_clearly_non_public_hosts_may_have_plain_http(pattern: str, expected: bool) -> None:
    assert credential_reach.non_public(parse(pattern)) is expected


def test_the_address_connected_to_is_checked_the_same_way() -> None:
    assert credential_reach.non_public_address(ipaddress.ip_address("127.0.0.1"))
    assert credential_reach.non_public_address(ipaddress.ip_address("fd12::1"))
    assert not credential_reach.non_public_address(ipaddress.ip_address("93.184.216.34"))
