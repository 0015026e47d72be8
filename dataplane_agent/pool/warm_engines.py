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

A session from an agent definition needs an engine launched with its version's configuration.
`warm_agent` says whether one may be started ahead for it, and under which key: the project, the
agent, the version, the engine and a digest of the configuration (its engine, permission mode and
model left out: adoption applies those). The pool hands such an engine only to a session with the
same key, and the engine itself takes on only a session whose configuration is the one it was
launched with (`ClaudeCodeSession.adopt`). Never warmed: a configuration with HTTP MCP servers (the
agent fetches their credentials for one session) or custom tools (they answer to one session's
client), nor a session that pins no agent version or whose project is unknown.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass

import structlog

from astrabox.agents.v1 import agent_pb2
from dataplane_agent.engines.agent_config import AgentConfig
from dataplane_agent.engines.base import EngineAdapter, EngineConfig, EngineSession, ToolDecision, ToolRequest
from dataplane_agent.pool.warm_pool import WarmAgent
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

    async def start(self, sandbox: Sandbox, agent: AgentConfig | None = None) -> EngineSession:
        """The engine, connected inside `sandbox`, with the credential issued to that sandbox and
        `agent`'s configuration (None: the engine's defaults)."""
        config = EngineConfig(
            permission_mode=self._settings.permission_mode,
            env=self._model.env(sandbox.session_id),
            # Set, so that the engine routes its approvals to a broker, which adoption replaces.
            interactions=_NobodyYet(),
            agent_config=agent or AgentConfig(),
        )
        async with asyncio.timeout(self._settings.start_timeout):
            engine = await self._adapter.start(sandbox, self._driver, config)
        log.debug("engine_prestarted", sandbox_id=sandbox.sandbox_id, engine=self.kind, agent=agent is not None)
        return engine


def warm_agent(engine: str, project_id: str, agent_id: str, agent_version: int, config: bytes) -> WarmAgent | None:
    """The agent version a new session's engine may be started ahead for (`config` the serialized
    AgentSpec the session runs), or None when it may not (see the module docstring)."""
    if not (engine and project_id and agent_id and agent_version > 0 and config):
        return None
    spec = agent_pb2.AgentSpec.FromString(config)
    agent = AgentConfig.from_proto(spec)
    if (
        agent.is_default
        or agent.custom_tools
        or agent.subagents
        or any(server.stdio is None for server in agent.mcp_servers)
    ):
        return None
    spec.ClearField("engine")
    spec.ClearField("permission_mode")
    spec.ClearField("model")
    digest = hashlib.sha256()
    for part in (engine, project_id, agent_id, str(agent_version)):
        digest.update(part.encode() + b"\0")
    digest.update(spec.SerializeToString(deterministic=True))
    return WarmAgent(key=digest.hexdigest(), config=agent)
