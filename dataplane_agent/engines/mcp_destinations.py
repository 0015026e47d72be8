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
        if any(address in network for network in self._allowed):
            return True
        return address.is_global and not address.is_multicast


def _kind(address: Address) -> str:
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_private:
        return "private"
    return "non-public"
