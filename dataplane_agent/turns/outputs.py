"""Which turn each output of an engine's single stream belongs to.

- A user turn opens when its input is sent; every output after that, up to
  and including the ResultMessage, carries its turn_id.
- Between turns, background-task lifecycle messages and other status notices
  (every SystemMessage but "init", rate-limit events) are session-level
  outputs with an empty turn_id. Any other output, or a tool request, means
  the engine started a turn on its own: `EngineTurnStarted` opens it under a
  new turn_id, naming the background task that prompted it when one was
  reported, and it runs to its ResultMessage like a user turn.
- After a ResultMessage the engine's transcript is snapshotted: kept in the
  state directory, so a lost sandbox can be recreated with the conversation,
  and appended as `TranscriptSnapshot` under the same turn_id.
- An MCP server of the agent that the engine reports it could not start is
  reported between the outputs (McpServerUnavailable), in no turn.
- When the stream ends or fails, the engine is lost: its running turn is
  aborted and the next input recovers the runtime.
"""

from __future__ import annotations

import asyncio
import sqlite3

import structlog

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.base import (
    EngineDelta,
    EngineOutput,
    EngineSession,
    McpUnavailable,
    ToolDecision,
    ToolRequest,
)
from dataplane_agent.sandboxes.base import Sandbox
from dataplane_agent.turns import memory
from dataplane_agent.turns.elision import fitted_json
from dataplane_agent.turns.engine_calls import describe
from dataplane_agent.turns.interactions import INTERRUPTED, TURN_ENDED
from dataplane_agent.turns.ledger import Turn, TurnContext, TurnLedger
from dataplane_agent.turns.transcripts import TranscriptStore
from serverkit.waits import bounded

log = structlog.get_logger(__name__)

INTERRUPTED_BY_ENGINE = "the engine stopped the turn"

# Between turns these never open one: status notices, not conversation.
_NOTICE_TYPES = frozenset({"RateLimitEvent"})

_DELTA_KINDS = {"text": pb.DELTA_KIND_TEXT, "tool_input": pb.DELTA_KIND_TOOL_INPUT, "thinking": pb.DELTA_KIND_THINKING}


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


class OutputRouter:
    """Reads one session's engine and records each output under its turn; parks its tool requests."""

    def __init__(self, context: TurnContext, ledger: TurnLedger, transcripts: TranscriptStore) -> None:
        self._ctx = context
        self._ledger = ledger
        self._transcripts = transcripts
        # The last background task reported between turns, named by the engine turn it prompts.
        self._last_task_event = ""
        self._log = log.bind(session_id=context.session_id)

    def attach(self, engine: EngineSession, sandbox: Sandbox) -> None:
        """Start reading a freshly connected engine's output; `sandbox` is where it runs."""
        self._ledger.attach(engine, sandbox)
        self._ledger.reader = self._ctx.tasks.create_task(self._read(engine))

    async def ask(self, request: ToolRequest) -> ToolDecision:
        """The engine asks to use a tool: park its turn on an `InteractionRequested`."""
        async with self._ledger.lock:
            turn = self._ledger.current
            if turn is None or turn.ended:
                turn = await self._open_engine_turn("the engine asked to use a tool on its own")
            if turn.interrupting:
                return INTERRUPTED
            interaction_id = await self._ctx.interactions.open(turn.turn_id, request)
        return await self._ctx.interactions.wait(interaction_id)

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
        ctx, ledger = self._ctx, self._ledger
        if output.delta is not None:
            await self._send_delta(engine, output.delta)
            return
        if output.unavailable is not None:
            await self._report_unavailable(engine, output.unavailable)
            return
        async with ledger.lock:
            if ledger.engine is not engine:
                self._log.info("late_output_dropped", type_name=output.type_name)  # the engine was closed on purpose
                return
            turn = ledger.current
            if (turn is None or turn.ended) and not is_session_level(output):
                turn = await self._open_engine_turn(self._engine_turn_reason())
            elif turn is not None and turn.ended:
                turn = None
            if turn is None:
                self._note_task_event(output)
            turn_id = turn.turn_id if turn is not None else ""
            new_id = engine.engine_session_id if engine.engine_session_id != ledger.engine_session_id else ""
            text, elided = fitted_json(output.payload, ctx.limits.engine_message_cap)
            if elided:
                self._log.warning("engine_message_elided", type_name=output.type_name, elided_bytes=elided)
            body = pb.EngineMessage(type_name=output.type_name, payload_json=text)
            # The turn this output ends (its ResultMessage), if any.
            ending = turn if turn is not None and output.ends_turn else None
            # What the turn changed in its READ_WRITE memory, sent before the output that ends it.
            remembered = await self._memory_changes() if ending is not None else None

            def tx(c: sqlite3.Connection) -> None:
                if remembered is not None:
                    ctx.outbox.append_tx(c, ctx.session_id, turn_id, remembered)
                ctx.outbox.append_tx(c, ctx.session_id, turn_id, body)
                if new_id:
                    ctx.state.set_engine_session_id_tx(c, ctx.session_id, new_id)
                if ending is not None:
                    ledger.end_turn_tx(c, turn_id)
                    if ending.interrupting:
                        interrupted = pb.TurnInterrupted(reason=INTERRUPTED_BY_ENGINE)
                        ctx.outbox.append_tx(c, ctx.session_id, turn_id, interrupted)

            await ctx.db.write(tx)
            ledger.engine_session_id = new_id or ledger.engine_session_id
            if ending is None:
                return
            ending.ended = True
            ctx.interactions.resolve_turn(turn_id, TURN_ENDED)
        await self._snapshot(engine, turn_id)
        async with ledger.lock:
            ledger.finish(ending)
        self._log.info("turn_finished", turn_id=turn_id, interrupted=ending.interrupting, by_engine=ending.by_engine)

    async def _memory_changes(self) -> pb.MemoryChanges | None:
        """The READ_WRITE memory directories' changes (the caller holds the lock); None: none, or
        they could not be read (logged: they are sent at a later turn's end)."""
        ledger = self._ledger
        if ledger.memory is None or ledger.sandbox is None:
            return None
        try:
            return await bounded(memory.changes(ledger.sandbox, ledger.memory), self._ctx.limits.engine_call)
        except Exception as exc:
            self._log.warning("memory_changes_unread", error=describe(exc))
            return None

    async def _report_unavailable(self, engine: EngineSession, unavailable: McpUnavailable) -> None:
        """One of the agent's MCP servers did not start with the engine: a report of the session's,
        in no turn (the session goes on without the server's tools)."""
        ctx = self._ctx
        async with self._ledger.lock:
            if self._ledger.engine is not engine:
                return
            report = pb.McpServerUnavailable(server=unavailable.server, reason=unavailable.reason)
            await ctx.outbox.append(ctx.session_id, "", report)

    async def _send_delta(self, engine: EngineSession, delta: EngineDelta) -> None:
        """A partial message goes to live watchers only: no outbox row, no turn opened for it."""
        ctx, ledger = self._ctx, self._ledger
        if ctx.deltas is None or ledger.engine is not engine:
            return
        turn = ledger.current
        kind = _DELTA_KINDS.get(delta.kind)
        if kind is None:
            return
        ctx.deltas.publish(
            pb.Delta(
                session_id=ctx.session_id,
                turn_id=turn.turn_id if turn is not None and not turn.ended else "",
                message_id=delta.message_id,
                index=delta.index,
                kind=kind,
                text=delta.text,
                after_output_seq=await ctx.outbox.appended(ctx.session_id),
            )
        )

    async def _engine_ended(self, engine: EngineSession, lost: str, aborted: str) -> None:
        ledger = self._ledger
        async with ledger.lock:
            if ledger.engine is not engine:
                return  # closed or replaced on purpose
            ledger.detach()
            ledger.lost_reason = lost
            self._log.warning("engine_lost", reason=lost)
            turn = ledger.current
            if turn is not None and not turn.ended:
                await ledger.settle(turn, pb.TurnAborted(reason=aborted))
        await ledger.retire(engine)

    async def _open_engine_turn(self, reason: str) -> Turn:
        """Open a turn the engine started on its own (caller holds the lock)."""
        self._last_task_event = ""
        return await self._ledger.open_engine_turn(reason)

    async def _snapshot(self, engine: EngineSession, turn_id: str) -> None:
        ctx = self._ctx
        try:
            content = await bounded(engine.transcript(), ctx.limits.engine_call)
        except Exception as exc:
            self._log.warning("transcript_unavailable", turn_id=turn_id, error=describe(exc))
            return
        if not content:
            return
        await self._transcripts.save(ctx.session_id, content)
        if len(content) > ctx.limits.transcript_cap:
            self._log.warning(
                "transcript_snapshot_not_sent", turn_id=turn_id, size=len(content), cap=ctx.limits.transcript_cap
            )
            return
        engine_session_id = engine.engine_session_id or self._ledger.engine_session_id
        snapshot = pb.TranscriptSnapshot(engine_session_id=engine_session_id, content=content)
        await ctx.outbox.append(ctx.session_id, turn_id, snapshot)

    def _note_task_event(self, output: EngineOutput) -> None:
        nested = output.payload.get("data")
        data = nested if isinstance(nested, dict) else {}
        task_id = output.payload.get("task_id") or data.get("task_id")
        status = output.payload.get("status") or data.get("status")
        if task_id and status:
            self._last_task_event = f"background task {task_id} is {status}"

    def _engine_turn_reason(self) -> str:
        if self._last_task_event:
            return f"the engine started a turn on its own after {self._last_task_event}"
        return "the engine started a turn on its own"
