"""Starting a session's runtime (StartRuntime): its environment, sandbox, repository and engine.

`RuntimeStarts` brings a runtime up for `runtimes.Runtimes`, which holds the session's guard
around it: the environment's layer, a sandbox (claimed from the warm pool or made), the git
repository cloned into a new one, the engine started or adopted. Each phase is reported as a
StartupPhase (a metric and a span too), and the runtime's record is committed with the last
reports and the command's receipt in one transaction; a failure at any step is one readable
RuntimeStartFailed, what the start made for a new session undone. What a runtime reports as it
comes up (`runtime_started`, `mcp_unavailable`) is written here once, for restarts too.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.agent_config import AgentConfig
from dataplane_agent.engines.base import EngineConfig, EngineSession
from dataplane_agent.environments.steps import LayerBuildError
from dataplane_agent.runtimes.held import Held
from dataplane_agent.runtimes.repository import CloneFailed
from dataplane_agent.sandboxes.base import DestroyVerdict, Sandbox
from dataplane_agent.state import SessionRecord
from dataplane_agent.state_database import Receipt, in_order
from dataplane_agent.turns import memory
from dataplane_agent.turns.session import SessionTurns, TurnLimits, close_quietly, describe
from serverkit import tracing

log = structlog.get_logger(__name__)

NO_MANIFEST_REASON = "contract violation: the engine declared no capability manifest"


class RuntimeStarts:
    """Starts the runtimes of `Runtimes`' sessions; `turns` is the one way a session's turns are made."""

    def __init__(
        self,
        held: Held,
        *,
        driver_name: str,
        limits: TurnLimits,
        turns: Callable[[str, str], SessionTurns],
        background: Callable[[Coroutine[Any, Any, None]], None],
    ) -> None:
        self._held = held
        self._driver_name = driver_name
        self._limits = limits
        self._turns = turns
        self._background = background

    async def start(self, session_id: str, req: pb.StartRuntime, receipt: Receipt) -> None:
        """Create the sandbox, start the engine, record the session; report the phases and the outcome
        (the caller holds the session's guard)."""
        if req.committed_output_seq:
            # The session may have run elsewhere: number this agent's outputs after what is committed.
            await self._held.outbox.ack(session_id, req.committed_output_seq)
        existing = await self._held.state.session(session_id)
        turns = self._held.sessions.get(session_id)
        if existing is not None and turns is not None and turns.engine is not None:
            # Already up: report it again rather than tear down a working runtime.
            await self._held.db.write(lambda c: self._started_tx(c, existing, 0, receipt))
            return
        adapter = self._held.launcher.adapter(req.engine)
        if adapter is None:
            reason = (
                f"engine {req.engine!r} is not available on this agent (available: {self._held.launcher.available()})"
            )
            await self._start_failed(session_id, reason, receipt)
            return
        manifest = getattr(adapter, "manifest", None)
        if manifest is None:
            await self._start_failed(session_id, f"{NO_MANIFEST_REASON} ({req.engine})", receipt)
            return
        resume = req.resume_engine_session_id or (existing.engine_session_id if existing else "")
        pinned = req.environment.SerializeToString() if req.HasField("environment") else b""
        if refusal := self._held.launcher.isolation_refusal(pinned):
            await self._start_failed(session_id, refusal, receipt)
            if existing is None:
                self._held.placements.released(session_id)
                self._held.launcher.forget(session_id)
            return
        self._held.launcher.register_egress(session_id, pinned, req.config.SerializeToString())
        began = time.monotonic()
        # When each phase began, for its span (the environment's, the sandbox's and ready's: `began`).
        phase_began: dict[str, float] = {}
        try:
            environment = await self._held.launcher.environment(pinned)
        except LayerBuildError as exc:  # the package manager's own words, for the session's owner
            await self._start_failed(session_id, f"the environment could not be built: {exc}", receipt)
            if existing is None:
                self._held.placements.released(session_id)
                self._held.launcher.forget(session_id)
            return
        self._held.launcher.register_disk(session_id, environment)
        environment_phase: pb.StartupPhase | None = None
        if environment is not None and environment.layered:
            environment_phase = pb.StartupPhase(phase="environment", duration_ms=ms_since(began))
            await self._held.outbox.append(session_id, "", environment_phase)
        # The agent version whose engine may have been started ahead, for a session new here. With
        # memory too: where the session's memory is, the engine is told by its configuration's system
        # prompt (which the engine's key covers, so only an engine told the same is adopted), and the
        # files are in place (below) before its first turn.
        warm = self._held.launcher.warm_agent(req) if existing is None else None
        try:
            sandbox, claimed = await self._held.launcher.sandbox(
                session_id, fresh=existing is None, environment=environment, agent=warm
            )
        except Exception as exc:  # every failure becomes a readable RuntimeStartFailed
            await self._start_failed(session_id, f"could not create the sandbox: {describe(exc)}", receipt)
            if existing is None:
                self._held.placements.released(session_id)
                self._held.launcher.forget(session_id)
            return
        sandbox_ms = ms_since(began)
        # What this start reports, committed together with the runtime's record at the end, in one
        # transaction (and so one batch to the control plane); but when a CLI start follows (hundreds
        # of milliseconds), the sandbox's phase goes first, for watchers to see the progress.
        sandbox_phase = pb.StartupPhase(
            phase="sandbox_claimed" if claimed else "sandbox_created", duration_ms=sandbox_ms
        )
        reports: list[pb.StartupPhase | pb.EngineInfo | pb.McpServerUnavailable] = [sandbox_phase]
        # The repository goes into a sandbox made for this start only: a workspace this agent still
        # holds (an idle restart) is the session's own, whatever its code did to it.
        clone = req.HasField("git_source") and existing is None
        if claimed is None or claimed.engine is None or clone:
            await self._held.outbox.append(session_id, "", reports.pop())
        if clone:
            cloning = phase_began["repository"] = time.monotonic()
            try:
                if await self._held.launcher.repository(session_id, sandbox, req.git_source):
                    reports.append(pb.StartupPhase(phase="repository", duration_ms=ms_since(cloning)))
            except Exception as exc:  # git's own message (CloneFailed), or why git could not run
                if claimed is not None and claimed.engine is not None:
                    self._background(close_quietly(claimed.engine, self._limits.close_engine))
                if existing is None:
                    self._held.placements.released(session_id)
                    self._held.launcher.forget(session_id)
                    await self._destroy_sandbox(sandbox)
                reason = str(exc) if isinstance(exc, CloneFailed) else f"could not clone: {describe(exc)}"
                await self._start_failed(session_id, reason, receipt)
                return
        if req.transcript:
            await self._held.transcripts.save(session_id, req.transcript)
        try:
            mounted = await memory.install(sandbox, req.memory)
        except memory.MemoryRefused as exc:
            if claimed is not None and claimed.engine is not None:
                self._background(close_quietly(claimed.engine, self._limits.close_engine))
            if existing is None:
                self._held.placements.released(session_id)
                self._held.launcher.forget(session_id)
                await self._destroy_sandbox(sandbox)
            await self._start_failed(session_id, str(exc), receipt)
            return
        turns = self._turns(session_id, resume)
        turns.mount_memory(mounted)
        config = EngineConfig(
            permission_mode=req.permission_mode,
            model=req.model,
            resume_engine_session_id=resume,
            transcript=req.transcript,
            env=self._held.launcher.engine_env(session_id),
            interactions=turns,
            agent_config=AgentConfig.from_proto(req.config),
            session_id=session_id,
        )
        connecting = phase_began["engine_adopted"] = phase_began["engine_connected"] = time.monotonic()
        try:
            engine, adopted = await self._held.launcher.engine(session_id, adapter, sandbox, config, claimed, warm)
        except Exception as exc:
            if existing is None:
                self._held.sessions.pop(session_id, None)
                self._held.placements.released(session_id)
                self._held.launcher.forget(session_id)
                await self._destroy_sandbox(sandbox)
            await self._start_failed(session_id, f"could not start the {req.engine} engine: {describe(exc)}", receipt)
            return
        try:
            phase = "engine_adopted" if adopted else "engine_connected"
            reports.append(pb.StartupPhase(phase=phase, duration_ms=ms_since(connecting)))
            reports.extend(mcp_unavailable(engine))
            if manifest.supports_server_info and (info := await self._held.launcher.server_info(session_id, engine)):
                reports.append(info)
            record = SessionRecord(
                session_id=session_id,
                engine=req.engine,
                permission_mode=req.permission_mode,
                model=req.model,
                engine_session_id=engine.engine_session_id or resume,
                sandbox=sandbox,
                # Kept as sent, so that every later start of the session's engine applies it too.
                config=req.config.SerializeToString(),
                tool_grants=pb.SetToolGrants(grants=req.tool_grants).SerializeToString(),
                environment=pinned,
            )
            reports.append(pb.StartupPhase(phase="ready", duration_ms=ms_since(began)))

            def started(c: sqlite3.Connection) -> None:
                for body in reports:
                    self._held.outbox.append_tx(c, session_id, "", body)
                self._started_tx(c, record, sandbox_ms, receipt)

            await self._held.db.write(started)
            for report in [environment_phase, sandbox_phase, *(r for r in reports if r is not sandbox_phase)]:
                if isinstance(report, pb.StartupPhase):
                    self._held.metrics.startup_phase_done(
                        self._driver_name, report.phase, report.duration_ms, warm=claimed is not None
                    )
                    attributes = {"astrabox.session_id": session_id, "astrabox.driver": self._driver_name}
                    seconds = report.duration_ms / 1000
                    tracing.finished_span(
                        f"startup {report.phase}", phase_began.get(report.phase, began), seconds, attributes
                    )
        except BaseException:
            await asyncio.shield(close_quietly(engine, self._limits.close_engine))
            raise
        turns.attach(engine, sandbox)
        log.info("runtime_started", session_id=session_id, sandbox_id=sandbox.sandbox_id, sandbox_ms=sandbox_ms)

    def _started_tx(self, c: sqlite3.Connection, record: SessionRecord, sandbox_ms: int, receipt: Receipt) -> None:
        self._held.state.put_session_tx(c, record)
        self._held.outbox.append_tx(c, record.session_id, "", runtime_started(record.sandbox, sandbox_ms))
        receipt(c)

    async def _start_failed(self, session_id: str, reason: str, receipt: Receipt) -> None:
        log.warning("runtime_start_failed", session_id=session_id, reason=reason)
        await self._held.db.write(
            in_order(
                lambda c: self._held.outbox.append_tx(c, session_id, "", pb.RuntimeStartFailed(reason=reason)), receipt
            )
        )

    async def _destroy_sandbox(self, sandbox: Sandbox) -> None:
        verdict = await self._held.launcher.destroy(sandbox)
        if verdict is not DestroyVerdict.CONFIRMED:
            log.warning("sandbox_destroy_unconfirmed", sandbox_id=sandbox.sandbox_id, verdict=verdict.value)


def runtime_started(sandbox: Sandbox, sandbox_ms: int) -> pb.RuntimeStarted:
    return pb.RuntimeStarted(
        # Where the workspace is inside the sandbox: host paths never leave the agent.
        sandbox_id=sandbox.sandbox_id,
        driver=sandbox.driver,
        workspace=sandbox.inner_workspace,
        sandbox_ms=sandbox_ms,
    )


def ms_since(began: float) -> int:
    return int((time.monotonic() - began) * 1000)


def mcp_unavailable(engine: EngineSession) -> list[pb.McpServerUnavailable]:
    """The agent's MCP servers the engine started without: reported, the session going on."""
    return [pb.McpServerUnavailable(server=u.server, reason=u.reason) for u in engine.mcp_unavailable]
