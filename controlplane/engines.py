"""Capability manifests of the engines the platform can run.

The platform has no permission-mode vocabulary of its own: the modes come
from the engine's SDK and requests are validated against them.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass

from claude_agent_sdk.types import PermissionMode


@dataclass(frozen=True, slots=True)
class EngineManifest:
    kind: str
    permission_modes: tuple[str, ...]
    default_permission_mode: str
    supports_interactions: bool
    supports_background_tasks: bool
    supports_server_info: bool


CLAUDE_CODE = EngineManifest(
    kind="claude_code",
    permission_modes=tuple(typing.get_args(PermissionMode)),
    # Tools run inside the sandbox, which is the isolation boundary; sessions
    # that want a human to approve each tool ask for "default".
    default_permission_mode="bypassPermissions",
    supports_interactions=True,
    supports_background_tasks=True,
    supports_server_info=True,
)

MANIFESTS = {CLAUDE_CODE.kind: CLAUDE_CODE}
DEFAULT_ENGINE = CLAUDE_CODE.kind
