"""Where a credential binding's secret may go: its hosts on one port, over TLS, and over plain HTTP
only to hosts that are clearly not on the internet. Written once here, because the control plane
validates and resolves bindings and the agent's egress proxy decides with the same code which
requests get a secret.

A binding (astrabox.environments.v1.CredentialBinding) names hosts and one port, 443 when it names
none (`port`: 0 reads as 443, so a binding stored before the field existed means HTTPS on 443).
`pinned` puts that port on each host pattern: a pattern written with another port matches nothing.

Plain HTTP carries the secret readable by anyone on the way, so a binding may ask for it
(`allow_plain_http`) only when every one of its hosts is non-public (`non_public`): the name
`localhost`, a name under one of `PLAIN_HTTP_SUFFIXES` (reserved for local or private use: RFC 6761
.localhost, RFC 6762 .local, RFC 8375 .home.arpa, and .internal, which ICANN keeps for private
networks), or a loopback or private address (`PLAIN_HTTP_NETWORKS`). A name can still resolve
anywhere, so the proxy also checks the address it connected to (`non_public_address`).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable

from serverkit.host_patterns import HostPattern

DEFAULT_PORT = 443
PLAIN_HTTP_SUFFIXES = ("localhost", "internal", "local", "home.arpa")
PLAIN_HTTP_NETWORKS = tuple(
    ipaddress.ip_network(network)
    for network in ("127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "::1/128", "fc00::/7")
)


def port(value: int) -> int:
    """A binding's port as it applies: 0 (not given) is 443."""
    return value or DEFAULT_PORT


def pinned(patterns: Iterable[HostPattern], on: int) -> tuple[HostPattern, ...]:
    """Each pattern on port `on`: one without a port gets it, one with another port is left out."""
    return tuple(
        pattern if pattern.port == on else dataclasses.replace(pattern, port=on)
        for pattern in patterns
        if pattern.port in (None, on)
    )


def non_public(pattern: HostPattern) -> bool:
    """Whether every host `pattern` matches is clearly not on the internet (see the module)."""
    if pattern.is_address:
        return non_public_address(ipaddress.ip_address(pattern.host))
    # `*.corp.internal` is under .internal as `corp.internal` is; `localhost` is its own suffix.
    return any(("." + pattern.host).endswith("." + suffix) for suffix in PLAIN_HTTP_SUFFIXES)


def non_public_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether `address` is loopback or private (`PLAIN_HTTP_NETWORKS`)."""
    return any(address in network for network in PLAIN_HTTP_NETWORKS)
