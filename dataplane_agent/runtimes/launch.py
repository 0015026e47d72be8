"""Getting a session a sandbox and a connected engine.

`Launcher` is what a runtime's start needs of the sandbox driver, the engine
adapters, the model route and the warm pool: the sandbox spec of a session;
a sandbox claimed from the pool (with the engine the pool started in it) or
made by the driver; that engine adopted by the session, or a fresh one
started; the engine's server info; the session's git repository cloned
(`repository`); a sandbox destroyed after a failed start.
It records nothing: `runtimes.Runtimes` decides what is committed and
reported, and when.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import structlog

from astrabox.agents.v1 import agent_pb2
from astrabox.environments.v1 import environment_pb2
from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.base import EngineAdapter, EngineConfig, EngineSession
from dataplane_agent.environments.layers import BuildRequest, LayerStore
from dataplane_agent.environments.steps import LayerBuildError
from dataplane_agent.pool.warm_engines import warm_agent
from dataplane_agent.pool.warm_pool import Claimed, WarmAgent
from dataplane_agent.routes.egress.policy import EgressPolicy
from dataplane_agent.routes.egress.proxy import EgressProxy
from dataplane_agent.routes.model import ModelAccess
from dataplane_agent.runtimes import repository
from dataplane_agent.runtimes.disk_limit import MIB, MeasuredDiskLimit
from dataplane_agent.sandboxes.base import (
    AGENT_LABEL,
    SESSION_LABEL,
    DestroyVerdict,
    Sandbox,
    SandboxDriver,
    SandboxLimits,
    SandboxSpec,
)
from dataplane_agent.sandboxes.isolation import RUNC, isolation_refusal, offered
from dataplane_agent.turns.engine_calls import close_quietly, describe
from serverkit.waits import bounded

log = structlog.get_logger(__name__)


class SandboxPool(Protocol):
    """Prepared sandboxes (implemented by `pool.WarmPool`)."""

    async def claim(self, spec: SandboxSpec, agent: str = "") -> Claimed | None:
        """A ready sandbox rebound to `spec`'s session, maybe with an engine started in it (for the
        WarmAgent key `agent` if one is ready); None: none is ready (the caller creates one)."""

    def remember(self, spec: SandboxSpec) -> None:
        """A session started in the (not built-in) environment `spec` is made for: sandboxes for it
        may be kept too."""

    def remember_agent(self, agent: WarmAgent) -> None:
        """A session of `agent`'s version started: engines started with its configuration may be
        kept ready too."""


@dataclass(frozen=True, slots=True)
class RuntimeTimeouts:
    """Deadlines, in seconds, for the runtime's transitional steps."""

    create_sandbox: float = 120.0
    start_engine: float = 120.0
    destroy_sandbox: float = 60.0
    server_info: float = 30.0
    # A session's git repository cloned into its workspace (--git-clone-timeout).
    git_clone: float = 300.0


@dataclass(frozen=True, slots=True)
class SessionEnvironment:
    """What a session's environment asks of its sandbox: the layer it mounts and its variables."""

    layer: Path | None = None
    image: str = ""
    variables: Mapping[str, str] = field(default_factory=dict)
    limits: SandboxLimits = field(default_factory=SandboxLimits)

    @property
    def layered(self) -> bool:
        """It has a layer (a directory or an image) its sandboxes mount."""
        return self.layer is not None or bool(self.image)

    @property
    def plain(self) -> bool:
        """Its sandboxes are the built-in environment's (a warm pool's serve it)."""
        return not self.layered and not self.variables and self.limits == SandboxLimits()


class Launcher:
    """Sandboxes and engines for the sessions of one agent."""

    def __init__(
        self,
        *,
        agent_id: str,
        driver: SandboxDriver,
        engines: Mapping[str, EngineAdapter],
        model: ModelAccess,
        pool: SandboxPool | None,
        timeouts: RuntimeTimeouts,
        close_engine: float,
        background: Callable[[Coroutine[Any, Any, None]], object],
        egress: EgressProxy | None = None,
        layers: LayerStore | None = None,
        disk: MeasuredDiskLimit | None = None,
    ) -> None:
        self._layers = layers
        self._disk = disk
        self._agent_id = agent_id
        self._driver = driver
        self._adapters = dict(engines)
        self._model = model
        self._egress = egress
        self._pool = pool
        self._timeouts = timeouts
        self._close_engine = close_engine
        # Runs a coroutine the caller need not wait for (closing an engine nobody uses).
        self._background = background

    def adapter(self, kind: str) -> EngineAdapter | None:
        return self._adapters.get(kind)

    def available(self) -> str:
        return ", ".join(sorted(self._adapters)) or "none"

    def spec(self, session_id: str, environment: SessionEnvironment | None = None) -> SandboxSpec:
        """What the session's sandbox is made from (the warm pool's template, with its own id)."""
        return SandboxSpec(
            session_id=session_id,
            agent_id=self._agent_id,
            model_socket=self._model.socket,
            egress_socket=self._egress.socket if self._egress is not None else None,
            labels={SESSION_LABEL: session_id, AGENT_LABEL: self._agent_id},
            layer=environment.layer if environment else None,
            image=environment.image if environment else "",
            limits=environment.limits if environment else SandboxLimits(),
            variables=environment.variables if environment else {},
        )

    def isolation_refusal(self, runtime_environment: bytes) -> str:
        """Why this agent's sandboxes cannot give the isolation the session's environment asks for
        (a serialized RuntimeEnvironment); empty when they can. The control plane places such a
        session only on an agent offering it: this catches an agent restarted with another runtime."""
        wanted = pb.RuntimeEnvironment.FromString(runtime_environment).spec.isolation if runtime_environment else ""
        return isolation_refusal(wanted, offered(self._driver.name, getattr(self._driver, "runtime", RUNC)))

    async def environment(self, runtime_environment: bytes) -> SessionEnvironment | None:
        """The session's environment (a serialized RuntimeEnvironment; empty: the built-in one), its
        layer built first if this host has none (LayerBuildError: it could not be)."""
        if not runtime_environment:
            return None
        environment = pb.RuntimeEnvironment.FromString(runtime_environment)
        spec = environment.spec
        variables = dict(spec.variables)
        limits = SandboxLimits(
            cpus=spec.limits.cpu_millis / 1000,
            memory_mb=spec.limits.memory_bytes // (1024 * 1024),
            pids=int(spec.limits.pids),
            disk_mb=-(-spec.limits.disk_bytes // MIB),  # whole MiB, rounded up
        )
        packages = spec.packages
        if not (packages.apt or packages.pip or packages.npm or spec.setup_script):
            return SessionEnvironment(variables=variables, limits=limits)  # nothing to build: no layer
        request = BuildRequest.from_spec(environment.build_digest, spec)
        if self._layers is None:
            raise LayerBuildError(
                "check", f"the {self._driver.name} sandbox driver of this agent does not build environment layers"
            )
        layer = await self._layers.ensure(request)
        return SessionEnvironment(layer=layer.path, image=layer.image, variables=variables, limits=limits)

    def register_disk(self, session_id: str, environment: SessionEnvironment | None) -> None:
        """Where the agent measures workspaces (no image of their own), hold the session's to its
        environment's disk limit; the image of a driver that gives one is made of that size."""
        if self._disk is not None:
            self._disk.bound(session_id, environment.limits.disk_mb if environment else 0)

    def engine_env(self, session_id: str) -> Mapping[str, str]:
        egress = self._egress.env(session_id) if self._egress is not None else {}
        return {**self._model.env(session_id), **egress}

    def register_egress(self, session_id: str, environment: bytes, config: bytes) -> None:
        """Judge the session's connections by its environment's network policy (none: no network),
        before any of its programs starts; `environment` a serialized RuntimeEnvironment, `config`
        a serialized AgentSpec (for allow_mcp_servers)."""
        if self._egress is None:
            return
        runtime_environment = pb.RuntimeEnvironment.FromString(environment) if environment else None
        spec = runtime_environment.spec if runtime_environment and runtime_environment.HasField("spec") else None
        agent = agent_pb2.AgentSpec.FromString(config) if config else None
        self._egress.register(session_id, EgressPolicy.from_proto(spec, agent, self._egress.registries))

    async def repository(self, session_id: str, sandbox: Sandbox, source: environment_pb2.GitSource) -> bool:
        """Clone the session's git repository into the workspace, with the engine's environment (its
        way out through the egress proxy); False when it is there already. CloneFailed: git's error."""
        env = self.engine_env(session_id)
        return await repository.clone(self._driver, sandbox, source, env, self._timeouts.git_clone)

    def warm_agent(self, req: pb.StartRuntime) -> WarmAgent | None:
        """The agent version whose pre-started engine a new session may adopt (None: it may not:
        it resumes a conversation, pins no agent, or its configuration is never warmed)."""
        if req.resume_engine_session_id or req.transcript:
            return None
        return warm_agent(req.engine, req.project_id, req.agent_id, req.agent_version, req.config.SerializeToString())

    async def sandbox(
        self,
        session_id: str,
        *,
        fresh: bool,
        environment: SessionEnvironment | None = None,
        agent: WarmAgent | None = None,
    ) -> tuple[Sandbox, Claimed | None]:
        """A warm one for a session new here, else one created (or re-opened) by the driver. The
        pool keeps the built-in environment's sandboxes, and those of environments sessions used
        lately (its sandboxes of one environment fit no other: `pool.warm_pool.template_key`); in
        the built-in environment, those with an engine started for an agent version sessions of
        `agent` started lately."""
        spec = self.spec(session_id, environment)
        if fresh and self._pool is not None:
            builtin = environment is None or environment.plain
            claimed = await self._pool.claim(spec, agent.key if agent is not None and builtin else "")
            if not builtin:
                self._pool.remember(spec)
            elif agent is not None:
                self._pool.remember_agent(agent)
            if claimed is not None:
                return claimed.sandbox, claimed
        return await self.create(spec), None

    async def create(self, spec: SandboxSpec) -> Sandbox:
        async with asyncio.timeout(self._timeouts.create_sandbox):
            return await self._driver.create(spec)

    async def engine(
        self,
        session_id: str,
        adapter: EngineAdapter,
        sandbox: Sandbox,
        config: EngineConfig,
        claimed: Claimed | None,
        agent: WarmAgent | None = None,
    ) -> tuple[EngineSession, bool]:
        """The session's engine and whether it was adopted (the one the pool started in its sandbox)
        rather than started now; `agent`: the session's own WarmAgent, if it has one."""
        if claimed is not None and (
            engine := await self._adopt(session_id, claimed, adapter.kind, sandbox, config, agent.key if agent else "")
        ):
            return engine, True
        async with asyncio.timeout(self._timeouts.start_engine):
            return await adapter.start(sandbox, self._driver, config), False

    async def _adopt(
        self, session_id: str, claimed: Claimed, kind: str, sandbox: Sandbox, config: EngineConfig, agent: str
    ) -> EngineSession | None:
        """The engine the pool started in the claimed sandbox, taken on by the session; None when the
        session cannot use it (it is closed in the background and a fresh one started)."""
        engine = claimed.engine
        if engine is None:
            return None
        if claimed.agent and claimed.agent != agent:
            # Started for another agent version (or project): never this session's, whatever it asks.
            log.warning("prestarted_engine_of_another_agent", session_id=session_id)
            self._background(close_quietly(engine, self._close_engine))
            return None
        if self._egress is not None and self._egress.policy(session_id).open:
            # Its environment was fixed before the session had a policy: it has no way out.
            self._background(close_quietly(engine, self._close_engine))
            return None
        if claimed.engine_kind == kind:
            try:
                await engine.adopt(sandbox, config)
            except Exception as exc:
                log.info("prestarted_engine_not_adopted", session_id=session_id, reason=describe(exc))
            else:
                self._model.hand_over(claimed.pool_id, session_id)
                return engine
        self._background(close_quietly(engine, self._close_engine))
        return None

    async def server_info(self, session_id: str, engine: EngineSession) -> pb.EngineInfo | None:
        try:
            info = await bounded(engine.server_info(), self._timeouts.server_info)
        except Exception as exc:  # the runtime works without it; only the slash commands are unknown
            log.warning("server_info_unavailable", session_id=session_id, error=describe(exc))
            return None
        return pb.EngineInfo(server_info_json=json.dumps(info, default=str)) if info is not None else None

    async def destroy(self, sandbox: Sandbox) -> DestroyVerdict:
        """Destroy the sandbox; UNCONFIRMED when the driver failed or took too long."""
        try:
            # Not wait_for: on Python 3.11 it can lose the reconciler loop's cancellation.
            async with asyncio.timeout(self._timeouts.destroy_sandbox):
                return await self._driver.destroy(sandbox)
        except Exception as exc:
            log.warning("sandbox_destroy_failed", sandbox_id=sandbox.sandbox_id, error=describe(exc))
            return DestroyVerdict.UNCONFIRMED

    async def stop(self, sandbox: Sandbox) -> None:
        """Stop what runs in the sandbox, keeping its files (SandboxError if the driver cannot)."""
        async with asyncio.timeout(self._timeouts.destroy_sandbox):
            await self._driver.stop(sandbox)

    def forget(self, session_id: str) -> None:
        """The session's runtime is gone from this agent."""
        self._model.forget(session_id)
        if self._egress is not None:
            self._egress.forget(session_id)
        if self._disk is not None:
            self._disk.forget(session_id)
