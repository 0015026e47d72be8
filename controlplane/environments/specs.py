"""What an environment definition (an EnvironmentSpec) may hold, its canonical form and its digests.

`check` raises InvalidArgument with reason INVALID_ENVIRONMENT_SPEC, the offending field's path in
the metadata (`spec.packages.pip[2]`) and a message that says what is valid, quoting the bad value
only through `validation.echo`. The bounds are the ones environment.proto documents:

- packages: at most 256 per manager, each a package name pinned the manager's way and nothing else.
  An entry reaches a package manager's command line in the layer's build: an option (`-e`,
  `--index-url`), a URL, a path, a VCS reference or whitespace would make it install something
  else than a package of the registry, or from somewhere the network policy does not see;
- the setup script at most 64 KiB, no NUL;
- variables: at most 128, names of [A-Za-z_][A-Za-z0-9_]*, never one AstraBox sets itself
  (`RESERVED_VARIABLES`, `RESERVED_PREFIXES`: a PATH, a proxy, a CA bundle or a preloaded
  library of the project's would take the sandbox's traffic or programs around what the agent
  enforces), values at most 4 KiB without NUL;
- limits 0 (the agent's default) or more;
- isolation empty or "gvisor" (placed only on agents whose sandboxes run under gVisor);
- the network policy's patterns through `serverkit.host_patterns` (the egress proxy matches with
  the same code), allowed_hosts only with LIMITED, at most 256;
- credential bindings: a credential's name, 1-64 host patterns without a port, a port 0 (443) to
  65535, a header's name for HEADER only; `allow_plain_http` only where every host is non-public
  (`serverkit.credential_reach`: localhost, .localhost, .internal, .local, .home.arpa, loopback and
  private addresses), refused otherwise with reason PLAIN_HTTP_CREDENTIAL_TO_PUBLIC_HOST: the
  secret would cross the internet readable.

`canonical` is the form stored and digested (`named_definitions.canonical`). `build_digest` is the
SHA-256 of the canonical form of an EnvironmentSpec that holds only `packages` and `setup_script`
(and, with a setup script, `network`: the script runs under that policy, so what it could fetch is
part of what is built): what goes into the layer, so versions (and environments) that differ only
in variables, limits or credentials share one layer. A spec with no package and no setup script has
nothing to build: its build digest is empty, no agent builds anything for it, and its sessions start
on the plain sandbox (with its variables, limits and network policy).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from astrabox.environments.v1 import environment_pb2 as epb
from controlplane import named_definitions
from controlplane.errors import InvalidArgument
from controlplane.validation import echo
from serverkit import credential_reach, host_patterns

INVALID_ENVIRONMENT_SPEC = "INVALID_ENVIRONMENT_SPEC"
PLAIN_HTTP_CREDENTIAL_TO_PUBLIC_HOST = "PLAIN_HTTP_CREDENTIAL_TO_PUBLIC_HOST"

MAX_PACKAGES = 256
MAX_PACKAGE_BYTES = 256
MAX_SETUP_SCRIPT_BYTES = 64 * 1024
MAX_VARIABLES = 128
MAX_VARIABLE_VALUE_BYTES = 4096
MAX_ALLOWED_HOSTS = 256
MAX_CREDENTIALS = 64
MAX_BINDING_HOSTS = 64
# What an environment's sessions may require of their agent's sandboxes (empty: any).
ISOLATIONS = ("", "gvisor")

# Debian: a package name, optionally `=version` (epoch, upstream, revision).
_APT = re.compile(r"[a-z0-9][a-z0-9+.-]{0,127}(=[A-Za-z0-9][A-Za-z0-9.+~:-]{0,127})?")
# PEP 508 without URLs, markers or whitespace: a name, extras, version specifiers.
_PIP_NAME = r"[A-Za-z0-9]([A-Za-z0-9._-]{0,126}[A-Za-z0-9])?"
_PIP_VERSION = r"(~=|===|==|!=|<=|>=|<|>)[A-Za-z0-9.*+!_-]{1,64}"
_PIP = re.compile(rf"{_PIP_NAME}(\[{_PIP_NAME}(,{_PIP_NAME})*\])?({_PIP_VERSION}(,{_PIP_VERSION})*)?")
# npm: a (scoped) name, optionally `@range` — a range, never a URL, path, tag of a git host or alias.
_NPM_NAME = r"[a-z0-9][a-z0-9._-]{0,213}"
_NPM = re.compile(rf"(@{_NPM_NAME}/)?{_NPM_NAME}(@[A-Za-z0-9.^~<>=*|+_-]{{1,64}})?")
_PACKAGE_SYNTAX = {
    "apt": (_APT, 'a Debian package name, optionally pinned as "name=version"'),
    "pip": (_PIP, 'a requirement such as "name", "name==1.2" or "name[extra]>=1,<2" (no URL, option or marker)'),
    "npm": (_NPM, 'a package name (scoped too), optionally pinned as "name@version" (no URL, path or git host)'),
}

_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# What AstraBox sets in a sandbox, or what would take its traffic or programs around the agent.
RESERVED_VARIABLES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "SHELL",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "ALL_PROXY",
        "FTP_PROXY",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "GIT_SSL_CAINFO",
        "PIP_CERT",
        "NODE_OPTIONS",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "IS_SANDBOX",
        "DISABLE_AUTOUPDATER",
        "DISABLE_ERROR_REPORTING",
        "DISABLE_TELEMETRY",
    }
)
RESERVED_PREFIXES = ("ANTHROPIC_", "ASTRABOX_", "CLAUDE_", "LD_", "DYLD_")


def refused(field: str, message: str) -> InvalidArgument:
    return InvalidArgument(field, message, INVALID_ENVIRONMENT_SPEC)


def _size(value: str) -> int:
    return len(value.encode("utf-8", "surrogatepass"))


def check(spec: epb.EnvironmentSpec, field: str = "spec") -> None:
    """Every bound environment.proto documents, before any database or agent sees the definition."""
    for manager in ("apt", "pip", "npm"):
        _packages(f"{field}.packages.{manager}", manager, getattr(spec.packages, manager))
    if _size(spec.setup_script) > MAX_SETUP_SCRIPT_BYTES:
        raise refused(
            f"{field}.setup_script",
            f"{field}.setup_script must be at most {MAX_SETUP_SCRIPT_BYTES} bytes, got {_size(spec.setup_script)}",
        )
    if "\x00" in spec.setup_script:
        raise refused(f"{field}.setup_script", f"{field}.setup_script must not contain NUL characters")
    _variables(f"{field}.variables", spec.variables)
    _limits(f"{field}.limits", spec.limits)
    _network(f"{field}.network", spec.network)
    if len(spec.credentials) > MAX_CREDENTIALS:
        raise refused(f"{field}.credentials", f"{field}.credentials may have at most {MAX_CREDENTIALS} entries")
    for index, binding in enumerate(spec.credentials):
        _binding(f"{field}.credentials[{index}]", binding)
    if spec.isolation not in ISOLATIONS:
        raise refused(f"{field}.isolation", f"{field}.isolation must be empty or gvisor, got {echo(spec.isolation)}")


def _packages(field: str, manager: str, entries: Sequence[str]) -> None:
    if len(entries) > MAX_PACKAGES:
        raise refused(field, f"{field} may have at most {MAX_PACKAGES} entries, got {len(entries)}")
    pattern, explain = _PACKAGE_SYNTAX[manager]
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        if _size(entry) > MAX_PACKAGE_BYTES or not pattern.fullmatch(entry):
            raise refused(f"{field}[{index}]", f"{field}[{index}] must be {explain}, got {echo(entry)}")
        if entry in seen:
            raise refused(f"{field}[{index}]", f"{echo(entry)} appears twice in {field}")
        seen.add(entry)


def reserved(name: str) -> bool:
    """Whether AstraBox keeps the variable `name` for itself (in any case: `http_proxy` too)."""
    upper = name.upper()
    return upper in RESERVED_VARIABLES or upper.startswith(RESERVED_PREFIXES)


def _variables(field: str, variables: Mapping[str, str]) -> None:
    items = sorted(variables.items())
    if len(items) > MAX_VARIABLES:
        raise refused(field, f"{field} may have at most {MAX_VARIABLES} entries, got {len(items)}")
    for name, value in items:
        if not _VARIABLE.fullmatch(name):
            raise refused(field, f"{field} names must be [A-Za-z_][A-Za-z0-9_]* (at most 128), got {echo(name)}")
        if reserved(name):
            raise refused(
                f"{field}[{name}]",
                f"{field}[{name}]: AstraBox sets {name} itself (its PATH, HOME, proxies, CA bundles,"
                f" {', '.join(p + '*' for p in RESERVED_PREFIXES)} are its own); choose another name",
            )
        if _size(value) > MAX_VARIABLE_VALUE_BYTES or "\x00" in value:
            raise refused(
                f"{field}[{name}]",
                f"{field}[{name}] must be at most {MAX_VARIABLE_VALUE_BYTES} bytes without NUL, got {_size(value)}",
            )


def _limits(field: str, limits: epb.ResourceLimits) -> None:
    for name in ("cpu_millis", "memory_bytes", "pids", "disk_bytes"):
        value = getattr(limits, name)
        if value < 0:
            raise refused(f"{field}.{name}", f"{field}.{name} must be 0 (the agent's default) or more, got {value}")


def _network(field: str, network: epb.NetworkPolicy) -> None:
    if network.mode not in epb.NetworkMode.values():
        raise refused(f"{field}.mode", f"{field}.mode must be one of NONE, LIMITED, UNRESTRICTED, got {network.mode}")
    limited = network.mode == epb.NETWORK_MODE_LIMITED
    for name in ("allowed_hosts", "allow_package_registries", "allow_mcp_servers"):
        if getattr(network, name) and not limited:
            raise refused(
                f"{field}.{name}",
                f"{field}.{name} applies to mode LIMITED only (NONE reaches nothing, UNRESTRICTED any public host)",
            )
    if len(network.allowed_hosts) > MAX_ALLOWED_HOSTS:
        raise refused(f"{field}.allowed_hosts", f"{field}.allowed_hosts may have at most {MAX_ALLOWED_HOSTS} entries")
    _patterns(f"{field}.allowed_hosts", network.allowed_hosts)


def _patterns(field: str, patterns: Sequence[str]) -> list[host_patterns.HostPattern]:
    parsed = []
    for index, text in enumerate(patterns):
        try:
            parsed.append(host_patterns.parse(text))
        except host_patterns.HostPatternError as error:
            raise refused(f"{field}[{index}]", f"{field}[{index}] is no host pattern: {error}") from None
    return parsed


_CREDENTIAL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_HEADER_NAME = re.compile(r"[A-Za-z0-9-]{1,64}")


def _binding(field: str, binding: epb.CredentialBinding) -> None:
    if not _CREDENTIAL_NAME.fullmatch(binding.credential):
        raise refused(
            f"{field}.credential",
            f"{field}.credential must be a credential's name, 1-64 characters of [A-Za-z0-9_.-],"
            f" got {echo(binding.credential)}",
        )
    if not 1 <= len(binding.hosts) <= MAX_BINDING_HOSTS:
        raise refused(f"{field}.hosts", f"{field}.hosts must name 1 to {MAX_BINDING_HOSTS} host patterns")
    hosts = _patterns(f"{field}.hosts", binding.hosts)
    for index, pattern in enumerate(hosts):
        if pattern.port is not None:
            raise refused(
                f"{field}.hosts[{index}]",
                f"{field}.hosts[{index}] names a port ({echo(binding.hosts[index])}): write the host alone and"
                f" the port in {field}.port (0 or absent: 443)",
            )
    if not 0 <= binding.port <= 65535:
        raise refused(f"{field}.port", f"{field}.port must be a port from 1 to 65535 (0: 443), got {binding.port}")
    if binding.allow_plain_http:
        public = next((index for index, pattern in enumerate(hosts) if not credential_reach.non_public(pattern)), None)
        if public is not None:
            raise InvalidArgument(
                f"{field}.allow_plain_http",
                f"{field}.allow_plain_http would send credential {echo(binding.credential)} unencrypted to"
                f" {echo(binding.hosts[public])}, which may be on the internet: plain HTTP may carry a credential"
                f" only to localhost, names under .{', .'.join(credential_reach.PLAIN_HTTP_SUFFIXES)}"
                " and loopback or private addresses; reach the host over HTTPS and leave allow_plain_http false",
                PLAIN_HTTP_CREDENTIAL_TO_PUBLIC_HOST,
            )
    if binding.scheme not in epb.CredentialScheme.values():
        raise refused(f"{field}.scheme", f"{field}.scheme must be BEARER, BASIC or HEADER, got {binding.scheme}")
    if binding.scheme == epb.CREDENTIAL_SCHEME_HEADER:
        if not _HEADER_NAME.fullmatch(binding.header):
            raise refused(
                f"{field}.header",
                f"{field}.header must be an HTTP header's name (1-64 characters of [A-Za-z0-9-]) with scheme"
                f" HEADER, got {echo(binding.header)}",
            )
    elif binding.header:
        raise refused(f"{field}.header", f"{field}.header is for scheme HEADER only (the others use Authorization)")


def canonical(spec: epb.EnvironmentSpec) -> bytes:
    return named_definitions.canonical(spec)


def needs_layer(spec: epb.EnvironmentSpec) -> bool:
    """Whether the spec installs anything: a package of any manager, or a setup script."""
    packages = spec.packages
    return bool(packages.apt or packages.pip or packages.npm or spec.setup_script)


def build_digest(spec: epb.EnvironmentSpec) -> str:
    """EnvironmentVersion.build_digest: the SHA-256, hex, of the canonical form of an EnvironmentSpec
    holding only the spec's packages and setup script, and the network policy the script runs under
    (what its layer is built from); empty when there is nothing to build (no layer)."""
    if not needs_layer(spec):
        return ""
    built = epb.EnvironmentSpec(setup_script=spec.setup_script)
    built.packages.CopyFrom(spec.packages)
    if spec.setup_script and spec.HasField("network"):
        built.network.CopyFrom(spec.network)
    return named_definitions.digest(canonical(built))
