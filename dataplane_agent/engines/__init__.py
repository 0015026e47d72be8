"""Engine adapters: turn kernel commands into engine calls and engine output into events."""

from collections.abc import Iterable

from dataplane_agent.engines.base import (
    EngineAdapter,
    EngineConfig,
    EngineError,
    EngineManifest,
    EngineOutput,
    EngineSession,
    InteractionBroker,
    ToolDecision,
    ToolRequest,
)


def shipped_manifests(kinds: Iterable[str]) -> list[EngineManifest]:
    """The manifests of the adapters this agent ships for `kinds`, as its Hello declares them;
    a kind it has no adapter for has none (and is not offered)."""
    manifests = []
    for kind in kinds:
        if kind == "claude_code":
            from dataplane_agent.engines.claude_code import MANIFEST

            manifests.append(MANIFEST)
    return manifests


__all__ = [
    "EngineAdapter",
    "EngineConfig",
    "EngineError",
    "EngineManifest",
    "EngineOutput",
    "EngineSession",
    "InteractionBroker",
    "ToolDecision",
    "ToolRequest",
    "shipped_manifests",
]
