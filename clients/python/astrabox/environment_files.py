"""Environment files: the YAML an environment is written in, read by `astrabox environments apply`
and written by `astrabox environments show`.

    name: python-ci                                 # required; the rest is the EnvironmentSpec
    packages:
      apt: [git, "jq=1.6-2.1"]
      pip: ["requests==2.32.3", pytest]
      npm: ["@types/node@20"]
    setup: |                                        # a shell script run after the packages
      git config --global init.defaultBranch main
    variables: {APP_MODE: test}                     # not secrets: see credentials
    limits: {cpus: "1.5", memory: 2GiB, pids: 256, disk: 10GiB}
    isolation: gvisor                               # only agents whose sandboxes run under gVisor
    network:
      mode: limited                                 # none | limited | unrestricted
      allowed_hosts: [api.github.com, "*.corp.example:443"]
      package_registries: true                      # the Debian mirror, PyPI, npm
      mcp_servers: false                            # the agent's HTTP MCP servers
    credentials:                                    # added by the egress proxy; never in the sandbox
      - {credential: github-token, hosts: [github.com], scheme: basic}          # HTTPS, port 443
      - {credential: api-key, hosts: [api.corp.example], port: 8443, scheme: header, header: X-Api-Key}
      - {credential: dev-db, hosts: [db.corp.internal], port: 8080, allow_plain_http: true}

A binding's secret goes only to its hosts on its `port` (443 when not given), inside HTTPS;
`allow_plain_http: true` also sends it in plain HTTP, which the control plane allows only for
hosts that are clearly not public (localhost, names under .localhost, .internal, .local,
.home.arpa, loopback and private addresses).

A file holds one environment per YAML document (separated by `---`). Reading is strict, as for
agent files (`astrabox._yaml_nodes`): an unknown or repeated key, a value of the wrong type, a size
or count over environment.proto's limits is an `EnvironmentFileError` naming the file, the line,
the key and what is valid there. What only the server can tell (a package's syntax, a reserved
variable, a host pattern) it refuses naming the spec's field.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import yaml

from astrabox._yaml_nodes import Dumper, YamlNodes, parse_file, read_file
from astrabox.environments.v1 import environment_pb2 as epb
from astrabox.errors import EnvironmentFileError

__all__ = ["EnvironmentFile", "dump", "load", "parse"]

MAX_PACKAGES = 256
MAX_SETUP_BYTES = 64 * 1024
MAX_VARIABLES = 128
MAX_VARIABLE_BYTES = 4096
MAX_ALLOWED_HOSTS = 256
MAX_CREDENTIALS = 64
MAX_BINDING_HOSTS = 64

_NAME = re.compile(r"[a-z][a-z0-9-]{0,63}")
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4}
_UNITS |= {f"{u}I": 1024 ** (i + 1) for i, u in enumerate("KMGT")}
_MODES = {
    "none": epb.NETWORK_MODE_NONE,
    "limited": epb.NETWORK_MODE_LIMITED,
    "unrestricted": epb.NETWORK_MODE_UNRESTRICTED,
}
_SCHEMES = {
    "bearer": epb.CREDENTIAL_SCHEME_BEARER,
    "basic": epb.CREDENTIAL_SCHEME_BASIC,
    "header": epb.CREDENTIAL_SCHEME_HEADER,
}
_TOP = ("name", "packages", "setup", "variables", "limits", "isolation", "network", "credentials")
# What `isolation` may ask of an agent's sandboxes (absent: any agent's).
_ISOLATIONS = {"gvisor": "gvisor"}


@dataclass(frozen=True, slots=True)
class EnvironmentFile:
    """One environment of a file: its name, its definition, and where it was written ("FILE:LINE")."""

    name: str
    spec: epb.EnvironmentSpec
    source: str


def load(path: str | os.PathLike[str]) -> list[EnvironmentFile]:
    """The environments of the file at `path`, in order."""
    path = Path(path)
    text = read_file(path, EnvironmentFileError)
    return parse(text, source=str(path))


def parse(text: str, *, source: str = "<environment file>") -> list[EnvironmentFile]:
    """The environments of `text` (an environment file's content), named `source` in errors."""
    return parse_file(
        text,
        source,
        EnvironmentFileError,
        "environment",
        lambda loader: _Reader(YamlNodes(source, loader, EnvironmentFileError, "environment")).environment,
    )


class _Reader:
    def __init__(self, nodes: YamlNodes) -> None:
        self._nodes = nodes

    def environment(self, node: yaml.Node) -> EnvironmentFile:
        nodes = self._nodes
        fields = nodes.mapping(node, "", _TOP, required=("name",))
        name = nodes.text(fields["name"], "name")
        if not _NAME.fullmatch(name):
            nodes.fail(
                fields["name"], "name", f"{name!r} is not 1-64 characters of a-z, 0-9 and -, starting with a letter"
            )
        spec = epb.EnvironmentSpec()
        if "packages" in fields:
            packages = nodes.mapping(fields["packages"], "packages", ("apt", "pip", "npm"))
            spec.packages.SetInParent()
            for manager, value in packages.items():
                getattr(spec.packages, manager).extend(nodes.texts(value, f"packages.{manager}", MAX_PACKAGES))
        if "setup" in fields:
            spec.setup_script = nodes.text(fields["setup"], "setup", most=MAX_SETUP_BYTES)
        if "variables" in fields:
            variables = nodes.mapping(fields["variables"], "variables", None)
            if len(variables) > MAX_VARIABLES:
                nodes.fail(
                    fields["variables"], "variables", f"{len(variables)} entries, over the limit of {MAX_VARIABLES}"
                )
            for key, value in variables.items():
                spec.variables[key] = self._variable(value, f"variables.{key}")
        if "limits" in fields:
            self._limits(fields["limits"], spec.limits)
        if "isolation" in fields:
            spec.isolation = self._choice(fields["isolation"], "isolation", _ISOLATIONS)
        if "network" in fields:
            self._network(fields["network"], spec.network)
        if "credentials" in fields:
            for i, binding in enumerate(nodes.sequence(fields["credentials"], "credentials", most=MAX_CREDENTIALS)):
                self._binding(binding, f"credentials[{i}]", spec.credentials.add())
        return EnvironmentFile(name, spec, nodes.where(node))

    def _variable(self, node: yaml.Node, what: str) -> str:
        """A variable's value: text, or a number or true/false written as YAML has it."""
        value = self._nodes.scalar(node, what, ("str", "int", "float", "bool"), "text")
        text = str(node.value) if not isinstance(value, str) else value
        if len(text.encode()) > MAX_VARIABLE_BYTES:
            self._nodes.fail(node, what, f"{len(text.encode())} bytes, over the limit of {MAX_VARIABLE_BYTES}")
        return text

    def _limits(self, node: yaml.Node, limits: epb.ResourceLimits) -> None:
        fields = self._nodes.mapping(node, "limits", ("cpus", "memory", "pids", "disk"))
        limits.SetInParent()
        if "cpus" in fields:
            value = self._nodes.scalar(fields["cpus"], "limits.cpus", ("str", "int", "float"), 'cores such as "1.5"')
            try:
                cores = Decimal(str(value))
            except InvalidOperation:
                self._nodes.fail(fields["cpus"], "limits.cpus", f"{value!r} is not a number of cores such as 1.5")
            if not cores.is_finite() or cores < 0 or cores > 100_000:
                self._nodes.fail(fields["cpus"], "limits.cpus", f"{value!r} is not a number of cores, 0 or more")
            limits.cpu_millis = int(cores * 1000)
        if "pids" in fields:
            limits.pids = self._nodes.count(fields["pids"], "limits.pids")
        for key, target in (("memory", "memory_bytes"), ("disk", "disk_bytes")):
            if key in fields:
                setattr(limits, target, self._bytes(fields[key], f"limits.{key}"))

    def _bytes(self, node: yaml.Node, what: str) -> int:
        value = self._nodes.scalar(node, what, ("str", "int"), "a size such as 512MiB or 2GiB")
        match = _SIZE.fullmatch(str(value).strip())
        if match is None:
            self._nodes.fail(node, what, f"{value!r} is not a size such as 512MiB, 2GiB or 1000000 (bytes)")
        unit = (match.group(2) or "").upper().removesuffix("B")
        size = int(Decimal(match.group(1)) * _UNITS[unit])
        if size >= 2**63:
            self._nodes.fail(node, what, f"{value!r} is too large")
        return size

    def _network(self, node: yaml.Node, network: epb.NetworkPolicy) -> None:
        keys = ("mode", "allowed_hosts", "package_registries", "mcp_servers")
        fields = self._nodes.mapping(node, "network", keys)
        network.SetInParent()
        if "mode" in fields:
            network.mode = self._choice(fields["mode"], "network.mode", _MODES)
        if "allowed_hosts" in fields:
            network.allowed_hosts.extend(
                self._nodes.texts(fields["allowed_hosts"], "network.allowed_hosts", MAX_ALLOWED_HOSTS)
            )
        for key, target in (("package_registries", "allow_package_registries"), ("mcp_servers", "allow_mcp_servers")):
            if key in fields:
                setattr(network, target, self._nodes.scalar(fields[key], f"network.{key}", ("bool",), "true or false"))

    def _binding(self, node: yaml.Node, what: str, binding: epb.CredentialBinding) -> None:
        fields = self._nodes.mapping(
            node,
            what,
            ("credential", "hosts", "port", "allow_plain_http", "scheme", "header"),
            required=("credential", "hosts"),
        )
        binding.credential = self._nodes.text(fields["credential"], f"{what}.credential", empty=False)
        binding.hosts.extend(self._nodes.texts(fields["hosts"], f"{what}.hosts", MAX_BINDING_HOSTS))
        if "port" in fields:
            port = self._nodes.scalar(fields["port"], f"{what}.port", ("int",), "a port from 1 to 65535")
            if not 1 <= port <= 65535:
                self._nodes.fail(fields["port"], f"{what}.port", f"{port} is not a port from 1 to 65535")
            binding.port = port
        if "allow_plain_http" in fields:
            binding.allow_plain_http = self._nodes.scalar(
                fields["allow_plain_http"], f"{what}.allow_plain_http", ("bool",), "true or false"
            )
        if "scheme" in fields:
            binding.scheme = self._choice(fields["scheme"], f"{what}.scheme", _SCHEMES)
        if "header" in fields:
            binding.header = self._nodes.text(fields["header"], f"{what}.header")

    def _choice(self, node: yaml.Node, what: str, choices: dict[str, Any]) -> Any:
        name = self._nodes.text(node, what)
        if name not in choices:
            self._nodes.fail(node, what, f"unknown value {name!r}; valid: {', '.join(choices)}")
        return choices[name]


def dump(name: str, spec: epb.EnvironmentSpec) -> str:
    """The environment file of the environment `name` defined by `spec`: `parse` reads it back to the
    same spec."""
    document: dict[str, Any] = {"name": name}
    packages = {m: list(getattr(spec.packages, m)) for m in ("apt", "pip", "npm") if getattr(spec.packages, m)}
    if packages:
        document["packages"] = packages
    if spec.setup_script:
        document["setup"] = spec.setup_script
    if spec.variables:
        document["variables"] = dict(sorted(spec.variables.items()))
    limits = {
        key: value
        for key, value in (
            ("cpus", str(Decimal(spec.limits.cpu_millis) / 1000) if spec.limits.cpu_millis else None),
            ("memory", _size(spec.limits.memory_bytes)),
            ("pids", spec.limits.pids or None),
            ("disk", _size(spec.limits.disk_bytes)),
        )
        if value is not None
    }
    if limits:
        document["limits"] = limits
    if spec.isolation:
        document["isolation"] = spec.isolation
    if spec.HasField("network"):
        network: dict[str, Any] = {}
        modes = {v: k for k, v in _MODES.items()}
        if spec.network.mode in modes:
            network["mode"] = modes[spec.network.mode]
        if spec.network.allowed_hosts:
            network["allowed_hosts"] = list(spec.network.allowed_hosts)
        if spec.network.allow_package_registries:
            network["package_registries"] = True
        if spec.network.allow_mcp_servers:
            network["mcp_servers"] = True
        document["network"] = network
    if spec.credentials:
        schemes = {v: k for k, v in _SCHEMES.items()}
        document["credentials"] = [
            {
                "credential": b.credential,
                "hosts": list(b.hosts),
                **({"port": b.port} if b.port else {}),
                **({"allow_plain_http": True} if b.allow_plain_http else {}),
                **({"scheme": schemes[b.scheme]} if b.scheme in schemes else {}),
                **({"header": b.header} if b.header else {}),
            }
            for b in spec.credentials
        ]
    return yaml.dump(document, Dumper=Dumper, sort_keys=False, allow_unicode=True, width=100)


def _size(value: int) -> str | None:
    """Bytes in the largest binary unit that holds them whole ("2GiB"), or None for 0."""
    if not value:
        return None
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value % factor == 0:
            return f"{value // factor}{unit}"
    return str(value)
