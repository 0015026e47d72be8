"""Session runtimes on this agent: a sandbox plus a connected engine session.

`Runtimes` applies the control plane's commands to the sessions this agent
holds: it starts runtimes (`starts.RuntimeStarts`, reporting each startup
phase), hands inputs, answers, interrupts, permission modes and task stops to
the session's `SessionTurns`, restarts an engine lazily (resuming its
conversation) and recovers a session whose sandbox was lost, and stops,
destroys or — with `retain_sandboxes` — keeps a released session's sandbox
stopped for inspection (RETAINED) (`endings.RuntimeEndings`). Each operation
takes a `receipt`: a transaction step recording that the command was applied,
committed with the operation's effect, so a redelivered command never has a
second effect.

Engine readers, input pumps and interrupt deadlines live in a TaskGroup owned
by `run()`. Whatever a shutdown leaves open stays recorded; `recover()` at the
next start settles it as aborted.

Sandboxes and engines come from the `Launcher` (`dataplane_agent.runtimes.launch`): a
new session's sandbox from the warm pool when one is ready, with the engine
the pool started in it, else both made now. Starts and destructions hold the session's guard, which the
reconciler (`dataplane_agent.runtimes.reconcile`) takes too before it adopts or
destroys anything of that session, and they tell `Placements` what the
control plane asked for since its last Welcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator, Coroutine, Mapping
from typing import Any

import grpc
import structlog

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.agent_config import AgentConfig
from dataplane_agent.engines.base import EngineAdapter, EngineConfig, EngineError, EngineSession, ToolDecision
from dataplane_agent.environments.layers import LayerStore
from dataplane_agent.errors import CommandRefused
from dataplane_agent.keyed_locks import KeyedLocks
from dataplane_agent.metrics import AgentMetrics
from dataplane_agent.relay.deltas import LiveDeltas
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.routes.egress.proxy import EgressProxy
from dataplane_agent.routes.model import ModelAccess, model_env
from dataplane_agent.runtimes.disk_limit import MeasuredDiskLimit, OverLimit
from dataplane_agent.runtimes.endings import RuntimeEndings
from dataplane_agent.runtimes.held import Held
from dataplane_agent.runtimes.launch import Launcher, RuntimeTimeouts, SandboxPool
from dataplane_agent.runtimes.reconcile import Placements
from dataplane_agent.runtimes.starts import RuntimeStarts, mcp_unavailable, ms_since, runtime_started
from dataplane_agent.sandboxes.base import DestroyVerdict, Sandbox, SandboxDriver, SandboxSpec
from dataplane_agent.state import AgentState, SessionRecord
from dataplane_agent.state_database import Database, Receipt, in_order
from dataplane_agent.turns.session import (
    WORKSPACE_GONE_REASON,
    Input,
    SessionTurns,
    TurnLimits,
    close_quietly,
    describe,
)
from dataplane_agent.turns.transcripts import TranscriptStore
from serverkit import tracing

log = structlog.get_logger(__name__)

__all__ = ["RESTART_ABORT_REASON", "WORKSPACE_GONE_REASON", "Receipt", "RuntimeTimeouts", "Runtimes", "model_env"]

RESTART_ABORT_REASON = "the data-plane agent restarted while the turn was running"
RESTART_QUEUED_REASON = "the data-plane agent restarted before the engine took the message"
# The session id a warm pool's template spec is made with (the pool replaces it).
TEMPLATE_SESSION_ID = "template"


class Runtimes:
    """Starts, uses and destroys the runtimes of the sessions this agent holds."""

    def __init__(
        self,
        *,
        agent_id: str,
        db: Database,
        state: AgentState,
        outbox: Outbox,
        driver: SandboxDriver,
        engines: Mapping[str, EngineAdapter],
        model: ModelAccess,
        transcripts: TranscriptStore,
        timeouts: RuntimeTimeouts = RuntimeTimeouts(),
        limits: TurnLimits = TurnLimits(),
        placements: Placements | None = None,
        pool: SandboxPool | None = None,
        retain_sandboxes: bool = False,
        egress: EgressProxy | None = None,
        deltas: LiveDeltas | None = None,
        layers: LayerStore | None = None,
        metrics: AgentMetrics | None = None,
        disk: MeasuredDiskLimit | None = None,
    ) -> None:
        self._db = db
        self._deltas = deltas
        self._metrics = metrics or AgentMetrics()
        self._driver_name = driver.name
        self._retain = retain_sandboxes
        self._state = state
        self._outbox = outbox
        self._transcripts = transcripts
        self._limits = limits
        self._sessions: dict[str, SessionTurns] = {}
        self._tasks: asyncio.TaskGroup | None = None
        self._running = asyncio.Event()
        self._placements = placements if placements is not None else Placements()
        self._launcher = Launcher(
            agent_id=agent_id,
            driver=driver,
            engines=engines,
            model=model,
            pool=pool,
            timeouts=timeouts,
            close_engine=limits.close_engine,
            background=self._background,
            egress=egress,
            layers=layers,
            disk=disk,
        )
        self._guards = KeyedLocks()
        # Sessions whose rebuild by the reconciler failed: it does not try again (an input does).
        self._rebuild_failed: set[str] = set()
        held = Held(
            db=self._db,
            state=self._state,
            outbox=self._outbox,
            transcripts=self._transcripts,
            launcher=self._launcher,
            placements=self._placements,
            metrics=self._metrics,
            sessions=self._sessions,
        )
        self._starts = RuntimeStarts(
            held,
            driver_name=self._driver_name,
            limits=limits,
            turns=self._turns,
            background=self._background,
        )
        self._endings = RuntimeEndings(
            held,
            retain_sandboxes=retain_sandboxes,
            guards=self._guards,
            rebuild_failed=self._rebuild_failed,
        )

    # -- lifecycle -----------------------------------------------------------

    async def recover(self) -> None:
        """Settle as aborted every turn and queued input the previous agent process left open."""
        for record in await self._state.sessions():
            sid = record.session_id
            # Before any workspace command or engine of the session runs again.
            self._launcher.register_egress(sid, record.environment, record.config)
            queued = await self._state.queued_turns(sid)
            parked = await self._state.pending_interactions(sid)
            if not (record.turn_id or queued or parked):
                continue

            def tx(
                c: sqlite3.Connection, sid: str = sid, turn_id: str = record.turn_id, queued: list[str] = queued
            ) -> None:
                if turn_id:
                    self._outbox.append_tx(c, sid, turn_id, pb.TurnAborted(reason=RESTART_ABORT_REASON))
                    self._state.set_turn_tx(c, sid, "")
                for queued_turn in queued:
                    self._outbox.append_tx(c, sid, queued_turn, pb.TurnAborted(reason=RESTART_QUEUED_REASON))
                    self._state.unqueue_input_tx(c, sid, queued_turn)
                self._state.remove_interactions_tx(c, sid)

            await self._db.write(tx)
            log.warning("turns_aborted_by_restart", session_id=sid, turn_id=record.turn_id, queued=len(queued))

    async def run(self) -> None:
        """Own the engine readers, input pumps and deadlines until cancelled; then close every engine."""
        try:
            async with asyncio.TaskGroup() as tasks:
                self._tasks = tasks
                self._running.set()
                await asyncio.Event().wait()
        finally:
            self._tasks = None
            self._running.clear()
            for turns in list(self._sessions.values()):
                await turns.shutdown()

    async def wait_running(self) -> None:
        await self._running.wait()

    # -- commands ------------------------------------------------------------

    async def start_runtime(self, session_id: str, req: pb.StartRuntime, receipt: Receipt) -> None:
        """Create the sandbox, start the engine, record the session; report the phases and the outcome."""
        self._placements.placed(session_id)
        async with self.guarded(session_id):
            await self._starts.start(session_id, req, receipt)

    async def deliver_input(self, session_id: str, req: pb.DeliverInput, receipt: Receipt) -> None:
        """Queue the input for the engine; it is sent once the session's previous turn is settled."""
        record = await self._held(session_id)
        if not req.turn_id:
            raise CommandRefused(grpc.StatusCode.INVALID_ARGUMENT, "DeliverInput needs a turn_id")
        turns = self._turns(session_id, record.engine_session_id)
        if turns.knows_turn(req.turn_id):
            await self._db.write(receipt)  # the same turn delivered again: it is already on its way
            return
        await self._db.write(in_order(lambda c: self._state.queue_input_tx(c, session_id, req.turn_id), receipt))
        # Applied inside the command's span (`commands`): the turn is traced as its child.
        traceparent = tracing.traceparent()
        turns.enqueue(Input(req.turn_id, req.text, req.permission_mode, traceparent))

    async def answer_interaction(
        self, session_id: str, interaction_id: str, decision: ToolDecision, receipt: Receipt
    ) -> None:
        """Resolve a parked interaction; an unknown or already answered one has no effect."""
        turns = self._sessions.get(session_id)
        if turns is None:
            await self._db.write(receipt)
            return
        await turns.answer(interaction_id, decision, receipt)

    async def interrupt_turn(self, session_id: str, req: pb.InterruptTurn, receipt: Receipt) -> None:
        """Interrupt the named turn if it is running or waiting; otherwise nothing happens. With a
        `settled_reason` the control plane has ended the turn already: this lets go of it."""
        if req.settled_reason:
            log.info("turn_let_go", session_id=session_id, turn_id=req.turn_id, reason=req.settled_reason)
        turns = self._sessions.get(session_id)
        if turns is not None:
            await turns.interrupt(req.turn_id, req.deadline_ms / 1000)
        await self._db.write(receipt)

    async def set_permission_mode(self, session_id: str, req: pb.SetPermissionMode, receipt: Receipt) -> None:
        """Change the running engine's mode and remember it for the next engine start."""
        await self._held(session_id)
        turns = self._sessions.get(session_id)
        if turns is not None:
            try:
                await turns.set_permission_mode(req.permission_mode)
            except Exception as exc:
                raise CommandRefused(
                    grpc.StatusCode.FAILED_PRECONDITION, f"the engine refused the mode change: {describe(exc)}"
                ) from exc
        await self._db.write(
            in_order(lambda c: self._state.set_permission_mode_tx(c, session_id, req.permission_mode), receipt)
        )

    async def set_tool_grants(self, session_id: str, req: pb.SetToolGrants, receipt: Receipt) -> None:
        """Keep the session's new set of tool grants (the engine's next question reads it); a
        session not held here gets its set with its StartRuntime."""
        blob = req.SerializeToString()
        await self._db.write(in_order(lambda c: self._state.set_tool_grants_tx(c, session_id, blob), receipt))

    async def stop_task(self, session_id: str, req: pb.StopTask, receipt: Receipt) -> None:
        """Stop a background task; without a running engine there is none to stop."""
        await self._held(session_id)
        turns = self._sessions.get(session_id)
        try:
            stopped = turns is not None and await turns.stop_task(req.task_id)
        except Exception as exc:
            raise CommandRefused(
                grpc.StatusCode.FAILED_PRECONDITION, f"the engine could not stop task {req.task_id}: {describe(exc)}"
            ) from exc
        if not stopped:
            log.info("stop_task_without_engine", session_id=session_id, task_id=req.task_id)
        await self._db.write(receipt)

    async def stop_runtime(self, session_id: str, req: pb.StopRuntime, receipt: Receipt) -> None:
        """Stop an idle session's runtime, keeping its files (`RuntimeEndings.stop_runtime`)."""
        await self._endings.stop_runtime(session_id, req, receipt)

    def running(self) -> list[tuple[str, Sandbox]]:
        """The sessions whose engine runs here now, with their sandboxes."""
        return [
            (sid, turns.sandbox)
            for sid, turns in self._sessions.items()
            if turns.engine is not None and turns.sandbox is not None
        ]

    async def stop_over_limit(self, found: OverLimit) -> None:
        """Stop the runtime of a session over its disk limit (`RuntimeEndings.stop_over_limit`)."""
        await self._endings.stop_over_limit(found)

    async def destroy_runtime(self, session_id: str, req: pb.DestroyRuntime, receipt: Receipt) -> pb.DestroyVerdict:
        """Destroy (or retain) the session's runtime (`RuntimeEndings.destroy_runtime`)."""
        return await self._endings.destroy_runtime(session_id, req, receipt)

    async def released_verdict(self, session_id: str) -> pb.DestroyVerdict:
        """What became of a released session's sandbox (`RuntimeEndings.released_verdict`)."""
        return await self._endings.released_verdict(session_id)

    # -- reconciliation ------------------------------------------------------

    def busy(self, session_id: str) -> bool:
        """A command (or the reconciler) is at work on the session."""
        return self._guards.busy(session_id)

    @contextlib.asynccontextmanager
    async def guarded(self, session_id: str) -> AsyncIterator[None]:
        """Hold the session: starts, destructions and the reconciler's actions on it take turns."""
        async with self._guards.hold(session_id):
            yield

    async def release(self, session_id: str, reason: str) -> DestroyVerdict | None:
        """Destroy (or retain) the runtime of a session not expected here (`RuntimeEndings.release`)."""
        return await self._endings.release(session_id, reason)

    async def recover_lost(self, session_id: str, reason: str) -> bool:
        """Rebuild the runtime of an idle session whose sandbox is gone, now (hold its guard);
        False when it is busy, or an earlier rebuild failed: its next input recovers it then."""
        record = await self._state.session(session_id)
        if record is None or session_id in self._rebuild_failed:
            return False
        turns = self._turns(session_id, record.engine_session_id)
        try:
            return await turns.recover(reason)
        except Exception:
            self._rebuild_failed.add(session_id)
            raise

    async def layers_in_use(self) -> set[str]:
        """The build digests of the environments of every session held (their layers are kept)."""
        digests = set()
        for record in await self._state.sessions():
            if record.environment:
                digests.add(pb.RuntimeEnvironment.FromString(record.environment).build_digest)
        return digests

    def sandbox_template(self) -> SandboxSpec:
        """The spec every new session's sandbox is made from, for the warm pool."""
        return self._launcher.spec(TEMPLATE_SESSION_ID)

    # -- engine (re)starts ---------------------------------------------------

    async def _restart_engine(self, session_id: str) -> EngineSession:
        """Bring a held session's engine back, resuming its conversation; recover a lost sandbox first."""
        record = await self._state.session(session_id)
        turns = self._sessions.get(session_id)
        if record is None or turns is None:
            raise EngineError(f"session {session_id} is no longer held by this agent")
        adapter = self._launcher.adapter(record.engine)
        if adapter is None:
            raise EngineError(f"engine {record.engine!r} is not available on this agent")
        if not turns.lost_reason and not record.sandbox.workspace.exists():
            turns.lost_reason = WORKSPACE_GONE_REASON
        lost = turns.lost_reason
        if lost:
            await self._outbox.append(session_id, "", pb.RuntimeLost(reason=lost))
            log.warning("runtime_lost", session_id=session_id, reason=lost)
        self._launcher.register_egress(session_id, record.environment, record.config)
        began = time.monotonic()
        # The same environment version as at the start, its layer built again if it is gone.
        environment = await self._launcher.environment(record.environment)
        self._launcher.register_disk(session_id, environment)
        sandbox = await self._launcher.create(self._launcher.spec(session_id, environment))
        sandbox_ms = ms_since(began)
        config = EngineConfig(
            permission_mode=record.permission_mode,
            model=record.model,
            resume_engine_session_id=record.engine_session_id,
            # Restored only where the sandbox lacks its own (a new one, or a CLI that never wrote it).
            transcript=await self._transcripts.load(session_id),
            env=self._launcher.engine_env(session_id),
            interactions=turns,
            agent_config=AgentConfig.from_bytes(record.config),
            session_id=session_id,
        )
        engine, _ = await self._launcher.engine(session_id, adapter, sandbox, config, claimed=None)
        try:

            def tx(c: sqlite3.Connection) -> None:
                self._state.set_sandbox_tx(c, session_id, sandbox)
                # The runtime is up again: after a loss, an idle stop, an engine replaced or an
                # agent restart alike, so the control plane's view follows.
                self._outbox.append_tx(c, session_id, "", runtime_started(sandbox, sandbox_ms))
                for unavailable in mcp_unavailable(engine):
                    self._outbox.append_tx(c, session_id, "", unavailable)

            await self._db.write(tx)
        except BaseException:
            await asyncio.shield(close_quietly(engine, self._limits.close_engine))
            raise
        turns.attach(engine, sandbox)
        self._rebuild_failed.discard(session_id)
        log.info(
            "engine_resumed", session_id=session_id, engine_session_id=record.engine_session_id, recovered=bool(lost)
        )
        return engine

    # -- helpers -------------------------------------------------------------

    async def _held(self, session_id: str) -> SessionRecord:
        record = await self._state.session(session_id)
        if record is None:
            raise CommandRefused(grpc.StatusCode.NOT_FOUND, f"session {session_id} has no runtime on this agent")
        return record

    def _turns(self, session_id: str, engine_session_id: str) -> SessionTurns:
        turns = self._sessions.get(session_id)
        if turns is not None:
            return turns
        if self._tasks is None:
            raise CommandRefused(grpc.StatusCode.UNAVAILABLE, "the agent is shutting down", final=False)
        turns = self._sessions[session_id] = SessionTurns(
            session_id,
            db=self._db,
            state=self._state,
            outbox=self._outbox,
            transcripts=self._transcripts,
            tasks=self._tasks,
            start_engine=lambda: self._restart_engine(session_id),
            limits=self._limits,
            engine_session_id=engine_session_id,
            deltas=self._deltas,
        )
        return turns

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        if self._tasks is None:  # shutting down: the engine closes with the agent
            work.close()
            return
        self._tasks.create_task(work)
