"""The turn running on one session's engine, and the lock under which it changes.

The input pump, the output router and interrupts decide from the same few
facts: which engine is attached (and the task reading it), which turn runs on
it, and whether that turn is being interrupted or has ended. The facts live
here and change only under `lock`, each with the outbox write that records
it, so the outbox order is the order in which things happened and a turn is
settled exactly once. Engine calls are never made under the lock: an engine
may need its stream read to answer a control call.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from dataclasses import dataclass, field

import structlog
from opentelemetry import context as otel_context
from opentelemetry.trace import Span

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.base import EngineSession
from dataplane_agent.relay.deltas import LiveDeltas
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.sandboxes.base import Sandbox
from dataplane_agent.state import AgentState
from dataplane_agent.state_database import Database, in_order
from dataplane_agent.turns.engine_calls import close_quietly
from dataplane_agent.turns.interactions import INTERRUPTED, TURN_ENDED, Interactions
from dataplane_agent.turns.memory import SessionMemory
from serverkit import tracing

log = structlog.get_logger(__name__)


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
    # Engine messages whose JSON is larger than this are sent with their longest strings elided
    # (`dataplane_agent.turns.elision`), for the same reason.
    engine_message_cap: int = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class TurnContext:
    """One session and what every part of its turns works with; `SessionTurns` makes one per session."""

    session_id: str
    db: Database
    state: AgentState
    outbox: Outbox
    interactions: Interactions
    # Owns the engine readers, input pumps and interrupt deadlines.
    tasks: asyncio.TaskGroup
    limits: TurnLimits
    # Where the engine's partial messages go (live only); None: nowhere.
    deltas: LiveDeltas | None = None


@dataclass(eq=False)
class Turn:
    """A turn on the engine; `settled` is set once nothing more is recorded under its turn_id."""

    turn_id: str
    by_engine: bool
    interrupting: bool = False
    # The ResultMessage was routed; the snapshot may still be running.
    ended: bool = False
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    # The turn's span, from its opening to its settlement; its outputs carry it (`Outbox.trace_turn`).
    span: Span | None = None


class TurnLedger:
    """One session's attached engine and running turn; read and change them holding `lock`."""

    def __init__(self, context: TurnContext, engine_session_id: str) -> None:
        self.lock = asyncio.Lock()
        self.engine: EngineSession | None = None
        self.sandbox: Sandbox | None = None
        # The task routing the attached engine's output; cancelled when the engine is detached.
        self.reader: asyncio.Task[None] | None = None
        self.current: Turn | None = None
        # The engine's conversation id as last recorded.
        self.engine_session_id = engine_session_id
        # Why the engine went away unexpectedly; the next input recovers the runtime.
        self.lost_reason = ""
        # The session's memory stores in its sandbox (turns.memory); None: none.
        self.memory: SessionMemory | None = None
        self._ctx = context
        self._log = log.bind(session_id=context.session_id)
        # Closes of detached engines still under way.
        self._closing: set[asyncio.Future[None]] = set()

    def attach(self, engine: EngineSession, sandbox: Sandbox) -> None:
        """Take a freshly connected engine; `sandbox` is where it runs."""
        self.engine, self.sandbox = engine, sandbox
        self.lost_reason = ""

    async def retire(self, engine: EngineSession) -> None:
        """Close a detached engine. Until it is closed no new engine starts for this session
        (`retired`): a stuck engine may take its whole close timeout, and two CLIs on one
        conversation would both write its transcript."""
        closing = asyncio.ensure_future(close_quietly(engine, self._ctx.limits.close_engine))
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)
        await asyncio.shield(closing)

    async def retired(self) -> None:
        """Until every engine this session detached is closed."""
        if self._closing:
            await asyncio.shield(asyncio.gather(*self._closing))

    def detach(self) -> EngineSession | None:
        """Forget the engine (its reader stops) so its end is not mistaken for a loss."""
        engine, self.engine = self.engine, None
        if self.reader is not None and self.reader is not asyncio.current_task():
            self.reader.cancel()
        self.reader = None
        return engine

    async def open_user_turn(self, turn_id: str, traceparent: str = "") -> Turn:
        """Open the turn of an input the engine is about to take; its input leaves the queue with it.
        Its span is a child of `traceparent` (the DeliverInput's), a new trace without one."""
        ctx = self._ctx
        turn = self.current = Turn(turn_id, by_engine=False)
        self._trace(turn, "turn", traceparent)
        await ctx.db.write(
            in_order(
                lambda c: ctx.state.unqueue_input_tx(c, ctx.session_id, turn_id),
                lambda c: ctx.state.set_turn_tx(c, ctx.session_id, turn_id),
            )
        )
        return turn

    async def open_engine_turn(self, reason: str) -> Turn:
        """Open a turn the engine started on its own, under a new turn_id."""
        ctx = self._ctx
        turn = self.current = Turn(str(uuid.uuid4()), by_engine=True)
        self._trace(turn, "engine turn", "")
        await ctx.db.write(
            in_order(
                lambda c: ctx.outbox.append_tx(c, ctx.session_id, turn.turn_id, pb.EngineTurnStarted(reason=reason)),
                lambda c: ctx.state.set_turn_tx(c, ctx.session_id, turn.turn_id),
            )
        )
        self._log.info("engine_turn_started", turn_id=turn.turn_id, reason=reason)
        return turn

    async def settle(self, turn: Turn, outcome: pb.TurnAborted | pb.TurnInterrupted) -> None:
        """End a turn without its ResultMessage."""
        ctx = self._ctx
        turn.ended = True
        ctx.interactions.resolve_turn(turn.turn_id, INTERRUPTED if turn.interrupting else TURN_ENDED)
        await ctx.db.write(
            in_order(
                lambda c: ctx.outbox.append_tx(c, ctx.session_id, turn.turn_id, outcome),
                lambda c: self.end_turn_tx(c, turn.turn_id),
            )
        )
        self.finish(turn)
        self._log.info("turn_settled", turn_id=turn.turn_id, outcome=outcome.DESCRIPTOR.name, reason=outcome.reason)

    async def abort_running(self, reason: str) -> None:
        """Settle the running turn as aborted; one whose ResultMessage was routed is only let go."""
        turn = self.current
        if turn is not None and not turn.ended:
            await self.settle(turn, pb.TurnAborted(reason=reason))
        elif turn is not None:
            self.finish(turn)

    def finish(self, turn: Turn) -> None:
        """Release whoever waits for the turn (its outcome is recorded); it no longer runs."""
        if self.current is turn:
            self.current = None
        turn.settled.set()
        if turn.span is not None:
            self._ctx.outbox.untrace_turn(turn.turn_id)
            turn.span.end()
            turn.span = None

    def _trace(self, turn: Turn, name: str, traceparent: str) -> None:
        attributes = {"astrabox.session_id": self._ctx.session_id, "astrabox.turn_id": turn.turn_id}
        parent = tracing.context_of(traceparent) or otel_context.Context()
        turn.span = tracing.tracer().start_span(name, context=parent, attributes=attributes)
        self._ctx.outbox.trace_turn(turn.turn_id, tracing.traceparent(turn.span))

    def end_turn_tx(self, c: sqlite3.Connection, turn_id: str) -> None:
        """Record, in the caller's transaction, that no turn runs and the turn's questions are gone."""
        ctx = self._ctx
        ctx.state.set_turn_tx(c, ctx.session_id, "")
        ctx.state.remove_interactions_tx(c, ctx.session_id, turn_id=turn_id)
