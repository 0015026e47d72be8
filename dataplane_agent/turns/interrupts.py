"""Stopping a turn: a waiting input is withdrawn, a running turn is given a deadline.

An input still waiting for the engine is settled as interrupted at once and
never sent. A running turn is marked as interrupting, its questions are
answered with a denial and the engine is asked to stop; a cooperative engine
ends the turn with its ResultMessage, which the output router follows with
`TurnInterrupted`. A turn still running at the deadline is settled as
interrupted there and then, and its engine is detached and closed: one that
did not stop when asked may still be busy with the old turn, so the next
input starts a new engine that resumes the conversation, once the old one has
closed (`TurnLedger.retire`).
"""

from __future__ import annotations

import asyncio

import structlog

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.base import EngineSession
from dataplane_agent.turns.engine_calls import describe
from dataplane_agent.turns.inputs import TurnInputs
from dataplane_agent.turns.interactions import INTERRUPTED
from dataplane_agent.turns.ledger import Turn, TurnContext, TurnLedger
from serverkit.waits import bounded

log = structlog.get_logger(__name__)

INTERRUPTED_AT_DEADLINE = "deadline passed; engine replaced"


class Interrupts:
    """Interrupts one session's turns and enforces their deadlines."""

    def __init__(self, context: TurnContext, ledger: TurnLedger, inputs: TurnInputs) -> None:
        self._ctx = context
        self._ledger = ledger
        self._inputs = inputs
        self._log = log.bind(session_id=context.session_id)

    async def interrupt(self, turn_id: str, deadline: float = 0.0) -> None:
        """Stop the turn if it is running or waiting; otherwise nothing happens."""
        async with self._ledger.lock:
            if await self._inputs.withdraw(turn_id):
                return
            turn, engine = self._ledger.current, self._ledger.engine
            if turn is None or turn.turn_id != turn_id or turn.ended or turn.interrupting:
                return
            turn.interrupting = True
            self._ctx.interactions.resolve_turn(turn_id, INTERRUPTED)
        self._log.info("turn_interrupting", turn_id=turn_id)
        self._ctx.tasks.create_task(self._watch_deadline(turn, engine, deadline or self._ctx.limits.interrupt_deadline))
        if engine is not None:
            try:
                await bounded(engine.interrupt(), self._ctx.limits.engine_call)
            except Exception as exc:  # the deadline settles the turn anyway
                self._log.warning("engine_interrupt_failed", turn_id=turn_id, error=describe(exc))

    async def _watch_deadline(self, turn: Turn, engine: EngineSession | None, deadline: float) -> None:
        try:
            async with asyncio.timeout(deadline):
                await turn.settled.wait()
            return
        except TimeoutError:
            pass
        async with self._ledger.lock:
            if turn.ended or turn.settled.is_set():
                return
            if engine is not None and self._ledger.engine is engine:
                self._ledger.detach()
            self._log.warning("interrupt_deadline_passed", turn_id=turn.turn_id, deadline=deadline)
            await self._ledger.settle(turn, pb.TurnInterrupted(reason=INTERRUPTED_AT_DEADLINE))
        if engine is not None:
            await self._ledger.retire(engine)
