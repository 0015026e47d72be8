"""Where a webhook may point, checked when it is created or changed and again before every attempt.

A webhook's URL is a project admin's choice, and the control plane POSTs to it from its own network:
unchecked, it could reach what only the control plane reaches (its database, loopback services, the
private network, a cloud's metadata address) and show the answers in the delivery log. So the
URL's host is resolved and every address must be one the egress proxy would connect to
(`serverkit.addresses.refused_kind`), or inside a network the operator allows
(`--webhook-allowed-networks`); plain http only inside such a network. The sender then connects to
an address of this resolution, never resolving again (no DNS rebinding between check and use).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from serverkit.addresses import Address, Network, refused_kind

# Resolves a host name to its addresses (a port for getaddrinfo's sake); OSError when it cannot.
Resolver = Callable[[str, int], Awaitable[Sequence[Address]]]


class DestinationRefused(Exception):
    """The URL is not one deliveries go to; the message says why and what to change."""


@dataclass(frozen=True, slots=True)
class Target:
    """A URL with the addresses its host resolved to, each allowed."""

    url: str
    scheme: str
    host: str
    port: int
    addresses: tuple[Address, ...]


async def system_resolver(host: str, port: int) -> Sequence[Address]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos))


def split(url: str) -> tuple[str, str, int]:
    """The URL's scheme, host and port; DestinationRefused for one that is no http(s) URL."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise DestinationRefused(f"{url!r} is not a URL: {error}") from None
    if parts.scheme not in ("https", "http"):
        raise DestinationRefused(f"the URL must be https (or http inside an allowed network), got {parts.scheme!r}")
    if not parts.hostname:
        raise DestinationRefused("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise DestinationRefused("the URL must not hold a user name or password")
    if parts.fragment:
        raise DestinationRefused("the URL must not have a #fragment")
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)


class Destinations:
    """Public addresses, and those in `allowed`."""

    def __init__(
        self, allowed: Sequence[Network] = (), resolve_timeout: float = 10.0, resolver: Resolver = system_resolver
    ) -> None:
        self._allowed = tuple(allowed)
        self._resolve_timeout = resolve_timeout
        self._resolver = resolver

    async def check(self, url: str) -> Target:
        """The URL resolved and checked; DestinationRefused saying why it may not be delivered to."""
        scheme, host, port = split(url)
        addresses = await self._resolve(host, port)
        for address in addresses:
            if (kind := refused_kind(address, self._allowed)) is not None:
                raise DestinationRefused(
                    f"{host} resolves to {address}, a {kind} address webhooks are not delivered to"
                    " (an operator may allow its network with --webhook-allowed-networks)"
                )
            if scheme == "http" and not any(address in network for network in self._allowed):
                raise DestinationRefused(
                    f"plain http goes only to networks the operator allows (--webhook-allowed-networks),"
                    f" and {host} is {address}: use https"
                )
        return Target(url, scheme, host, port, tuple(addresses))

    async def _resolve(self, host: str, port: int) -> tuple[Address, ...]:
        with contextlib.suppress(ValueError):
            return (ipaddress.ip_address(host.strip("[]")),)
        try:
            async with asyncio.timeout(self._resolve_timeout):
                addresses = tuple(await self._resolver(host, port))
        except (OSError, TimeoutError) as error:
            raise DestinationRefused(f"{host} could not be resolved: {error or 'timed out'}") from None
        if not addresses:
            raise DestinationRefused(f"{host} has no address")
        return addresses
