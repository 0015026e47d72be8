"""The server's release, which the agent sends in Hello and the control plane checks it against.

Both halves ship in one distribution (astrabox-server), so one version names both; an agent and a
control plane of different releases meet during a rolling upgrade (the control plane first, then
the agents: see README, Operations). The rule the control plane applies (`compatibility`): the
same major version, and no older than `MINIMUM_AGENT_VERSION`, the oldest agent whose Runner
messages this control plane still understands. Raise it when a change to the Runner stream leaves
older agents behind.
"""

from __future__ import annotations

from importlib import metadata

# What pyproject.toml says, for a checkout run without installing it.
_SOURCE_VERSION = "0.1.0"
MINIMUM_AGENT_VERSION = "0.1.0"


def _installed() -> str:
    try:
        return metadata.version("astrabox-server")
    except metadata.PackageNotFoundError:
        return _SOURCE_VERSION


VERSION = _installed()


def parse(text: str) -> tuple[int, int, int] | None:
    """MAJOR.MINOR.PATCH as numbers (anything after a '+' or '-' ignored); None when it is not one."""
    core = text.split("+", 1)[0].split("-", 1)[0]
    parts = core.split(".")
    if len(parts) != 3 or not all(part.isdigit() and len(part) <= 9 for part in parts):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2])


def compatibility(agent_version: str, own: str = VERSION, minimum: str = MINIMUM_AGENT_VERSION) -> str | None:
    """Why a control plane of version `own` cannot run with an agent of `agent_version`; None when it can."""
    takes = f"this control plane ({own}) takes agents {minimum} or newer of major version {own.split('.', 1)[0]}"
    if not agent_version:
        return f"the agent sent no version (it predates {minimum}): {takes}; upgrade the agent"
    shown = agent_version[:40]  # the agent's text goes back to it and into the log: bounded
    found, mine, oldest = parse(agent_version), parse(own), parse(minimum)
    assert mine is not None and oldest is not None, "the server's own versions are MAJOR.MINOR.PATCH"
    if found is None:
        return f"agent version {shown!r} is not MAJOR.MINOR.PATCH: {takes}"
    if found[0] != mine[0]:
        newer = found[0] > mine[0]
        return f"agent version {shown} is of another major version: {takes}; upgrade the " + (
            "control plane first" if newer else "agent"
        )
    if found < oldest:
        return f"agent version {shown} is too old: {takes}; upgrade the agent"
    return None
