"""Which addresses a server process never connects to on someone else's behalf, unless the operator
allows their network: the host itself (loopback), its networks (private, link-local, CGNAT), the
cloud's metadata address (169.254.169.254), multicast and reserved ranges. Written once here because
the data-plane agent's egress proxy and HTTP MCP client (`dataplane_agent.engines.mcp_destinations`)
and the control plane's webhook deliveries (`controlplane.webhooks`) apply the same rules.

An IPv6 address that stands for an IPv4 one (IPv4-mapped, -translated and -compatible, NAT64's
64:ff9b::/96, 6to4's 2002::/16) is judged by the IPv4 address it embeds: ::ffff:127.0.0.1 and
64:ff9b::a9fe:a9fe are loopback and the metadata address, 64:ff9b::808:808 is 8.8.8.8. Tunnels
whose IPv4 address cannot be read from the IPv6 one (Teredo's 2001::/32, local-use NAT64's
64:ff9b:1::/48) are refused whole unless the operator allows their network.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_networks(text: str) -> tuple[Network, ...]:
    """`--mcp-allowed-networks`: comma-separated CIDRs (a bare address is its own /32 or /128).
    ValueError naming the one that is not a network."""
    networks = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ValueError(f"{part!r} is not a network (write a CIDR such as 10.20.0.0/16)") from None
    return tuple(networks)


def reachable(address: Address, allowed: Iterable[Network]) -> bool:
    """Whether `address` is public or in `allowed`, as MCP servers are checked (strictly: only
    `is_global` addresses are public, and none a sandbox never reaches). An IPv6 address that embeds an IPv4 one is judged by that
    (`embedded_ipv4`), and one of a tunnel or translator whose embedding cannot be read is never
    public (`_TUNNELS`)."""
    allowed = tuple(allowed)
    if any(address in network for network in allowed):
        return True
    if isinstance(address, ipaddress.IPv6Address):
        if (embedded := embedded_ipv4(address)) is not None:
            return reachable(embedded, allowed)
        if _tunnel(address) is not None:
            return False
    never = any(address in network for network in _NOT_FOR_SANDBOXES)
    return address.is_global and not address.is_multicast and not never


# IPv6 forms that carry an IPv4 address in their last 32 bits, and where the packets go: to that
# address, once a host, a translator or a tunnel has turned them into IPv4.
_LOW_32_EMBEDDINGS = tuple(
    ipaddress.IPv6Network(n)
    for n in (
        "::ffff:0:0/96",  # IPv4-mapped
        "::ffff:0:0:0/96",  # IPv4-translated (SIIT)
        "64:ff9b::/96",  # the well-known NAT64 prefix
        "::/96",  # IPv4-compatible (deprecated), but for :: and ::1
    )
)
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")  # the IPv4 address in bits 16-47
# Tunnels and translators whose IPv4 address cannot be read from the IPv6 one alone: Teredo's is
# obfuscated and reached through a relay; a local-use NAT64 prefix is the operator's own, of a length
# the address does not say, and translates into the operator's network. Never reached unless allowed.
_TUNNELS = {
    ipaddress.IPv6Network("2001::/32"): "Teredo",
    ipaddress.IPv6Network("64:ff9b:1::/48"): "local-use NAT64",
}
_SITE_LOCAL = ipaddress.IPv6Network("fec0::/10")  # deprecated, still routed inside some sites


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address `address` stands for (IPv4-mapped, -translated or -compatible, NAT64's
    well-known prefix, 6to4), or None."""
    if address in _SIX_TO_FOUR:
        return address.sixtofour
    if any(address in network for network in _LOW_32_EMBEDDINGS) and int(address) > 1:  # not :: nor ::1
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _tunnel(address: ipaddress.IPv6Address) -> str | None:
    return next((kind for network, kind in _TUNNELS.items() if address in network), None)


# What the egress proxy never connects to for a sandbox unless the operator allows the network: the
# host itself, its networks, the cloud's metadata address. Listed rather than `not is_global`, which
# would also refuse documentation and benchmark ranges that are ordinary destinations elsewhere.
_NOT_FOR_SANDBOXES = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",  # unspecified, "this network"
        "10.0.0.0/8",
        "100.64.0.0/10",  # CGNAT
        "127.0.0.0/8",
        "169.254.0.0/16",  # link-local, the metadata address
        "172.16.0.0/12",
        "192.0.0.0/24",  # IETF protocol assignments: DS-Lite's B4 and AFTR, NAT64 discovery
        "192.168.0.0/16",
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, broadcast
        "::/128",
        "::1/128",
        "fc00::/7",  # ULA
        "fe80::/10",
        "fec0::/10",  # site-local (deprecated, still routed inside some sites)
        "ff00::/8",
    )
)


def refused_kind(address: Address, allowed: Iterable[Network]) -> str | None:
    """Why the egress proxy does not connect to `address` ("loopback", "private", ...), or None:
    it may (a non-local address, or one in a network the operator allows). An IPv6 address that
    embeds an IPv4 one (`embedded_ipv4`: mapped, translated, compatible, NAT64, 6to4) is judged by
    that; one of a tunnel or translator whose IPv4 address cannot be read (Teredo, local-use NAT64)
    is refused unless its network is allowed."""
    allowed = tuple(allowed)
    if isinstance(address, ipaddress.IPv6Address) and (embedded := embedded_ipv4(address)) is not None:
        if any(address in network for network in allowed):
            return None
        return refused_kind(embedded, allowed)
    if any(address in network for network in allowed):
        return None
    if isinstance(address, ipaddress.IPv6Address) and (tunnel := _tunnel(address)) is not None:
        return tunnel
    if any(address in network for network in _NOT_FOR_SANDBOXES):
        return kind(address)
    return None


_SHARED = ipaddress.ip_network("100.64.0.0/10")


def kind(address: Address) -> str:
    if isinstance(address, ipaddress.IPv6Address) and (embedded := embedded_ipv4(address)) is not None:
        return kind(embedded)
    if address.is_unspecified:
        return "unspecified"
    if address.is_multicast:
        return "multicast"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if isinstance(address, ipaddress.IPv6Address) and (tunnel := _tunnel(address)) is not None:
        return tunnel
    if address.is_private or address in _SHARED or address in _SITE_LOCAL:
        return "private"
    return "non-public"
