"""Where the agent may send an agent definition's HTTP MCP requests.

An agent definition is written by any developer of a project, and the data-plane agent connects to
its HTTP MCP servers from the host's network, with a credential: left unchecked, a definition
could make the agent reach what only the host reaches (loopback services, the private network, a
cloud's metadata address at 169.254.169.254) and show the answers to the model. So a server's host
is resolved first and every address it resolves to must be public, or inside one of the networks
the operator allows (`--mcp-allowed-networks`, CIDRs, e.g. `10.20.0.0/16` for an internal MCP
server); otherwise the server is left out, as unreachable, and the reason says how to allow it.

The egress proxy asks the same module which addresses a sandbox never reaches (`refused_kind`). Both
judge an IPv6 address that stands for an IPv4 one (IPv4-mapped, -translated and -compatible, NAT64's
64:ff9b::/96, 6to4's 2002::/16) by the IPv4 address it embeds: ::ffff:127.0.0.1 and
64:ff9b::a9fe:a9fe are loopback and the metadata address, 64:ff9b::808:808 is 8.8.8.8. Tunnels
whose IPv4 address cannot be read from the IPv6 one (Teredo's 2001::/32, local-use NAT64's
64:ff9b:1::/48) are refused whole unless the operator allows their network.

The check runs before each connection (listing the tools at engine start, and each call). A name
whose records change between the check and the connection (DNS rebinding) is not covered.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from serverkit.addresses import Address, Network, embedded_ipv4, kind, parse_networks, reachable, refused_kind

__all__ = [
    "Address",
    "DestinationRefused",
    "McpDestinations",
    "Network",
    "embedded_ipv4",
    "parse_networks",
    "reachable",
    "refused_kind",
]


_RESOLVE_TIMEOUT_S = 10.0


class DestinationRefused(Exception):
    """The URL's host is, or resolves to, an address the agent does not reach; the message says why."""


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
                    f"{host} is {address}, a {kind(address)} address this agent does not reach for MCP servers"
                    " (an operator may allow its network with --mcp-allowed-networks)"
                )

    def _reachable(self, address: Address) -> bool:
        return reachable(address, self._allowed)
