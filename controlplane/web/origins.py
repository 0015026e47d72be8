"""Which web origins may call the web API from a browser.

The API authenticates by a bearer header only, never a cookie, so a page elsewhere has no ambient
authority to borrow; still, a browser request that names an Origin is served only for an origin
allowed here, and only those get CORS answers. Allowed: the console's own origins on loopback
(http://127.0.0.1:PORT, http://localhost:PORT, http://[::1]:PORT for the bound port; https when
the control plane has a TLS certificate) and each
origin given with --web-origins (a console behind a proxy, say https://astrabox.example.com).
The Host header is never trusted to say what "same origin" is: a DNS-rebinding page would set it.
Requests without an Origin header (curl, programs) are not browser requests and pass here.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

# What a browser may send on a cross-origin call, and read of the answer.
ALLOWED_HEADERS = "authorization, content-type, connect-protocol-version, connect-timeout-ms"
EXPOSED_HEADERS = "content-type"
PREFLIGHT_MAX_AGE_S = 600
# On every answer, page or API: never sniff a type, never send a referrer, never be framed.
BROWSER_POLICY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


class OriginSettingError(ValueError):
    """A --web-origins entry that is not a bare origin."""


def parse_origin(text: str) -> str:
    """`scheme://host[:port]` normalized (lower case, no default port), or OriginSettingError."""
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise OriginSettingError(f"{text!r} is not an origin: give scheme://host[:port], e.g. https://console.example")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise OriginSettingError(f"{text!r} is not a bare origin: drop the path, query and credentials")
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    default_port = 443 if parts.scheme == "https" else 80
    try:
        port = parts.port
    except ValueError:
        raise OriginSettingError(f"{text!r} has an invalid port") from None
    return f"{parts.scheme}://{host}" + (f":{port}" if port and port != default_port else "")


class Origins:
    """The allowed origins of one web listener."""

    def __init__(self, port: int, extra: Iterable[str] = (), scheme: str = "http") -> None:
        loopback = {f"{scheme}://{host}:{port}" for host in ("127.0.0.1", "localhost", "[::1]")}
        self._allowed = frozenset(loopback | {parse_origin(origin) for origin in extra})

    def allows(self, origin: str) -> bool:
        try:
            return parse_origin(origin) in self._allowed
        except OriginSettingError:
            return False  # "null" (a sandboxed frame, a file: page) and anything malformed

    def refusal(self, origin: str) -> str:
        shown = origin[:200]
        return (
            f"requests from the web origin {shown!r} are not accepted: the console's own origin is, and "
            "an operator can allow another with --web-origins"
        )

    def response_headers(self, origin: str) -> dict[str, str]:
        return {
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Expose-Headers": EXPOSED_HEADERS,
            "Vary": "Origin",
        }

    def preflight_headers(self, origin: str) -> dict[str, str]:
        return {
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Allow-Methods": "POST",
            "Access-Control-Allow-Headers": ALLOWED_HEADERS,
            "Access-Control-Max-Age": str(PREFLIGHT_MAX_AGE_S),
            "Vary": "Origin",
        }
