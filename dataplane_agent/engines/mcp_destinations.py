"""Where the agent may send an agent definition's HTTP MCP requests.

An agent definition is written by any developer of a project, and the data-plane agent connects to
its HTTP MCP servers from the host's network, with a credential: left unchecked, a definition
could make the agent reach what only the host reaches (loopback services, the private network, a
cloud's metadata address at 169.254.169.254) and show the answers to the model. So a server's host
is resolved first and every address it resolves to must be public, or inside one of the networks
the operator allows (`--mcp-allowed-networks`, CIDRs, e.g. `10.20.0.0/16` for an internal MCP
server); otherwise the server is left out, as unreachable, and the reason says how to allow it.

The check runs before each connection (listing the tools at engine start, and each call). A name
whose records change between the check and the connection (DNS rebinding) is not covered.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_RESOLVE_TIMEOUT_S = 10.0


class DestinationRefused(Exception):
    """The URL's host is, or resolves to, an address the agent does not reach; the message says why."""


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


class McpDestinations:
    """Public addresses, and those in `allowed`."""

    def __init__(self, allowed: Iterable[Network] = ()) -> None:
        self._allowed = tuple(allowed)

    async def check(self, url: str) -> None:
        """DestinationRefused unless every address the URL's host resolves to may be reached."""
        host = urlsplit(url).hostname or ""
        port = urlsplit(url).port
        try:
            async with asyncio.timeout(_RESOLVE_TIMEOUT_S):
                infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, TimeoutError) as error:
            raise DestinationRefused(f"{host} could not be resolved: {error}") from None
        for info in infos:
            address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
            if not self._reachable(address):
                raise DestinationRefused(
                    f"{host} is {address}, a {_kind(address)} address this agent does not reach for MCP servers"
                    " (an operator may allow its network with --mcp-allowed-networks)"
                )

    def _reachable(self, address: Address) -> bool:
        return reachable(address, self._allowed)


def reachable(address: Address, allowed: Iterable[Network]) -> bool:
    """Whether `address` is public or in `allowed`, as MCP servers are checked (strictly: only
    `is_global` addresses are public)."""
    if any(address in network for network in allowed):
        return True
    return address.is_global and not address.is_multicast


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
        "192.168.0.0/16",
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, broadcast
        "::/128",
        "::1/128",
        "fc00::/7",  # ULA
        "fe80::/10",
        "ff00::/8",
    )
)


def refused_kind(address: Address, allowed: Iterable[Network]) -> str | None:
    """Why the egress proxy does not connect to `address` ("loopback", "private", ...), or None:
    it may (a non-local address, or one in a network the operator allows)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return refused_kind(address.ipv4_mapped, allowed)
    if any(address in network for network in allowed):
        return None
    if any(address in network for network in _NOT_FOR_SANDBOXES):
        return _kind(address)
    return None


_SHARED = ipaddress.ip_network("100.64.0.0/10")


def _kind(address: Address) -> str:
    if address.is_unspecified:
        return "unspecified"
    if address.is_multicast:
        return "multicast"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_private or address in _SHARED:
        return "private"
    return "non-public"
