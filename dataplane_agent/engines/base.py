"""The engine adapter contract."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from dataplane_agent.sandboxes.base import Sandbox, SandboxDriver


class EngineError(Exception):
    """The engine could not be started or failed mid-turn."""


@dataclass(frozen=True, slots=True)
class EngineOutput:
    """One message the engine's SDK produced, verbatim.

    `payload` holds every field of the SDK message (JSON-serialisable); it is
    data, the one dict that travels between modules.
    """

    type_name: str
    payload: dict[str, Any]

    @property
    def ends_turn(self) -> bool:
        return self.type_name == "ResultMessage"


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How to start an engine session."""

    permission_mode: str = ""
    model: str = ""
    # The engine's own conversation id to resume; empty starts a new one.
    resume_engine_session_id: str = ""
    # Variables the CLI needs (model base URL, key, telemetry switches).
    env: Mapping[str, str] = field(default_factory=dict)


class EngineSession(Protocol):
    """A connected engine running inside one sandbox."""

    @property
    def engine_session_id(self) -> str:
        """The engine's conversation id, empty until the engine reported it."""

    def run_turn(self, text: str, permission_mode: str = "") -> AsyncIterator[EngineOutput]:
        """Send one user message; yield every SDK message up to and including
        the turn's ResultMessage."""

    async def close(self) -> None:
        """Disconnect and stop the engine's process."""


class EngineAdapter(Protocol):
    """Starts engine sessions of one kind."""

    kind: str

    async def start(self, sandbox: Sandbox, driver: SandboxDriver, config: EngineConfig) -> EngineSession:
        """Start the engine's CLI inside `sandbox` and connect to it."""
