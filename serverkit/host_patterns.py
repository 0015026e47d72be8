"""Host patterns: how an environment names the hosts its network policy allows and its credentials
go to (`NetworkPolicy.allowed_hosts`, `CredentialBinding.hosts`). Written once here, because the
control plane validates them and the data-plane agent's egress proxy matches requests against them.

A pattern is one of:
  `example.com`          that host, any port
  `example.com:443`      that host, that port
  `*.example.com[:port]` its subdomains at any depth (not example.com itself)
  `10.1.2.3[:port]`      an IPv4 address
  `[2001:db8::1][:port]` an IPv6 address, bracketed

Names compare case-insensitively and without a trailing dot. A name matches only a name and an
address only an address: `localhost` does not match a request to `127.0.0.1`. Where the name leads
(what it resolves to) is the egress proxy's business, not the pattern's.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

MAX_PATTERN_LENGTH = 260
# A DNS label: letters, digits, hyphens (and underscores, which real hosts use), not starting or
# ending with a hyphen.
_LABEL = r"(?!-)[a-z0-9_-]{1,63}(?<!-)"
_NAME = re.compile(rf"{_LABEL}(\.{_LABEL})*")


class HostPatternError(ValueError):
    """The text is not a host pattern; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class HostPattern:
    """One parsed pattern."""

    # A lower-case name without the trailing dot, or an address's compressed form.
    host: str
    # None: any port.
    port: int | None
    # `*.host`: the host's subdomains.
    subdomains: bool
    is_address: bool

    def matches(self, host: str, port: int) -> bool:
        """Whether a request to `host`:`port` (as the client asked for it) matches."""
        if self.port is not None and port != self.port:
            return False
        canonical = canonical_host(host)
        if canonical is None:
            return False
        if self.is_address:
            return canonical == self.host
        if self.subdomains:
            return canonical.endswith("." + self.host)
        return canonical == self.host

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        host = f"*.{host}" if self.subdomains else host
        return host if self.port is None else f"{host}:{self.port}"


def canonical_host(host: str) -> str | None:
    """A request's host as patterns compare it: an address's compressed form, or a lower-case name
    without its trailing dot; None when it is neither."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return ipaddress.ip_address(text).compressed
    except ValueError:
        pass
    name = text.lower().removesuffix(".")
    if len(name) > 253 or not _NAME.fullmatch(name):
        return None
    return name


def parse(text: str) -> HostPattern:
    """The pattern `text` writes; HostPatternError saying why it is none."""
    if not text or len(text) > MAX_PATTERN_LENGTH:
        raise HostPatternError(f"a host pattern has 1 to {MAX_PATTERN_LENGTH} characters")
    host, port = _split_port(text)
    subdomains = host.startswith("*.")
    if subdomains:
        host = host[2:]
    bracketed = host.startswith("[") and host.endswith("]")
    try:
        address = ipaddress.ip_address(host[1:-1] if bracketed else host)
    except ValueError:
        address = None
    if address is not None:
        if subdomains:
            raise HostPatternError(f"{text[:80]!r}: '*.' goes before a name, not an address")
        if address.version == 6 and not bracketed:
            raise HostPatternError(f"{text[:80]!r}: write an IPv6 address in brackets, e.g. [2001:db8::1]:443")
        return HostPattern(address.compressed, port, False, True)
    name = host.lower().removesuffix(".")
    if "*" in name:
        raise HostPatternError(f"{text[:80]!r}: '*' may only start a pattern, as '*.example.com'")
    if len(name) > 253 or not _NAME.fullmatch(name):
        raise HostPatternError(f"{text[:80]!r} is not a host name, an address or '*.' and a domain")
    if subdomains and "." not in name:
        raise HostPatternError(f"{text[:80]!r}: '*.' needs a domain with a dot (as '*.example.com'), not a top level")
    return HostPattern(name, port, subdomains, False)


def _split_port(text: str) -> tuple[str, int | None]:
    if text.startswith(("[", "*.[")):
        head, bracket, rest = text.partition("]")
        if not bracket:
            raise HostPatternError(f"{text[:80]!r}: an unclosed '['")
        host = head + "]"
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise HostPatternError(f"{text[:80]!r}: only ':port' may follow ']'")
        return host, _port(rest[1:], text)
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return host, _port(port, text)
    return text, None


def _port(text: str, pattern: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise HostPatternError(f"{pattern[:80]!r}: the port must be a number from 1 to 65535")
    return int(text)
