"""Engine adapters: turn kernel commands into engine calls and engine output into events."""

from dataplane_agent.engines.base import (
    EngineAdapter,
    EngineConfig,
    EngineError,
    EngineManifest,
    EngineOutput,
    EngineSession,
    InteractionBroker,
    PermissionModeRefused,
    ToolDecision,
    ToolRequest,
)

__all__ = [
    "EngineAdapter",
    "EngineConfig",
    "EngineError",
    "EngineManifest",
    "EngineOutput",
    "EngineSession",
    "InteractionBroker",
    "PermissionModeRefused",
    "ToolDecision",
    "ToolRequest",
]
