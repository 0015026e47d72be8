"""A session's network policy as the egress proxy applies it.

Built from the session's environment (StartRuntime.environment.spec.network; no environment: NONE)
and, for `allow_mcp_servers`, the hosts of its agent definition's HTTP MCP servers. The policy
decides on the name (and port) the sandbox asked for; where the name leads is checked afterwards,
on the addresses the proxy resolved (`refused_kind`: loopback, private and link-local addresses are
refused in every mode unless the operator allows their network), and the proxy connects to the
address it checked, so a name cannot be re-resolved elsewhere in between.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from astrabox.agents.v1 import agent_pb2
from astrabox.environments.v1 import environment_pb2
from serverkit import credential_reach
from serverkit.host_patterns import HostPattern, HostPatternError, parse

# The package registries `allow_package_registries` opens, unless the operator names others
# (`--package-registries`).
DEFAULT_PACKAGE_REGISTRIES = (
    "deb.debian.org",
    "security.debian.org",
    "pypi.org",
    "files.pythonhosted.org",
    "registry.npmjs.org",
)


class Mode(enum.Enum):
    NONE = "none"
    LIMITED = "limited"
    UNRESTRICTED = "unrestricted"


def parse_patterns(text: str | Iterable[str]) -> tuple[HostPattern, ...]:
    """Host patterns from a comma-separated setting or a list; HostPatternError naming a bad one."""
    parts = text.split(",") if isinstance(text, str) else text
    return tuple(parse(part.strip()) for part in parts if part.strip())


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """Where one session's sandbox may connect."""

    mode: Mode
    allowed: tuple[HostPattern, ...] = ()
    # Why each pattern set is there, for refusal messages.
    registries: tuple[HostPattern, ...] = ()
    mcp_servers: tuple[HostPattern, ...] = ()
    # The hosts the environment binds a credential to, each on its binding's port, and those of
    # them whose plain-HTTP requests get it too: only a request to one of them has the proxy ask
    # for the session's credentials (a session binding none never depends on the control plane).
    credential_hosts: tuple[HostPattern, ...] = ()
    plain_http_hosts: tuple[HostPattern, ...] = ()

    @classmethod
    def from_proto(
        cls,
        environment: environment_pb2.EnvironmentSpec | None,
        agent: agent_pb2.AgentSpec | None,
        registries: Sequence[HostPattern],
    ) -> EgressPolicy:
        """The policy of a session with `environment` (None or no network policy: NONE). A pattern
        that does not parse (the control plane validated it; an older one may not have) is left
        out rather than widening anything."""
        if environment is None or not environment.HasField("network"):
            return NONE
        network = environment.network
        tls = tuple(p for binding in environment.credentials for p in _bound(binding))
        plain = tuple(p for binding in environment.credentials if binding.allow_plain_http for p in _bound(binding))
        if network.mode == environment_pb2.NETWORK_MODE_UNRESTRICTED:
            return cls(Mode.UNRESTRICTED, credential_hosts=tls, plain_http_hosts=plain)
        if network.mode != environment_pb2.NETWORK_MODE_LIMITED:
            return NONE
        allowed = tuple(p for p in (_try_parse(text) for text in network.allowed_hosts) if p is not None)
        mcp: tuple[HostPattern, ...] = ()
        if network.allow_mcp_servers and agent is not None:
            mcp = tuple(p for p in (_mcp_host(server) for server in agent.mcp_servers) if p is not None)
        return cls(
            Mode.LIMITED,
            allowed=allowed,
            registries=tuple(registries) if network.allow_package_registries else (),
            mcp_servers=mcp,
            credential_hosts=tls,
            plain_http_hosts=plain,
        )

    @property
    def open(self) -> bool:
        """Whether the sandbox gets a way out at all (the proxy's environment variables)."""
        return self.mode is not Mode.NONE

    def binds(self, host: str, port: int, *, tls: bool) -> bool:
        """Whether the environment binds a credential to requests to `host`:`port`, inside TLS the
        proxy terminates (`tls`) or in plain HTTP."""
        patterns = self.credential_hosts if tls else self.plain_http_hosts
        return any(pattern.matches(host, port) for pattern in patterns)

    def refusal(self, host: str, port: int) -> str | None:
        """Why a connection to `host`:`port` is refused by the policy; None: it is allowed (its
        addresses are checked after resolution)."""
        if self.mode is Mode.UNRESTRICTED:
            return None
        if self.mode is Mode.NONE:
            return "this session's environment has no network access (network mode NONE)"
        for patterns in (self.allowed, self.registries, self.mcp_servers):
            if any(pattern.matches(host, port) for pattern in patterns):
                return None
        return "not in this environment's allowed_hosts (add it to the environment's network policy)"


NONE = EgressPolicy(Mode.NONE)


def _bound(binding: environment_pb2.CredentialBinding) -> tuple[HostPattern, ...]:
    """The binding's hosts on its port (`credential_reach.pinned`)."""
    patterns = (p for p in (_try_parse(text) for text in binding.hosts) if p is not None)
    return credential_reach.pinned(patterns, credential_reach.port(binding.port))


def _try_parse(text: str) -> HostPattern | None:
    try:
        return parse(text)
    except HostPatternError:
        return None


def _mcp_host(server: agent_pb2.McpServer) -> HostPattern | None:
    if server.WhichOneof("transport") != "http":
        return None
    url = urlsplit(server.http.url)
    if not url.hostname:
        return None
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        return None
    host = f"[{url.hostname}]" if ":" in url.hostname else url.hostname
    return _try_parse(f"{host}:{port}")
