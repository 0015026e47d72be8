"""Capability manifests of engines, as the agents that run them declare them.

The platform has no engine vocabulary of its own: each agent's Hello carries
a manifest per engine it runs (its permission modes, the default one, what it
supports, its built-in tools), `Agents` keeps them beside the agent, and
requests are validated against them (`Agents.engine_manifest`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2

# The engine of a session whose creator names none (CreateSessionRequest.engine).
DEFAULT_ENGINE = "claude_code"


class ManifestInvalid(ValueError):
    """An agent declared a manifest the control plane cannot validate requests against."""


@dataclass(frozen=True, slots=True)
class EngineManifest:
    kind: str
    permission_modes: tuple[str, ...]
    default_permission_mode: str
    supports_interactions: bool
    supports_background_tasks: bool
    supports_server_info: bool
    # The built-in tools an agent definition may name (AgentSpec.tools); empty: the engine takes
    # no tool configuration.
    tools: tuple[str, ...] = ()

    @classmethod
    def from_proto(cls, manifest: runner_pb2.EngineManifest) -> EngineManifest:
        """From an agent's Hello; ManifestInvalid when requests could not be validated against it."""
        modes = tuple(manifest.permission_modes)
        if not manifest.kind:
            raise ManifestInvalid("an engine manifest has no kind")
        if not modes:
            raise ManifestInvalid(f"the manifest of engine {manifest.kind!r} declares no permission mode")
        default = manifest.default_permission_mode or modes[0]
        if default not in modes:
            raise ManifestInvalid(
                f"the default permission mode {default!r} of engine {manifest.kind!r}"
                f" is not one of its modes ({', '.join(modes)})"
            )
        return cls(
            kind=manifest.kind,
            permission_modes=modes,
            default_permission_mode=default,
            supports_interactions=manifest.supports_interactions,
            supports_background_tasks=manifest.supports_background_tasks,
            supports_server_info=manifest.supports_server_info,
            tools=tuple(manifest.tools),
        )

    @classmethod
    def from_json(cls, kind: str, value: Mapping[str, Any]) -> EngineManifest:
        """From its column value (`to_json`); one stored before manifests listed tools has none."""
        return cls(
            kind=kind,
            permission_modes=tuple(value["permission_modes"]),
            default_permission_mode=value["default_permission_mode"],
            supports_interactions=value["supports_interactions"],
            supports_background_tasks=value["supports_background_tasks"],
            supports_server_info=value["supports_server_info"],
            tools=tuple(value.get("tools", ())),
        )

    def to_json(self) -> dict[str, Any]:
        """As `agents.engine_manifests` keeps it, under its kind."""
        return {
            "permission_modes": list(self.permission_modes),
            "default_permission_mode": self.default_permission_mode,
            "supports_interactions": self.supports_interactions,
            "supports_background_tasks": self.supports_background_tasks,
            "supports_server_info": self.supports_server_info,
            "tools": list(self.tools),
        }


def declared_manifests(hello: runner_pb2.Hello) -> list[EngineManifest]:
    """The manifests of a Hello, each kind once; ManifestInvalid otherwise."""
    manifests = [EngineManifest.from_proto(m) for m in hello.engine_manifests]
    kinds = [m.kind for m in manifests]
    if duplicated := sorted({kind for kind in kinds if kinds.count(kind) > 1}):
        raise ManifestInvalid(f"engine {', '.join(map(repr, duplicated))} declared more than once")
    return manifests
