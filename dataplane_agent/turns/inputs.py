"""Inputs waiting for the engine, and the pump that gives them to it one at a time.

An input (already recorded as queued) waits in a queue and goes to the engine
once the previous turn is settled; a turn the engine started on its own is
given `engine_turn_wait` to finish and is then interrupted. Before each input
the sandbox is checked: an engine whose workspace vanished is closed, so the
input starts a new one and the runtime is recovered. The input opens its turn
and leaves the queue in one transaction; an input the engine cannot be
started for, or that the engine refuses, is settled as aborted. An input
interrupted while it waits is settled without ever being sent.

An input may carry a permission mode of its own, for its turn only: once that
turn has settled the engine goes back to the session's mode before the next
input is taken. An engine that refuses the input's mode (and keeps running)
settles that turn as aborted with nothing sent, and keeps the session's engine.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.base import EngineSession, PermissionModeRefused
from dataplane_agent.state_database import in_order
from dataplane_agent.turns.engine_calls import describe
from dataplane_agent.turns.ledger import TurnContext, TurnLedger
from serverkit.waits import bounded

log = structlog.get_logger(__name__)

INTERRUPTED_BEFORE_SEND = "interrupted before the engine took the message"
WORKSPACE_GONE_REASON = "the sandbox's workspace is gone"

# Starts (or restarts, recovering a lost sandbox) the session's engine and attaches it.
EngineStarter = Callable[[], Awaitable[EngineSession]]


@dataclass(frozen=True, slots=True)
class Input:
    """A user message waiting for the engine."""

    turn_id: str
    text: str
    # This turn's own mode; empty: the session's.
    permission_mode: str = ""
    # The W3C traceparent of the command that delivered it: the turn's span is its child.
    traceparent: str = ""


@dataclass(eq=False)
class QueuedInput:
    """An input in the queue; `cancelled` once it was interrupted or aborted before the engine took it."""

    input: Input
    cancelled: bool = False


class TurnInputs:
    """One session's queue of inputs and the pump that drains it into the engine."""

    def __init__(
        self,
        context: TurnContext,
        ledger: TurnLedger,
        *,
        start_engine: EngineStarter,
        interrupt: Callable[[str], Awaitable[None]],
    ) -> None:
        self._ctx = context
        self._ledger = ledger
        self._start_engine = start_engine
        # Stops a turn the engine started on its own when an input has waited long enough for it.
        self._interrupt = interrupt
        self._queue: collections.deque[QueuedInput] = collections.deque()
        # The input the pump is giving to the engine; it still waits until its turn opens.
        self._taking: QueuedInput | None = None
        self._pump: asyncio.Task[None] | None = None
        # One engine start at a time, whether for an input or a recovery.
        self._starting = asyncio.Lock()
        self._log = log.bind(session_id=context.session_id)

    def waits(self, turn_id: str) -> bool:
        """Whether the turn's input is waiting for the engine."""
        waiting = [q.input.turn_id for q in self._queue] + ([self._taking.input.turn_id] if self._taking else [])
        return turn_id in waiting

    def enqueue(self, item: Input) -> None:
        """Queue an input (already recorded as queued) for the engine."""
        self._queue.append(QueuedInput(item))
        if self._pump is None or self._pump.done():
            self._pump = self._ctx.tasks.create_task(self._drain())

    async def withdraw(self, turn_id: str) -> bool:
        """Settle a waiting input as interrupted, never to be sent; False if none waits (caller holds the lock)."""
        queued = next((q for q in [*self._queue, self._taking] if q and q.input.turn_id == turn_id), None)
        if queued is None or queued.cancelled:
            return False
        queued.cancelled = True
        if queued in self._queue:
            self._queue.remove(queued)
        ctx = self._ctx
        await ctx.db.write(
            in_order(
                lambda c: ctx.state.unqueue_input_tx(c, ctx.session_id, turn_id),
                lambda c: ctx.outbox.append_tx(
                    c, ctx.session_id, turn_id, pb.TurnInterrupted(reason=INTERRUPTED_BEFORE_SEND)
                ),
            )
        )
        self._log.info("queued_turn_interrupted", turn_id=turn_id)
        return True

    async def stop(self) -> None:
        """Stop the pump, giving it `close_engine` to unwind."""
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.wait([self._pump], timeout=self._ctx.limits.close_engine)

    def clear(self) -> list[QueuedInput]:
        """Empty the queue; return the inputs still waiting, for `abort` (caller holds the lock)."""
        waiting = [q for q in [self._taking, *self._queue] if q is not None and not q.cancelled]
        self._queue.clear()
        self._taking = None
        return waiting

    async def abort(self, waiting: list[QueuedInput], reason: str) -> None:
        """Settle inputs taken by `clear` as aborted (caller holds the lock)."""
        for queued in waiting:
            queued.cancelled = True
            await self._ctx.db.write(functools.partial(self._abort_tx, queued.input.turn_id, reason))

    # -- the pump ------------------------------------------------------------------

    async def _drain(self) -> None:
        while self._queue:
            queued = self._taking = self._queue.popleft()
            try:
                await self._run(queued)
            except Exception:
                self._log.exception("input_failed", turn_id=queued.input.turn_id)
            finally:
                self._taking = None

    async def _run(self, queued: QueuedInput) -> None:
        item, ctx, ledger = queued.input, self._ctx, self._ledger
        bound = self._log.bind(turn_id=item.turn_id)
        while True:
            await self._wait_idle()
            if queued.cancelled:
                return
            await self._probe_sandbox()
            try:
                engine = await self.engine()
            except Exception as exc:
                bound.warning("engine_start_failed", error=describe(exc))
                await ctx.db.write(
                    functools.partial(self._abort_tx, item.turn_id, f"the engine could not be started: {describe(exc)}")
                )
                return
            async with ledger.lock:
                if queued.cancelled:
                    return
                if ledger.current is not None or ledger.engine is not engine:
                    continue  # the engine started a turn of its own, or went away, meanwhile
                self._taking = None  # from here on it is the running turn, not a waiting input
                turn = await ledger.open_user_turn(item.turn_id, item.traceparent)
                try:
                    await bounded(engine.send(item.text, item.permission_mode), ctx.limits.engine_call)
                except PermissionModeRefused as exc:
                    # The engine goes on, in the mode it was in; only this turn cannot run as asked.
                    await ledger.settle(turn, pb.TurnAborted(reason=f"the message was not sent: {exc}"))
                    return
                except Exception as exc:
                    bound.warning("engine_send_failed", error=describe(exc))
                    ledger.detach()
                    refused = f"the engine did not take the message: {describe(exc)}"
                    await ledger.settle(turn, pb.TurnAborted(reason=refused))
                else:
                    await ctx.outbox.append(ctx.session_id, item.turn_id, pb.InputConsumed())
            if ledger.engine is not engine:
                # The engine that refused the message is closed; the next input starts a new one with resume.
                await ledger.retire(engine)
                return
            bound.info("input_consumed")
            await turn.settled.wait()
            if item.permission_mode:
                await self._end_turn_mode(engine)
            return

    async def _end_turn_mode(self, engine: EngineSession) -> None:
        """After a turn that ran in its own mode: the session's again, before the next input.
        An engine replaced meanwhile started in the session's mode; one that fails here switches
        at the next input, which names its mode or the session's."""
        if self._ledger.engine is not engine or engine.ended:
            return
        try:
            await bounded(engine.end_turn_mode(), self._ctx.limits.engine_call)
        except Exception as exc:
            self._log.warning("permission_mode_not_restored", error=describe(exc))

    async def engine(self) -> EngineSession:
        """The attached engine, else one started now: one start at a time, and only once the
        engine it replaces has closed (two CLIs on one conversation would both write its transcript)."""
        async with self._starting:
            if self._ledger.engine is not None:
                return self._ledger.engine
            await self._ledger.retired()
            return await self._start_engine()

    async def stop_idle(self, then: Callable[[], Awaitable[None]]) -> bool:
        """Close the engine of an idle session and run `then` (stopping its sandbox) before any new
        engine may start; False, doing nothing, when a turn runs or inputs wait."""
        async with self._starting:
            if not await self._close_if_idle():
                return False
            await then()
        return True

    async def recover(self, reason: str) -> bool:
        """Replace the engine and sandbox of an idle session whose sandbox is gone, now rather than at
        its next input; False, doing nothing, when a turn runs or inputs wait (they recover it)."""
        if not await self._close_if_idle(lost_reason=reason):
            return False
        await self.engine()
        return True

    async def _close_if_idle(self, lost_reason: str = "") -> bool:
        """Detach and close the engine when no turn runs and no input waits (recording `lost_reason`
        for the next start, if given); False, doing nothing, otherwise."""
        ledger = self._ledger
        async with ledger.lock:
            if ledger.current is not None or self._queue or self._taking is not None:
                return False
            engine = ledger.detach()
            if lost_reason:
                ledger.lost_reason = ledger.lost_reason or lost_reason
        if engine is not None:
            await ledger.retire(engine)
        return True

    async def _probe_sandbox(self) -> None:
        """Before an input: an engine whose workspace vanished is closed, so the runtime is recovered."""
        ledger = self._ledger
        async with ledger.lock:
            sandbox = ledger.sandbox
            gone = ledger.current is None and sandbox is not None and not sandbox.workspace.exists()
            engine = ledger.detach() if gone else None
            if gone and sandbox is not None:
                ledger.lost_reason = ledger.lost_reason or WORKSPACE_GONE_REASON
                self._log.warning("sandbox_gone", workspace=str(sandbox.workspace))
        if engine is not None:
            await ledger.retire(engine)

    async def _wait_idle(self) -> None:
        while (turn := self._ledger.current) is not None:
            if turn.by_engine and not turn.interrupting:
                try:
                    async with asyncio.timeout(self._ctx.limits.engine_turn_wait):
                        await turn.settled.wait()
                except TimeoutError:
                    self._log.warning("engine_turn_interrupted_for_input", turn_id=turn.turn_id)
                    await self._interrupt(turn.turn_id)
            else:
                await turn.settled.wait()

    def _abort_tx(self, turn_id: str, reason: str, c: sqlite3.Connection) -> None:
        ctx = self._ctx
        ctx.state.unqueue_input_tx(c, ctx.session_id, turn_id)
        ctx.outbox.append_tx(c, ctx.session_id, turn_id, pb.TurnAborted(reason=reason))
