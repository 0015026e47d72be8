"""The sandbox driver contract shared by every driver (local, docker)."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


class SandboxError(Exception):
    """A sandbox could not be created, used or destroyed."""


class DestroyVerdict(enum.Enum):
    """What a destroy attempt established about that exact sandbox."""

    CONFIRMED = "confirmed"  # it is gone; it may be forgotten
    UNCONFIRMED = "unconfirmed"  # we could not tell; keep it and retry later
    REFUSED = "refused"  # it is not ours to destroy (another owner uses it)


@dataclass(frozen=True, slots=True)
class SandboxSpec:
    """What a session asks of its sandbox."""

    session_id: str
    agent_id: str
    # Environment the sandboxed programs see; nothing else of the agent's leaks in.
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Sandbox:
    """A created sandbox, as the agent remembers it."""

    sandbox_id: str
    driver: str
    session_id: str
    # The writable workspace as the agent sees it on the host.
    workspace: Path
    # Where the workspace appears inside the sandbox.
    inner_workspace: str
    # A private home directory for the sandboxed programs (host path).
    home: Path


class SandboxDriver(Protocol):
    """Creates, enters and destroys sandboxes."""

    name: str

    async def probe(self) -> None:
        """Raise SandboxError with an actionable message if the driver cannot run here."""

    async def create(self, spec: SandboxSpec) -> Sandbox:
        """Create (or re-open, if it already exists) the session's sandbox."""

    async def launcher(self, sandbox: Sandbox, program: Sequence[str], env: Mapping[str, str]) -> Path:
        """Write an executable on the host that runs `program` (plus its own
        arguments) inside the sandbox with exactly `env` as its environment, with
        stdin/stdout/stderr connected. The SDK spawns it as the CLI."""

    async def destroy(self, sandbox: Sandbox) -> DestroyVerdict:
        """Destroy the sandbox and its workspace; report what is known."""
