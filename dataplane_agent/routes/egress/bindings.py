"""Credential bindings as the egress proxy uses them: a secret and the requests that get it: those to
one of its hosts on its port, over TLS the proxy terminates, and over plain HTTP only when the
binding allows it (`serverkit.credential_reach`).

The secrets come from the control plane (RunnerService.ResolveCredentials) for the sessions placed
on this agent; `BindingSource` is the port the proxy asks through. A binding's secret never leaves
this process but in the header of a matching request: it is kept out of `repr` so no log line or
error shows it.
"""

from __future__ import annotations

import base64
import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from serverkit.host_patterns import HostPattern


class Scheme(enum.Enum):
    """How the secret is put into a request (astrabox.environments.v1.CredentialScheme)."""

    BEARER = "bearer"  # Authorization: Bearer <secret>
    BASIC = "basic"  # Authorization: Basic base64(<secret>), the secret being "user:password"
    HEADER = "header"  # <header>: <secret>


@dataclass(frozen=True, slots=True)
class CredentialBinding:
    """One credential and where it goes."""

    name: str
    hosts: tuple[HostPattern, ...]
    scheme: Scheme
    # HEADER: the header's name; otherwise "Authorization".
    header: str
    secret: str = field(repr=False)
    # The one port of `hosts` it goes to (a pattern naming another port matches nothing).
    port: int = 443
    # Plain-HTTP requests get it too (the control plane allows it for non-public hosts only).
    allow_plain_http: bool = False

    def matches(self, host: str, port: int, *, tls: bool) -> bool:
        """Whether a request to `host`:`port` gets the secret: `tls`, inside TLS the proxy terminates
        (a CONNECT it intercepts); otherwise plain HTTP."""
        if port != self.port or not (tls or self.allow_plain_http):
            return False
        return any(pattern.matches(host, port) for pattern in self.hosts)

    def header_line(self) -> tuple[str, str]:
        """The header (name, value) to set on a matching request."""
        if self.scheme is Scheme.BEARER:
            return "Authorization", f"Bearer {self.secret}"
        if self.scheme is Scheme.BASIC:
            return "Authorization", "Basic " + base64.b64encode(self.secret.encode()).decode("ascii")
        return self.header, self.secret


class BindingSource(Protocol):
    """Where the proxy gets a session's bindings."""

    async def bindings(self, session_id: str) -> Sequence[CredentialBinding]:
        """The session's credential bindings (none for a session whose environment binds none).
        CredentialUnavailable (dataplane_agent.credentials) when they cannot be had now; its
        message never holds a secret."""


class NoBindings:
    """An agent with no way to credentials: no session gets any."""

    async def bindings(self, session_id: str) -> Sequence[CredentialBinding]:
        return ()
