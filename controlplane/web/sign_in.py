"""The console's sign-in at the OIDC issuer: the authorization-code flow with PKCE, run by the
console in the browser as a public client (no client secret exists to leak).

The control plane's part is small: it reads the issuer's discovery document
(`<issuer>/.well-known/openid-configuration`) and tells the console, at /console/config.json, the
client id, the scopes and the two endpoints; the page's Content-Security-Policy lets it call the
token endpoint and nothing else of the issuer. The token the console gets back is then a bearer
credential like any other: `controlplane.identity.tokens` verifies it (issuer, audience, keys,
expiry) on every call. The endpoints must be https, or http on loopback (a test's issuer).

Discovery that fails (the issuer is down at start) does not stop the control plane: the console
says sign-in is unavailable and why, and the next request for the configuration tries again.
"""

from __future__ import annotations

import ipaddress
import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import structlog

from controlplane.identity.tokens import OidcSettings

log = structlog.get_logger(__name__)

SCOPES = "openid profile email"
DISCOVERY_TIMEOUT_S = 10.0
# How soon a failed discovery is tried again, at the console's next request for its configuration.
RETRY_AFTER_S = 30.0
MAX_DOCUMENT_BYTES = 256 * 1024


class DiscoveryFailed(Exception):
    """The issuer's discovery document could not be read or does not fit."""


@dataclass(frozen=True, slots=True)
class Endpoints:
    authorization: str
    token: str

    @property
    def token_origin(self) -> str:
        parts = urlsplit(self.token)
        return f"{parts.scheme}://{parts.netloc}"


def _secure(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme == "https":
        return True
    if parts.scheme != "http" or not parts.hostname:
        return False
    if parts.hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        return False


async def discover(issuer: str) -> Endpoints:
    """The issuer's authorization and token endpoints, from its discovery document."""
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    if not _secure(url):
        raise DiscoveryFailed(f"the issuer {issuer} is not https (plain http is taken on loopback only)")
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=DISCOVERY_TIMEOUT_S)) as http,
            http.get(url, allow_redirects=False) as response,
        ):
            if response.status != 200:
                raise DiscoveryFailed(f"{url} answered HTTP {response.status}")
            body = await response.content.read(MAX_DOCUMENT_BYTES + 1)
    except (aiohttp.ClientError, TimeoutError) as error:
        raise DiscoveryFailed(f"cannot read {url}: {error or type(error).__name__}") from None
    if len(body) > MAX_DOCUMENT_BYTES:
        raise DiscoveryFailed(f"{url} is larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        document = json.loads(body)
    except ValueError:
        raise DiscoveryFailed(f"{url} is not JSON") from None
    if not isinstance(document, dict) or document.get("issuer") != issuer:
        raise DiscoveryFailed(f"{url} names another issuer than {issuer}")
    endpoints = []
    for name in ("authorization_endpoint", "token_endpoint"):
        value = document.get(name)
        if not isinstance(value, str) or not _secure(value):
            raise DiscoveryFailed(f"{url}: {name} is missing or not https")
        endpoints.append(value)
    return Endpoints(*endpoints)


class ConsoleSignIn:
    """What the console needs to sign people in at the issuer; `None` settings: keys only."""

    def __init__(self, settings: tuple[OidcSettings, str] | None) -> None:
        self._oidc: OidcSettings | None = settings[0] if settings else None
        self._client_id = settings[1] if settings else ""
        self._endpoints: Endpoints | None = None
        self._failure = ""
        self._tried_at = float("-inf")

    async def refresh(self) -> None:
        """Discover the endpoints unless known, or tried in the last RETRY_AFTER_S."""
        if self._oidc is None or self._endpoints is not None:
            return
        if time.monotonic() - self._tried_at < RETRY_AFTER_S:
            return
        self._tried_at = time.monotonic()
        try:
            self._endpoints = await discover(self._oidc.issuer)
            self._failure = ""
        except DiscoveryFailed as error:
            self._failure = str(error)
            log.warning("console_sign_in_unavailable", error=self._failure)

    def connect_sources(self) -> tuple[str, ...]:
        """Origins the page may call besides its own: the token endpoint's."""
        return (self._endpoints.token_origin,) if self._endpoints else ()

    def config(self) -> dict[str, Any]:
        """/console/config.json: null sign-in when keys are the only way; the reason when it failed."""
        if self._oidc is None:
            return {"oidc": None}
        if self._endpoints is None:
            return {"oidc": None, "oidcUnavailable": self._failure or "the issuer has not been reached yet"}
        return {
            "oidc": {
                "issuer": self._oidc.issuer,
                "clientId": self._client_id,
                "audience": self._oidc.audience,
                "scopes": SCOPES,
                "authorizationEndpoint": self._endpoints.authorization,
                "tokenEndpoint": self._endpoints.token,
            }
        }
