"""Sandbox drivers: the isolated places where an engine's CLI and its tools run."""

from dataplane_agent.sandboxes.base import (
    DestroyVerdict,
    Sandbox,
    SandboxDriver,
    SandboxError,
    SandboxSpec,
)

__all__ = ["DestroyVerdict", "Sandbox", "SandboxDriver", "SandboxError", "SandboxSpec"]
