"""Session runtimes on this agent: a sandbox plus a connected engine session.

`Runtimes` starts and destroys runtimes and runs turns, turning everything
that happens into outputs in the durable outbox. Each operation that applies a
command takes a `receipt`: a transaction step recording that the command was
applied, committed together with the operation's effect and outputs, so a
redelivered command can never have a second effect.

Turn tasks live in a TaskGroup owned by `run()`. A turn cancelled by shutdown
stays recorded as in flight; `recover()` at the next start reports it aborted.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sqlite3
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import grpc
import structlog

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.base import EngineAdapter, EngineConfig, EngineError, EngineOutput, EngineSession
from dataplane_agent.errors import CommandRefused
from dataplane_agent.outbox import Outbox
from dataplane_agent.sandboxes.base import DestroyVerdict, Sandbox, SandboxDriver, SandboxSpec
from dataplane_agent.state import AgentState, Database, SessionRecord

log = structlog.get_logger(__name__)

Receipt = Callable[[sqlite3.Connection], None]

RESTART_ABORT_REASON = "the data-plane agent restarted while the turn was running"


def model_env(base_url: str, api_key: str) -> dict[str, str]:
    """The environment the engine's CLI needs to reach the model and stay quiet."""
    return {
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": api_key,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


@dataclass(frozen=True, slots=True)
class RuntimeTimeouts:
    """Deadlines, in seconds, for every transitional step."""

    create_sandbox: float = 120.0
    start_engine: float = 120.0
    close_engine: float = 15.0
    destroy_sandbox: float = 60.0
    cancel_turn: float = 15.0


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
        model_env: Mapping[str, str],
        timeouts: RuntimeTimeouts = RuntimeTimeouts(),
    ) -> None:
        self._agent_id = agent_id
        self._db = db
        self._state = state
        self._outbox = outbox
        self._driver = driver
        self._adapters = dict(engines)
        self._model_env = dict(model_env)
        self._timeouts = timeouts
        self._engines: dict[str, EngineSession] = {}
        self._turns: dict[str, asyncio.Task[None]] = {}
        self._tasks: asyncio.TaskGroup | None = None
        self._running = asyncio.Event()

    # -- lifecycle -----------------------------------------------------------

    async def recover(self) -> None:
        """Report every turn the previous agent process left running as aborted."""
        for record in await self._state.sessions():
            if record.turn_id:
                await self._db.write(
                    lambda c, r=record: self._abort_tx(c, r.session_id, r.turn_id, RESTART_ABORT_REASON)
                )
                log.warning("turn_aborted_by_restart", session_id=record.session_id, turn_id=record.turn_id)

    async def run(self) -> None:
        """Own the turn tasks until cancelled; then close every engine session."""
        try:
            async with asyncio.TaskGroup() as tasks:
                self._tasks = tasks
                self._running.set()
                await asyncio.Event().wait()
        finally:
            self._tasks = None
            self._running.clear()
            for session_id in list(self._engines):
                await self._close_engine(session_id)

    async def wait_running(self) -> None:
        await self._running.wait()

    # -- commands ------------------------------------------------------------

    async def start_runtime(self, session_id: str, req: pb.StartRuntime, receipt: Receipt) -> None:
        """Create the sandbox, start the engine, record the session; report either outcome."""
        bound = log.bind(session_id=session_id)
        existing = await self._state.session(session_id)
        if existing is not None and (session_id in self._engines or session_id in self._turns):
            # Already up: report it again rather than tear down a working runtime.
            await self._db.write(lambda c: self._started_tx(c, existing, 0, receipt))
            return
        adapter = self._adapters.get(req.engine)
        if adapter is None:
            available = ", ".join(sorted(self._adapters)) or "none"
            await self._start_failed(
                session_id, f"engine {req.engine!r} is not available on this agent (available: {available})", receipt
            )
            return
        resume = req.resume_engine_session_id or (existing.engine_session_id if existing else "")
        began = time.monotonic()
        try:
            sandbox = await asyncio.wait_for(self._driver.create(self._spec(session_id)), self._timeouts.create_sandbox)
        except Exception as exc:  # every failure becomes a readable RuntimeStartFailed
            await self._start_failed(session_id, f"could not create the sandbox: {_describe(exc)}", receipt)
            return
        sandbox_ms = int((time.monotonic() - began) * 1000)
        config = EngineConfig(
            permission_mode=req.permission_mode, model=req.model, resume_engine_session_id=resume, env=self._model_env
        )
        try:
            engine = await asyncio.wait_for(adapter.start(sandbox, self._driver, config), self._timeouts.start_engine)
        except Exception as exc:
            if existing is None:
                await self._destroy_sandbox(sandbox)
            await self._start_failed(session_id, f"could not start the {req.engine} engine: {_describe(exc)}", receipt)
            return
        record = SessionRecord(
            session_id=session_id,
            engine=req.engine,
            permission_mode=req.permission_mode,
            model=req.model,
            engine_session_id=engine.engine_session_id or resume,
            sandbox=sandbox,
        )
        try:
            await self._db.write(lambda c: self._started_tx(c, record, sandbox_ms, receipt))
        except BaseException:
            await asyncio.shield(_close_quietly(engine, self._timeouts.close_engine))
            raise
        self._engines[session_id] = engine
        bound.info("runtime_started", sandbox_id=sandbox.sandbox_id, sandbox_ms=sandbox_ms)

    async def deliver_input(self, session_id: str, req: pb.DeliverInput, receipt: Receipt) -> None:
        """Record the turn as in flight and start running it."""
        record = await self._state.session(session_id)
        if record is None:
            raise CommandRefused(grpc.StatusCode.NOT_FOUND, f"session {session_id} has no runtime on this agent")
        if not req.turn_id:
            raise CommandRefused(grpc.StatusCode.INVALID_ARGUMENT, "DeliverInput needs a turn_id")
        running = self._turns.get(session_id)
        if running is not None and not running.done():
            raise CommandRefused(
                grpc.StatusCode.FAILED_PRECONDITION, f"session {session_id} is still running turn {record.turn_id}"
            )
        if self._tasks is None:
            raise CommandRefused(grpc.StatusCode.UNAVAILABLE, "the agent is shutting down")
        await self._db.write(
            lambda c: (self._state.set_turn_tx(c, session_id, req.turn_id, req.permission_mode), receipt(c))
        )
        record = replace(record, turn_id=req.turn_id, permission_mode=req.permission_mode or record.permission_mode)
        self._turns[session_id] = self._tasks.create_task(self._run_turn(record, req.text, req.permission_mode))

    async def destroy_runtime(self, session_id: str, req: pb.DestroyRuntime, receipt: Receipt) -> None:
        """Stop the engine and destroy the sandbox; forget the session only when destruction is confirmed."""
        bound = log.bind(session_id=session_id)
        record = await self._state.session(session_id)
        if record is None:
            await self._db.write(receipt)  # nothing held: already destroyed
            return
        turn = self._turns.get(session_id)
        if turn is not None:
            turn.cancel()
            await asyncio.wait([turn], timeout=self._timeouts.cancel_turn)
            record = await self._state.session(session_id) or record
        await self._close_engine(session_id)
        try:
            verdict = await asyncio.wait_for(self._driver.destroy(record.sandbox), self._timeouts.destroy_sandbox)
        except Exception as exc:
            bound.warning("sandbox_destroy_failed", error=_describe(exc))
            verdict = DestroyVerdict.UNCONFIRMED
        reason = f"the runtime was destroyed ({req.reason})" if req.reason else "the runtime was destroyed"
        turn_id = record.turn_id
        if verdict is DestroyVerdict.CONFIRMED:

            def forget(c: sqlite3.Connection) -> None:
                if turn_id:
                    self._abort_tx(c, session_id, turn_id, reason)
                self._state.delete_session_tx(c, session_id)
                receipt(c)

            await self._db.write(forget)
            bound.info("runtime_destroyed", sandbox_id=record.sandbox.sandbox_id)
            return
        if turn_id:
            await self._db.write(lambda c: self._abort_tx(c, session_id, turn_id, reason))
        code = grpc.StatusCode.FAILED_PRECONDITION if verdict is DestroyVerdict.REFUSED else grpc.StatusCode.UNAVAILABLE
        raise CommandRefused(
            code,
            f"sandbox {record.sandbox.sandbox_id} destruction is {verdict.value}; the session is kept",
            final=False,
        )

    # -- turns ---------------------------------------------------------------

    async def _run_turn(self, record: SessionRecord, text: str, permission_mode: str) -> None:
        session_id, turn_id = record.session_id, record.turn_id
        bound = log.bind(session_id=session_id, turn_id=turn_id)
        known_engine_session_id = record.engine_session_id
        try:
            engine = self._engines.get(session_id) or await self._restart_engine(record)
            outputs = engine.run_turn(text, permission_mode)
            ended = False
            try:
                async for output in outputs:
                    engine_session_id = engine.engine_session_id
                    changed_id = engine_session_id if engine_session_id != known_engine_session_id else ""
                    await self._db.write(
                        functools.partial(self._engine_output_tx, session_id, turn_id, output, changed_id)
                    )
                    known_engine_session_id = engine_session_id or known_engine_session_id
                    if output.ends_turn:
                        ended = True
                        break
            finally:
                aclose = getattr(outputs, "aclose", None)
                if aclose is not None:
                    await aclose()
            if not ended:
                await self._abort(session_id, turn_id, "the engine ended the turn without a result")
            bound.info("turn_finished", result=ended)
        except Exception as exc:
            bound.warning("turn_failed", error=_describe(exc))
            await self._close_engine(session_id)
            await self._abort(session_id, turn_id, f"the engine failed during the turn: {_describe(exc)}")
        finally:
            self._turns.pop(session_id, None)

    async def _restart_engine(self, record: SessionRecord) -> EngineSession:
        """Bring a held session's engine back (after an agent restart), resuming its conversation."""
        adapter = self._adapters.get(record.engine)
        if adapter is None:
            raise EngineError(f"engine {record.engine!r} is not available on this agent")
        sandbox = await asyncio.wait_for(
            self._driver.create(self._spec(record.session_id)), self._timeouts.create_sandbox
        )
        if sandbox != record.sandbox:
            await self._db.write(lambda c: self._state.put_session_tx(c, replace(record, sandbox=sandbox)))
        config = EngineConfig(
            permission_mode=record.permission_mode,
            model=record.model,
            resume_engine_session_id=record.engine_session_id,
            env=self._model_env,
        )
        engine = await asyncio.wait_for(adapter.start(sandbox, self._driver, config), self._timeouts.start_engine)
        self._engines[record.session_id] = engine
        log.info("engine_resumed", session_id=record.session_id, engine_session_id=record.engine_session_id)
        return engine

    # -- helpers -------------------------------------------------------------

    def _spec(self, session_id: str) -> SandboxSpec:
        return SandboxSpec(
            session_id=session_id,
            agent_id=self._agent_id,
            labels={"astrabox.session_id": session_id, "astrabox.agent_id": self._agent_id},
        )

    def _engine_output_tx(
        self, session_id: str, turn_id: str, output: EngineOutput, new_engine_session_id: str, c: sqlite3.Connection
    ) -> None:
        body = pb.EngineMessage(type_name=output.type_name, payload_json=json.dumps(output.payload, default=str))
        self._outbox.append_tx(c, session_id, turn_id, body)
        if new_engine_session_id:
            self._state.set_engine_session_id_tx(c, session_id, new_engine_session_id)
        if output.ends_turn:
            self._state.set_turn_tx(c, session_id, "")

    def _started_tx(self, c: sqlite3.Connection, record: SessionRecord, sandbox_ms: int, receipt: Receipt) -> None:
        self._state.put_session_tx(c, record)
        started = pb.RuntimeStarted(
            sandbox_id=record.sandbox.sandbox_id,
            driver=record.sandbox.driver,
            workspace=str(record.sandbox.workspace),
            sandbox_ms=sandbox_ms,
        )
        self._outbox.append_tx(c, record.session_id, "", started)
        receipt(c)

    async def _start_failed(self, session_id: str, reason: str, receipt: Receipt) -> None:
        log.warning("runtime_start_failed", session_id=session_id, reason=reason)
        await self._db.write(
            lambda c: (self._outbox.append_tx(c, session_id, "", pb.RuntimeStartFailed(reason=reason)), receipt(c))
        )

    def _abort_tx(self, c: sqlite3.Connection, session_id: str, turn_id: str, reason: str) -> None:
        self._outbox.append_tx(c, session_id, turn_id, pb.TurnAborted(reason=reason))
        self._state.set_turn_tx(c, session_id, "")

    async def _abort(self, session_id: str, turn_id: str, reason: str) -> None:
        await self._db.write(lambda c: self._abort_tx(c, session_id, turn_id, reason))

    async def _close_engine(self, session_id: str) -> None:
        engine = self._engines.pop(session_id, None)
        if engine is not None:
            await _close_quietly(engine, self._timeouts.close_engine)

    async def _destroy_sandbox(self, sandbox: Sandbox) -> None:
        try:
            verdict = await asyncio.wait_for(self._driver.destroy(sandbox), self._timeouts.destroy_sandbox)
        except Exception as exc:
            log.warning("sandbox_destroy_failed", sandbox_id=sandbox.sandbox_id, error=_describe(exc))
            return
        if verdict is not DestroyVerdict.CONFIRMED:
            log.warning("sandbox_destroy_unconfirmed", sandbox_id=sandbox.sandbox_id, verdict=verdict.value)


async def _close_quietly(engine: EngineSession, timeout: float) -> None:
    try:
        await asyncio.wait_for(engine.close(), timeout)
    except Exception as exc:
        log.warning("engine_close_failed", error=_describe(exc))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
