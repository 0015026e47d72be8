"""One session's engine and the turns that run on it.

`SessionTurns` is what the runtimes hold for a session: it puts together the
parts that share the session's engine and running turn (`ledger`):

- `inputs`: inputs wait in a queue and go to the engine one at a time,
  each once the previous turn is settled.
- `outputs`: every output of the engine's single stream is recorded
  under the turn it belongs to (a user turn, a turn the engine started on its
  own, or none), and each ResultMessage is followed by a transcript snapshot.
- `interrupts`: a waiting input is withdrawn; a running turn is asked to stop
  and, past its deadline, settled while its engine is replaced.

Every turn is settled exactly once: by its ResultMessage (followed by
`TurnInterrupted` if it was being interrupted), by `TurnInterrupted` when an
interrupt's deadline passes (the engine is closed and restarted lazily with
resume), or by `TurnAborted` when the engine fails, ends, or the runtime is
destroyed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from dataplane_agent.engines.base import EngineSession, ToolDecision, ToolRequest
from dataplane_agent.relay.deltas import LiveDeltas
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.sandboxes.base import Sandbox
from dataplane_agent.state import AgentState
from dataplane_agent.state_database import Database, Receipt
from dataplane_agent.turns.engine_calls import close_quietly, describe
from dataplane_agent.turns.inputs import (
    INTERRUPTED_BEFORE_SEND,
    WORKSPACE_GONE_REASON,
    EngineStarter,
    Input,
    TurnInputs,
)
from dataplane_agent.turns.interactions import TURN_ENDED, Interactions
from dataplane_agent.turns.interrupts import INTERRUPTED_AT_DEADLINE, Interrupts
from dataplane_agent.turns.ledger import TurnContext, TurnLedger, TurnLimits
from dataplane_agent.turns.memory import SessionMemory
from dataplane_agent.turns.outputs import INTERRUPTED_BY_ENGINE, OutputRouter
from dataplane_agent.turns.tool_grants import ToolGrants
from dataplane_agent.turns.transcripts import TranscriptStore
from serverkit.waits import bounded

__all__ = [
    "INTERRUPTED_AT_DEADLINE",
    "INTERRUPTED_BEFORE_SEND",
    "INTERRUPTED_BY_ENGINE",
    "WORKSPACE_GONE_REASON",
    "EngineStarter",
    "Input",
    "SessionTurns",
    "TurnLimits",
    "close_quietly",
    "describe",
]

log = structlog.get_logger(__name__)


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
        deltas: LiveDeltas | None = None,
    ) -> None:
        self.session_id = session_id
        self._limits = limits
        self._state = state
        self._interactions = Interactions(session_id, db=db, state=state, outbox=outbox)
        context = TurnContext(session_id, db, state, outbox, self._interactions, tasks, limits, deltas)
        self._ledger = TurnLedger(context, engine_session_id)
        self._inputs = TurnInputs(context, self._ledger, start_engine=start_engine, interrupt=self.interrupt)
        self._interrupts = Interrupts(context, self._ledger, self._inputs)
        self._outputs = OutputRouter(context, self._ledger, transcripts)

    # -- state -----------------------------------------------------------------

    @property
    def engine(self) -> EngineSession | None:
        return self._ledger.engine

    @property
    def sandbox(self) -> Sandbox | None:
        """Where the attached engine runs."""
        return self._ledger.sandbox

    @property
    def current_turn_id(self) -> str:
        return self._ledger.current.turn_id if self._ledger.current is not None else ""

    @property
    def lost_reason(self) -> str:
        """Why the engine went away unexpectedly; the next input recovers the runtime."""
        return self._ledger.lost_reason

    @lost_reason.setter
    def lost_reason(self, reason: str) -> None:
        self._ledger.lost_reason = reason

    def knows_turn(self, turn_id: str) -> bool:
        """Whether the turn is running or waiting for the engine."""
        return turn_id == self.current_turn_id or self._inputs.waits(turn_id)

    def attach(self, engine: EngineSession, sandbox: Sandbox) -> None:
        """Start reading a freshly connected engine's output; `sandbox` is where it runs."""
        self._outputs.attach(engine, sandbox)

    def mount_memory(self, memory: SessionMemory) -> None:
        """The memory stores put in the session's sandbox: the READ_WRITE ones' changes are sent
        when each turn ends."""
        self._ledger.memory = memory

    # -- commands --------------------------------------------------------------

    def enqueue(self, item: Input) -> None:
        """Queue an input (already recorded as queued) for the engine."""
        self._inputs.enqueue(item)

    async def answer(self, interaction_id: str, decision: ToolDecision, receipt: Receipt) -> bool:
        """Resolve a parked interaction; an unknown or answered one only commits `receipt`."""
        return await self._interactions.answer(interaction_id, decision, receipt)

    async def interrupt(self, turn_id: str, deadline: float = 0.0) -> None:
        """Stop the turn if it is running or waiting; otherwise nothing happens."""
        await self._interrupts.interrupt(turn_id, deadline)

    async def stop_idle(self, then: Callable[[], Awaitable[None]]) -> bool:
        """Close the engine if the session is idle, then run `then` (stopping the sandbox); the next
        input starts a new engine. False, doing nothing, if a turn runs or inputs wait."""
        return await self._inputs.stop_idle(then)

    async def recover(self, reason: str) -> bool:
        """Rebuild the runtime of an idle session whose sandbox is gone (`reason`); False if not idle."""
        return await self._inputs.recover(reason)

    async def set_permission_mode(self, mode: str) -> None:
        if self._ledger.engine is not None:
            await bounded(self._ledger.engine.set_permission_mode(mode), self._limits.engine_call)

    async def stop_task(self, task_id: str) -> bool:
        """Stop a background task; False when no engine runs (its tasks ended with it)."""
        if self._ledger.engine is None:
            return False
        await bounded(self._ledger.engine.stop_task(task_id), self._limits.engine_call)
        return True

    async def close(self, abort_reason: str) -> None:
        """Stop everything: the pump, the engine; settle the running and queued turns as aborted."""
        await self._inputs.stop()
        async with self._ledger.lock:
            engine = self._ledger.detach()
            waiting = self._inputs.clear()
            await self._ledger.abort_running(abort_reason)
            await self._inputs.abort(waiting, abort_reason)
            self._interactions.resolve_all(TURN_ENDED)
        if engine is not None:
            await close_quietly(engine, self._limits.close_engine)

    async def shutdown(self) -> None:
        """Close the engine without settling anything: the agent is stopping; `recover` settles at the next start."""
        engine = self._ledger.detach()
        if engine is not None:
            await close_quietly(engine, self._limits.close_engine)

    # -- interaction broker ------------------------------------------------------

    async def ask(self, request: ToolRequest) -> ToolDecision:
        """The engine asks to use a tool: a tool grant in force lets it run; else park its turn on an
        `InteractionRequested`. A custom tool's call always reaches the client: only it has the result."""
        if request.custom_tool or request.subagent:
            return await self._outputs.ask(request)
        record = await self._state.session(self.session_id)
        grants = ToolGrants.from_command(record.tool_grants if record else b"")
        grant = grants.matching(request.tool_name, request.input)
        if grant is not None:
            log.info(
                "tool_call_granted", session_id=self.session_id, tool_name=request.tool_name, grant_id=grant.grant_id
            )
            return ToolDecision(allow=True)
        return await self._outputs.ask(request)
