"""One webhook attempt: a signed POST to an address checked just before (`destinations`).

Signed as Standard Webhooks asks: `webhook-id` (the delivery's, the same on every attempt),
`webhook-timestamp` (this attempt's, in seconds) and `webhook-signature`, one `v1,<base64>` per
secret in force (the current one first, then the previous one while a rotation's overlap lasts),
space-separated. Every wait is bounded (resolution, connection, the whole exchange) and so is what
is read of the answer: a status and the first `EXCERPT_BYTES` of the body, for the delivery log.
Redirects are not followed (a 3xx is a failed attempt), and no proxy from the environment is used.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import aiohttp
import aiohttp.abc
from standardwebhooks import Webhook

from controlplane.webhooks.destinations import DestinationRefused, Destinations, Target
from serverkit.addresses import Address

EXCERPT_BYTES = 1024
USER_AGENT = "AstraBox-Webhooks/1"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an attempt came to: a status (None without an answer), why it failed without one, and
    the start of the answer's body."""

    status_code: int | None
    error: str = ""
    excerpt: str = ""

    @property
    def delivered(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300

    @property
    def kind(self) -> str:
        """delivered (2xx), rejected (another status) or unreachable (no answer): the metric's label."""
        if self.status_code is None:
            return "unreachable"
        return "delivered" if self.delivered else "rejected"


def message_id(delivery_id: str) -> str:
    """The `webhook-id` of a delivery."""
    return "msg_" + delivery_id.replace("-", "")


def signature(message: str, at: datetime, body: str, secrets: Sequence[str]) -> str:
    """The `webhook-signature` header: each secret's signature, space-separated."""
    return " ".join(Webhook(secret).sign(message, at, body) for secret in secrets)


class _Pinned(aiohttp.abc.AbstractResolver):
    """Answers every lookup with the addresses already checked: the connection goes to one of them."""

    def __init__(self, addresses: Sequence[Address]) -> None:
        self._addresses = addresses

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[aiohttp.abc.ResolveResult]:
        return [
            aiohttp.abc.ResolveResult(
                hostname=host,
                host=str(address),
                port=port,
                family=socket.AF_INET6 if address.version == 6 else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in self._addresses
        ]

    async def close(self) -> None:
        return None


class Sender:
    """Sends attempts; `timeout` bounds each one from connecting to the last byte read."""

    def __init__(self, destinations: Destinations, timeout: float = 10.0, connect_timeout: float = 5.0) -> None:
        self._destinations = destinations
        self._timeout = aiohttp.ClientTimeout(total=timeout, connect=connect_timeout)

    async def send(self, url: str, delivery_id: str, body: str, secrets: Sequence[str]) -> Outcome:
        try:
            target = await self._destinations.check(url)
        except DestinationRefused as refused:
            return Outcome(None, f"refused: {refused}")
        message = message_id(delivery_id)
        at = datetime.now(UTC)
        headers = {
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            "webhook-id": message,
            "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": signature(message, at, body, secrets),
        }
        try:
            return await self._post(target, body.encode(), headers)
        except TimeoutError:
            return Outcome(None, f"no answer within {self._timeout.total:g} s")
        except aiohttp.ClientError as error:
            return Outcome(None, f"{type(error).__name__}: {str(error)[:300]}")
        except OSError as error:
            return Outcome(None, f"{type(error).__name__}: {str(error)[:300]}")

    async def _post(self, target: Target, body: bytes, headers: dict[str, str]) -> Outcome:
        connector = aiohttp.TCPConnector(resolver=_Pinned(target.addresses), use_dns_cache=False, force_close=True)
        async with (
            aiohttp.ClientSession(connector=connector, timeout=self._timeout, trust_env=False) as session,
            session.post(target.url, data=body, headers=headers, allow_redirects=False) as response,
        ):
            read = b""
            while len(read) < EXCERPT_BYTES:
                chunk = await response.content.read(EXCERPT_BYTES - len(read))
                if not chunk:
                    break
                read += chunk
            return Outcome(response.status, "", read.decode("utf-8", errors="replace"))
