"""The questions one session's turns are parked on.

A question (a tool approval, AskUserQuestion) is recorded before anyone can
answer it: the `InteractionRequested` output and a row naming it commit
together, then the asking engine callback parks on a future. An answer
resolves the future once; an unknown or already answered id has no effect.
When a turn is settled any other way (interrupted, ended, its engine closed)
its questions are resolved with a denial so the engine callback returns, and
their rows are removed in the settling transaction.

The futures live only in this process: a relay reconnect leaves them parked,
an agent restart aborts their turns (`Runtimes.recover`).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from dataclasses import dataclass

import structlog

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.base import ToolDecision, ToolRequest
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.state import AgentState, PendingInteraction
from dataplane_agent.state_database import Database, Receipt

log = structlog.get_logger(__name__)

INTERRUPTED = ToolDecision(allow=False, message="The user interrupted the turn.", interrupt=True)
TURN_ENDED = ToolDecision(allow=False, message="The turn ended before the question was answered.", interrupt=True)


@dataclass(eq=False, slots=True)
class _Parked:
    turn_id: str
    future: asyncio.Future[ToolDecision]


class Interactions:
    """Records, parks and resolves one session's interactions."""

    def __init__(self, session_id: str, *, db: Database, state: AgentState, outbox: Outbox) -> None:
        self._session_id = session_id
        self._db = db
        self._state = state
        self._outbox = outbox
        self._parked: dict[str, _Parked] = {}

    def pending(self, turn_id: str = "") -> list[str]:
        """Ids of unanswered interactions (of one turn, when named)."""
        return [i for i, p in self._parked.items() if not turn_id or p.turn_id == turn_id]

    async def open(self, turn_id: str, request: ToolRequest) -> str:
        """Record the question under `turn_id` and park it; return its id for `wait`."""
        interaction_id = request.interaction_id or str(uuid.uuid4())
        # Registered before the output exists, so no answer can arrive before its future.
        self._parked[interaction_id] = _Parked(turn_id, asyncio.get_running_loop().create_future())
        requested = pb.InteractionRequested(
            interaction_id=interaction_id,
            tool_name=request.tool_name,
            input_json=json.dumps(request.input, default=str),
            tool_use_id=request.tool_use_id,
            custom_tool=request.custom_tool,
            subagent=request.subagent,
        )
        record = PendingInteraction(interaction_id, self._session_id, turn_id, request.tool_name, request.tool_use_id)

        def tx(c: sqlite3.Connection) -> None:
            self._outbox.append_tx(c, self._session_id, turn_id, requested)
            self._state.add_interaction_tx(c, record)

        try:
            await self._db.write(tx)
        except BaseException:
            self._parked.pop(interaction_id, None)
            raise
        log.info(
            "interaction_requested",
            session_id=self._session_id,
            turn_id=turn_id,
            interaction_id=interaction_id,
            tool_name=request.tool_name,
        )
        return interaction_id

    async def wait(self, interaction_id: str) -> ToolDecision:
        """Park until the interaction is answered or its turn is settled."""
        parked = self._parked[interaction_id]
        try:
            return await parked.future
        finally:
            self._parked.pop(interaction_id, None)

    async def answer(self, interaction_id: str, decision: ToolDecision, receipt: Receipt) -> bool:
        """Resolve a parked interaction, committing `receipt` with it; False (and no effect) if none is parked."""
        parked = self._parked.get(interaction_id)
        if parked is None or parked.future.done():
            await self._db.write(receipt)
            log.info("interaction_not_pending", session_id=self._session_id, interaction_id=interaction_id)
            return False

        def tx(c: sqlite3.Connection) -> None:
            self._state.remove_interactions_tx(c, self._session_id, interaction_id=interaction_id)
            receipt(c)

        await self._db.write(tx)
        if not parked.future.done():
            parked.future.set_result(decision)
        log.info(
            "interaction_answered", session_id=self._session_id, interaction_id=interaction_id, allow=decision.allow
        )
        return True

    def resolve_turn(self, turn_id: str, decision: ToolDecision) -> list[str]:
        """Resolve every parked interaction of the turn with `decision`; the caller removes their rows."""
        resolved = []
        for interaction_id, parked in list(self._parked.items()):
            if parked.turn_id == turn_id and not parked.future.done():
                parked.future.set_result(decision)
                resolved.append(interaction_id)
        return resolved

    def resolve_all(self, decision: ToolDecision) -> None:
        for parked in list(self._parked.values()):
            if not parked.future.done():
                parked.future.set_result(decision)
