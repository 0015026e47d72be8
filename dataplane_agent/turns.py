"""One session's engine and the turns that run on it.

`SessionTurns` owns the connected engine of one runtime and decides which turn
every output of the engine's single stream belongs to:

- A user turn opens when its input is sent (`InputConsumed` follows the
  send); every output after that, up to and including the ResultMessage,
  carries its turn_id.
- Between turns, background-task lifecycle messages and other status notices
  (every SystemMessage but "init", rate-limit events) are session-level
  outputs with an empty turn_id. Any other output
  means the engine started a turn on its own: `EngineTurnStarted` opens it
  under a new turn_id, and it runs to its ResultMessage like a user turn.
- After a ResultMessage the engine's transcript is snapshotted (kept in the
  state directory and appended as `TranscriptSnapshot`, same turn_id).

Inputs wait in a queue and go to the engine one at a time, each once the
previous turn is settled; a turn the engine started on its own is given
`engine_turn_wait` to finish and is then interrupted. Every turn is settled
exactly once: by its ResultMessage (followed by `TurnInterrupted` if it was
being interrupted), by `TurnInterrupted` when an interrupt's deadline passes
(the engine is closed and restarted lazily with resume), or by `TurnAborted`
when the engine fails, ends, or the runtime is destroyed.

All routing decisions and their outbox writes happen under one lock, so the
outbox order is the order in which things happened. Engine calls are never
made under it: an engine may need its stream read to answer a control call.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import sqlite3
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import structlog

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.base import EngineOutput, EngineSession, ToolDecision, ToolRequest
from dataplane_agent.interactions import INTERRUPTED, TURN_ENDED, Interactions
from dataplane_agent.outbox import Outbox
from dataplane_agent.sandboxes.base import Sandbox
from dataplane_agent.state import AgentState, Database, Receipt
from dataplane_agent.transcripts import TranscriptStore

log = structlog.get_logger(__name__)

T = TypeVar("T")

INTERRUPTED_BY_ENGINE = "the engine stopped the turn"
INTERRUPTED_AT_DEADLINE = "deadline passed; engine replaced"
INTERRUPTED_BEFORE_SEND = "interrupted before the engine took the message"
WORKSPACE_GONE_REASON = "the sandbox's workspace is gone"

# Between turns these never open one: status notices, not conversation.
_NOTICE_TYPES = frozenset({"RateLimitEvent"})


def is_session_level(output: EngineOutput) -> bool:
    """Background-task lifecycle and status notices: between turns they belong to the session.

    That is every SystemMessage except "init" (task started, progress, updated,
    notification, background_tasks_changed, hook events, mirror errors …): a
    turn the engine starts on its own opens with "init" or a conversation
    message. SystemMessage subclasses have type names of their own, so the
    family is told by its fields (`subtype` and `data`, which a ResultMessage
    lacks) rather than by name."""
    if output.type_name in _NOTICE_TYPES:
        return True
    payload = output.payload
    return "subtype" in payload and "data" in payload and payload.get("subtype") != "init"


@dataclass(frozen=True, slots=True)
class TurnLimits:
    """Deadlines (seconds) and sizes for running turns."""

    # One engine call: send, interrupt, set_permission_mode, stop_task, transcript.
    engine_call: float = 30.0
    close_engine: float = 15.0
    # The interrupt deadline when InterruptTurn names none.
    interrupt_deadline: float = 10.0
    # How long a queued input waits for a turn the engine started on its own before interrupting it.
    engine_turn_wait: float = 300.0
    # Snapshots larger than this are kept locally but not sent (the relay's messages must stay sendable).
    transcript_cap: int = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Input:
    """A user message waiting for the engine."""

    turn_id: str
    text: str
    permission_mode: str = ""


@dataclass(eq=False)
class _Turn:
    turn_id: str
    by_engine: bool
    interrupting: bool = False
    # The ResultMessage was routed; the snapshot may still be running.
    ended: bool = False
    settled: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(eq=False)
class _Queued:
    input: Input
    cancelled: bool = False


# Starts (or restarts, recovering a lost sandbox) the session's engine and attaches it.
EngineStarter = Callable[[], Awaitable[EngineSession]]


class SessionTurns:
    """Routes one session's engine output to turns; queues inputs; interrupts; parks interactions."""

    def __init__(
        self,
        session_id: str,
        *,
        db: Database,
        state: AgentState,
        outbox: Outbox,
        transcripts: TranscriptStore,
        tasks: asyncio.TaskGroup,
        start_engine: EngineStarter,
        limits: TurnLimits = TurnLimits(),
        engine_session_id: str = "",
    ) -> None:
        self.session_id = session_id
        self._db = db
        self._state = state
        self._outbox = outbox
        self._transcripts = transcripts
        self._tasks = tasks
        self._start_engine = start_engine
        self._limits = limits
        self._engine_session_id = engine_session_id
        self._interactions = Interactions(session_id, db=db, state=state, outbox=outbox)
        self._lock = asyncio.Lock()
        self._engine: EngineSession | None = None
        self._sandbox: Sandbox | None = None
        self._reader: asyncio.Task[None] | None = None
        self._current: _Turn | None = None
        self._queue: collections.deque[_Queued] = collections.deque()
        self._taking: _Queued | None = None
        self._pump: asyncio.Task[None] | None = None
        self._last_task_event = ""
        self._log = log.bind(session_id=session_id)
        # Why the engine went away unexpectedly; the next input recovers the runtime.
        self.lost_reason = ""

    # -- state -----------------------------------------------------------------

    @property
    def engine(self) -> EngineSession | None:
        return self._engine

    @property
    def current_turn_id(self) -> str:
        return self._current.turn_id if self._current is not None else ""

    def knows_turn(self, turn_id: str) -> bool:
        """Whether the turn is running or waiting for the engine."""
        waiting = [q.input.turn_id for q in self._queue] + ([self._taking.input.turn_id] if self._taking else [])
        return turn_id == self.current_turn_id or turn_id in waiting

    def attach(self, engine: EngineSession, sandbox: Sandbox) -> None:
        """Start reading a freshly connected engine's output; `sandbox` is where it runs."""
        self._engine, self._sandbox = engine, sandbox
        self.lost_reason = ""
        self._reader = self._tasks.create_task(self._read(engine))

    # -- commands --------------------------------------------------------------

    def enqueue(self, item: Input) -> None:
        """Queue an input (already recorded as queued) for the engine."""
        self._queue.append(_Queued(item))
        if self._pump is None or self._pump.done():
            self._pump = self._tasks.create_task(self._drain())

    async def answer(self, interaction_id: str, decision: ToolDecision, receipt: Receipt) -> bool:
        """Resolve a parked interaction; an unknown or answered one only commits `receipt`."""
        return await self._interactions.answer(interaction_id, decision, receipt)

    async def interrupt(self, turn_id: str, deadline: float = 0.0) -> None:
        """Stop the turn if it is running or waiting; otherwise nothing happens."""
        async with self._lock:
            queued = next((q for q in [*self._queue, self._taking] if q and q.input.turn_id == turn_id), None)
            if queued is not None and not queued.cancelled:
                queued.cancelled = True
                if queued in self._queue:
                    self._queue.remove(queued)
                await self._db.write(
                    lambda c: (
                        self._state.unqueue_input_tx(c, self.session_id, turn_id),
                        self._outbox.append_tx(
                            c, self.session_id, turn_id, pb.TurnInterrupted(reason=INTERRUPTED_BEFORE_SEND)
                        ),
                    )
                )
                self._log.info("queued_turn_interrupted", turn_id=turn_id)
                return
            turn, engine = self._current, self._engine
            if turn is None or turn.turn_id != turn_id or turn.ended or turn.interrupting:
                return
            turn.interrupting = True
            self._interactions.resolve_turn(turn_id, INTERRUPTED)
        self._log.info("turn_interrupting", turn_id=turn_id)
        self._tasks.create_task(self._watch_deadline(turn, engine, deadline or self._limits.interrupt_deadline))
        if engine is not None:
            try:
                await bounded(engine.interrupt(), self._limits.engine_call)
            except Exception as exc:  # the deadline settles the turn anyway
                self._log.warning("engine_interrupt_failed", turn_id=turn_id, error=describe(exc))

    async def set_permission_mode(self, mode: str) -> None:
        if self._engine is not None:
            await bounded(self._engine.set_permission_mode(mode), self._limits.engine_call)

    async def stop_task(self, task_id: str) -> bool:
        """Stop a background task; False when no engine runs (its tasks ended with it)."""
        if self._engine is None:
            return False
        await bounded(self._engine.stop_task(task_id), self._limits.engine_call)
        return True

    async def close(self, abort_reason: str) -> None:
        """Stop everything: the pump, the engine; settle the running and queued turns as aborted."""
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.wait([self._pump], timeout=self._limits.close_engine)
        async with self._lock:
            engine = self._detach()
            waiting = [q for q in [self._taking, *self._queue] if q is not None and not q.cancelled]
            self._queue.clear()
            self._taking = None
            turn = self._current
            if turn is not None and not turn.ended:
                await self._settle(turn, pb.TurnAborted(reason=abort_reason))
            elif turn is not None:
                self._current = None
                turn.settled.set()
            for queued in waiting:
                queued.cancelled = True
                await self._db.write(functools.partial(self._abort_queued_tx, queued.input.turn_id, abort_reason))
            self._interactions.resolve_all(TURN_ENDED)
        if engine is not None:
            await close_quietly(engine, self._limits.close_engine)

    async def shutdown(self) -> None:
        """Close the engine without settling anything: the agent is stopping; `recover` settles at the next start."""
        engine = self._detach()
        if engine is not None:
            await close_quietly(engine, self._limits.close_engine)

    # -- interaction broker ------------------------------------------------------

    async def ask(self, request: ToolRequest) -> ToolDecision:
        """The engine asks to use a tool: park its turn on an `InteractionRequested`."""
        async with self._lock:
            turn = self._current
            if turn is None or turn.ended:
                turn = await self._open_engine_turn("the engine asked to use a tool on its own")
            if turn.interrupting:
                return INTERRUPTED
            interaction_id = await self._interactions.open(turn.turn_id, request)
        return await self._interactions.wait(interaction_id)

    # -- the input pump ----------------------------------------------------------

    async def _drain(self) -> None:
        while self._queue:
            queued = self._taking = self._queue.popleft()
            try:
                await self._run_input(queued)
            except Exception:
                self._log.exception("input_failed", turn_id=queued.input.turn_id)
            finally:
                self._taking = None

    async def _run_input(self, queued: _Queued) -> None:
        item = queued.input
        bound = self._log.bind(turn_id=item.turn_id)
        while True:
            await self._wait_idle()
            if queued.cancelled:
                return
            await self._probe_sandbox()
            try:
                engine = self._engine or await self._start_engine()
            except Exception as exc:
                bound.warning("engine_start_failed", error=describe(exc))
                await self._db.write(
                    functools.partial(
                        self._abort_queued_tx, item.turn_id, f"the engine could not be started: {describe(exc)}"
                    )
                )
                return
            async with self._lock:
                if queued.cancelled:
                    return
                if self._current is not None or self._engine is not engine:
                    continue  # the engine started a turn of its own, or went away, meanwhile
                turn = self._current = _Turn(item.turn_id, by_engine=False)
                self._taking = None  # from here on it is the running turn, not a waiting input
                await self._db.write(
                    lambda c: (
                        self._state.unqueue_input_tx(c, self.session_id, item.turn_id),
                        self._state.set_turn_tx(c, self.session_id, item.turn_id, item.permission_mode),
                    )
                )
                try:
                    await bounded(engine.send(item.text, item.permission_mode), self._limits.engine_call)
                except Exception as exc:
                    bound.warning("engine_send_failed", error=describe(exc))
                    self._detach()
                    refused = f"the engine did not take the message: {describe(exc)}"
                    await self._settle(turn, pb.TurnAborted(reason=refused))
                else:
                    await self._outbox.append(self.session_id, item.turn_id, pb.InputConsumed())
            if self._engine is not engine:
                # The engine that refused the message is closed; the next input starts a new one with resume.
                await close_quietly(engine, self._limits.close_engine)
                return
            bound.info("input_consumed")
            await turn.settled.wait()
            return

    async def _probe_sandbox(self) -> None:
        """Before an input: an engine whose workspace vanished is closed, so the runtime is recovered."""
        async with self._lock:
            gone = self._current is None and self._sandbox is not None and not self._sandbox.workspace.exists()
            engine = self._detach() if gone else None
            if gone:
                self.lost_reason = self.lost_reason or WORKSPACE_GONE_REASON
                self._log.warning("sandbox_gone", workspace=str(self._sandbox.workspace))
        if engine is not None:
            await close_quietly(engine, self._limits.close_engine)

    async def _wait_idle(self) -> None:
        while (turn := self._current) is not None:
            if turn.by_engine and not turn.interrupting:
                try:
                    async with asyncio.timeout(self._limits.engine_turn_wait):
                        await turn.settled.wait()
                except TimeoutError:
                    self._log.warning("engine_turn_interrupted_for_input", turn_id=turn.turn_id)
                    await self.interrupt(turn.turn_id)
            else:
                await turn.settled.wait()

    # -- the output reader ---------------------------------------------------------

    async def _read(self, engine: EngineSession) -> None:
        try:
            async for output in engine.outputs():
                await self._route(engine, output)
            lost, aborted = "the engine process ended unexpectedly", "the engine process ended during the turn"
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            lost = f"the engine failed: {describe(exc)}"
            aborted = f"the engine failed during the turn: {describe(exc)}"
        try:
            await self._engine_ended(engine, lost, aborted)
        except Exception:
            self._log.exception("engine_end_not_recorded")

    async def _route(self, engine: EngineSession, output: EngineOutput) -> None:
        async with self._lock:
            if self._engine is not engine:
                self._log.info("late_output_dropped", type_name=output.type_name)  # the engine was closed on purpose
                return
            turn = self._current
            if (turn is None or turn.ended) and not is_session_level(output):
                turn = await self._open_engine_turn(self._engine_turn_reason())
            elif turn is not None and turn.ended:
                turn = None
            if turn is None:
                self._note_task_event(output)
            turn_id = turn.turn_id if turn is not None else ""
            new_id = engine.engine_session_id if engine.engine_session_id != self._engine_session_id else ""
            body = pb.EngineMessage(type_name=output.type_name, payload_json=json.dumps(output.payload, default=str))
            ends = turn is not None and output.ends_turn

            def tx(c: sqlite3.Connection) -> None:
                self._outbox.append_tx(c, self.session_id, turn_id, body)
                if new_id:
                    self._state.set_engine_session_id_tx(c, self.session_id, new_id)
                if ends:
                    self._end_turn_tx(c, turn_id)
                    if turn.interrupting:
                        self._outbox.append_tx(
                            c, self.session_id, turn_id, pb.TurnInterrupted(reason=INTERRUPTED_BY_ENGINE)
                        )

            await self._db.write(tx)
            self._engine_session_id = new_id or self._engine_session_id
            if not ends:
                return
            turn.ended = True
            self._interactions.resolve_turn(turn_id, TURN_ENDED)
        await self._snapshot(engine, turn_id)
        async with self._lock:
            if self._current is turn:
                self._current = None
            turn.settled.set()
        self._log.info("turn_finished", turn_id=turn_id, interrupted=turn.interrupting, by_engine=turn.by_engine)

    async def _engine_ended(self, engine: EngineSession, lost: str, aborted: str) -> None:
        async with self._lock:
            if self._engine is not engine:
                return  # closed or replaced on purpose
            self._detach()
            self.lost_reason = lost
            self._log.warning("engine_lost", reason=lost)
            turn = self._current
            if turn is not None and not turn.ended:
                await self._settle(turn, pb.TurnAborted(reason=aborted))
        await close_quietly(engine, self._limits.close_engine)

    async def _watch_deadline(self, turn: _Turn, engine: EngineSession | None, deadline: float) -> None:
        try:
            async with asyncio.timeout(deadline):
                await turn.settled.wait()
            return
        except TimeoutError:
            pass
        async with self._lock:
            if turn.ended or turn.settled.is_set():
                return
            if engine is not None and self._engine is engine:
                self._detach()
            self._log.warning("interrupt_deadline_passed", turn_id=turn.turn_id, deadline=deadline)
            await self._settle(turn, pb.TurnInterrupted(reason=INTERRUPTED_AT_DEADLINE))
        if engine is not None:
            await close_quietly(engine, self._limits.close_engine)

    # -- helpers -------------------------------------------------------------------

    def _detach(self) -> EngineSession | None:
        """Forget the engine (its reader stops) so its end is not mistaken for a loss."""
        engine, self._engine = self._engine, None
        if self._reader is not None and self._reader is not asyncio.current_task():
            self._reader.cancel()
        self._reader = None
        return engine

    async def _open_engine_turn(self, reason: str) -> _Turn:
        """Open a turn the engine started on its own (caller holds the lock)."""
        turn = self._current = _Turn(str(uuid.uuid4()), by_engine=True)
        self._last_task_event = ""
        await self._db.write(
            lambda c: (
                self._outbox.append_tx(c, self.session_id, turn.turn_id, pb.EngineTurnStarted(reason=reason)),
                self._state.set_turn_tx(c, self.session_id, turn.turn_id),
            )
        )
        self._log.info("engine_turn_started", turn_id=turn.turn_id, reason=reason)
        return turn

    async def _settle(self, turn: _Turn, outcome: pb.TurnAborted | pb.TurnInterrupted) -> None:
        """End a turn without its ResultMessage (caller holds the lock)."""
        turn.ended = True
        self._interactions.resolve_turn(turn.turn_id, INTERRUPTED if turn.interrupting else TURN_ENDED)
        await self._db.write(
            lambda c: (
                self._outbox.append_tx(c, self.session_id, turn.turn_id, outcome),
                self._end_turn_tx(c, turn.turn_id),
            )
        )
        if self._current is turn:
            self._current = None
        turn.settled.set()
        self._log.info("turn_settled", turn_id=turn.turn_id, outcome=outcome.DESCRIPTOR.name, reason=outcome.reason)

    def _end_turn_tx(self, c: sqlite3.Connection, turn_id: str) -> None:
        self._state.set_turn_tx(c, self.session_id, "")
        self._state.remove_interactions_tx(c, self.session_id, turn_id=turn_id)

    def _abort_queued_tx(self, turn_id: str, reason: str, c: sqlite3.Connection) -> None:
        self._state.unqueue_input_tx(c, self.session_id, turn_id)
        self._outbox.append_tx(c, self.session_id, turn_id, pb.TurnAborted(reason=reason))

    async def _snapshot(self, engine: EngineSession, turn_id: str) -> None:
        try:
            content = await bounded(engine.transcript(), self._limits.engine_call)
        except Exception as exc:
            self._log.warning("transcript_unavailable", turn_id=turn_id, error=describe(exc))
            return
        if not content:
            return
        await self._transcripts.save(self.session_id, content)
        if len(content) > self._limits.transcript_cap:
            self._log.warning(
                "transcript_snapshot_not_sent", turn_id=turn_id, size=len(content), cap=self._limits.transcript_cap
            )
            return
        engine_session_id = engine.engine_session_id or self._engine_session_id
        snapshot = pb.TranscriptSnapshot(engine_session_id=engine_session_id, content=content)
        await self._outbox.append(self.session_id, turn_id, snapshot)

    def _note_task_event(self, output: EngineOutput) -> None:
        data = output.payload.get("data") if isinstance(output.payload.get("data"), dict) else {}
        task_id = output.payload.get("task_id") or data.get("task_id")
        status = output.payload.get("status") or data.get("status")
        if task_id and status:
            self._last_task_event = f"background task {task_id} is {status}"

    def _engine_turn_reason(self) -> str:
        if self._last_task_event:
            return f"the engine started a turn on its own after {self._last_task_event}"
        return "the engine started a turn on its own"


async def bounded(call: Awaitable[T], seconds: float) -> T:
    """Await `call` for at most `seconds`; TimeoutError after that.

    Not `asyncio.wait_for`: on Python 3.11 a caller cancelled just as `call`
    completes gets the result instead of its cancellation. A reader or input
    pump cancelled by its task group then carries on and waits on the engine
    forever, and the task group (so the agent's shutdown) never finishes."""
    async with asyncio.timeout(seconds):
        return await call


async def close_quietly(engine: EngineSession, timeout: float) -> None:
    try:
        await bounded(engine.close(), timeout)
    except Exception as exc:
        log.warning("engine_close_failed", error=describe(exc))


def describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
