"""Engines started ahead of their sessions, in the warm pool's sandboxes.

Starting the Claude Code CLI takes a few hundred milliseconds: most of a new
session's ready time even when its sandbox comes from the warm pool. So the
pool starts the agent's default engine in every sandbox it prepares, before
any conversation, and a new session adopts it (`EngineSession.adopt`): its
permission mode and model are applied with control requests and its tool
approvals go to the session from then on.

The engine's model credential is the one the route issued to the pool
sandbox, never the real key; the route attributes its requests to the session
once the session adopts it (`ModelAccess.hand_over`). Until then nobody can
approve a tool: the engine has no conversation and runs none.

A session that cannot use the engine (another engine kind, a conversation to
resume) gets a fresh one, and the pre-started engine is closed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import structlog

from dataplane_agent.engines.base import EngineAdapter, EngineConfig, EngineSession, ToolDecision, ToolRequest
from dataplane_agent.routes.model import ModelAccess
from dataplane_agent.sandboxes.base import Sandbox, SandboxDriver

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class WarmEngineSettings:
    """Which engine the pool starts, and how; seconds."""

    engine: str = "claude_code"
    # The control plane's default mode, so most sessions need no switch (a switch is one control
    # request); the engine can be switched to any other (engines/claude_code.py launches it so).
    permission_mode: str = "bypassPermissions"
    start_timeout: float = 120.0


class _NobodyYet:
    """The interactions broker of an engine no session has adopted: it has no user to ask."""

    async def ask(self, request: ToolRequest) -> ToolDecision:
        return ToolDecision(allow=False, message="This engine has not been handed to a session yet.")


class EngineWarmer:
    """Starts the agent's default engine in a sandbox that has no session yet."""

    def __init__(
        self,
        adapter: EngineAdapter,
        driver: SandboxDriver,
        model: ModelAccess,
        settings: WarmEngineSettings = WarmEngineSettings(),
    ) -> None:
        self._adapter = adapter
        self._driver = driver
        self._model = model
        self._settings = settings

    @property
    def kind(self) -> str:
        return self._adapter.kind

    async def start(self, sandbox: Sandbox) -> EngineSession:
        """The engine, connected inside `sandbox`, with the credential issued to that sandbox."""
        config = EngineConfig(
            permission_mode=self._settings.permission_mode,
            env=self._model.env(sandbox.session_id),
            # Set, so that the engine routes its approvals to a broker, which adoption replaces.
            interactions=_NobodyYet(),
        )
        async with asyncio.timeout(self._settings.start_timeout):
            engine = await self._adapter.start(sandbox, self._driver, config)
        log.debug("engine_prestarted", sandbox_id=sandbox.sandbox_id, engine=self.kind)
        return engine
