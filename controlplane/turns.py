"""Turns: the queue of a session's messages, their dispatch to the engine, and their end.

A message accepted while a turn runs waits in `turns` (state `queued`). When
the running turn settles — completed, failed or interrupted — the next queued
message is delivered in the same transaction. A session whose runtime is gone
is placed again first: a new StartRuntime carries the engine's conversation id
and transcript, so the new sandbox resumes the same conversation. Placing
again, and restarting a runtime stopped while idle, take a slot of the agent's
capacity (`controlplane.agents`); with none free the message's turn fails, its
reason saying whether the agents are full or none is connected.

A turn's permission mode is the message's own, for that turn only, or empty:
the session's mode when the turn runs (SetPermissionMode may change it while
the message waits). Only the session's mode is ever sent to start an engine.

A settle leaves nothing of the turn open: its pending interaction is closed and
its tool calls still without a result get an error result (TOOL_CALL_SETTLED),
before the event that ends the turn. When the runtime itself is gone (lost,
released, its engine ended) its background tasks end with it
(BACKGROUND_TASK_LOST) and so does every tool call still open. A turn the
control plane ends on its own (`settle_here`) is settled the same way, and its
agent is told to let go of it. A settled turn's DeliverInput that no agent has
acknowledged is withdrawn (acknowledged here, with the reason), so an agent
that reconnects or restarts later is not sent it again and never runs an
ended turn.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane import session_config, store, tool_grants
from controlplane.agents import Agents
from controlplane.errors import CapacityExhausted, DedicatedHostsUnavailable, NoAgentAvailable
from controlplane.journal import EventKind, JournalTransaction, NewEvent
from controlplane.memory import sessions as memory
from controlplane.metrics import ControlPlaneMetrics
from controlplane.session import SessionRecord, SessionState
from serverkit import tracing

log = structlog.get_logger(__name__)


class TurnOutcome(enum.Enum):
    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True, slots=True)
class QueuedTurn:
    turn_id: str
    text: str
    # The message's own mode, for this turn only; empty: the session's.
    permission_mode: str


class Turns:
    def __init__(self, agents: Agents, metrics: ControlPlaneMetrics | None = None) -> None:
        self._agents = agents
        self._metrics = metrics or ControlPlaneMetrics()

    async def queue(
        self, tx: JournalTransaction, session: SessionRecord, turn: QueuedTurn, client_message_id: str, fingerprint: str
    ) -> int:
        """Journal a user message as accepted, queue it, and deliver it if the engine is free."""
        (seq,) = await tx.append(
            session.session_id,
            [
                NewEvent(
                    EventKind.USER_MESSAGE_ACCEPTED,
                    {
                        "client_message_id": client_message_id,
                        "text": turn.text,
                        "permission_mode": turn.permission_mode,
                    },
                    turn_id=turn.turn_id,
                )
            ],
        )
        await store.turns.insert_queued(
            tx.conn,
            session.session_id,
            turn.turn_id,
            client_message_id,
            fingerprint,
            seq,
            turn.text,
            turn.permission_mode,
            tracing.traceparent(),
        )
        await self.dispatch_next(tx, session.session_id)
        return seq

    async def dispatch_next(self, tx: JournalTransaction, session_id: str) -> None:
        """Deliver the oldest queued message if the session is idle."""
        while True:
            row = await store.sessions.lock_existing(tx.conn, session_id)
            session = SessionRecord.from_row(row)
            if session.state is not SessionState.READY or session.current_turn_id:
                return
            queued = await store.turns.oldest_queued(tx.conn, session_id)
            if queued is None:
                return
            turn = QueuedTurn(queued["turn_id"], queued["text"], queued["permission_mode"])
            agent_id = session.agent_id
            try:
                if not session.runtime_available:
                    agent_id = await self._place_again(tx, session)
                elif session.runtime_stopped:
                    await self._agents.claim_restart(tx.conn, agent_id)
            except (NoAgentAvailable, CapacityExhausted, DedicatedHostsUnavailable) as nowhere:
                await self._fail_queued(tx, session_id, turn.turn_id, nowhere.message)
                continue
            await store.turns.start_running(tx.conn, session_id, turn.turn_id)
            tx.committed.append(self._metrics.turns_started.inc)
            await store.sessions.update(
                tx.conn, session_id, state=SessionState.RUNNING, current_turn_id=turn.turn_id, failure_reason=""
            )
            # The turn's start, in the trace of the call that queued its message (also when the settling
            # of the turn before it dispatches it, later): its DeliverInput carries it on.
            attributes = {"astrabox.session_id": session_id, "astrabox.turn_id": turn.turn_id}
            with tracing.joining("turn dispatch", [queued["traceparent"]], attributes):
                await self._agents.enqueue(
                    tx,
                    agent_id,
                    session_id,
                    runner_pb2.Command(
                        deliver_input=runner_pb2.DeliverInput(
                            turn_id=turn.turn_id, text=turn.text, permission_mode=turn.permission_mode
                        )
                    ),
                )
            return

    async def settle(
        self,
        tx: JournalTransaction,
        session_id: str,
        turn_id: str,
        outcome: TurnOutcome,
        reason: str = "",
        output_seq: int | None = None,
        usage: Mapping[str, Any] | None = None,
    ) -> bool:
        """End the session's current turn (if it is `turn_id`) and deliver the next message.

        Closes a pending interaction, gives the turn's open tool calls an error result unless the
        engine completed it, and journals the outcome event (an interrupted turn's with the `usage`
        of the engine's result that ended it, `controlplane.usage`). Returns False when `turn_id`
        is not the running turn (it was settled already)."""
        row = await store.sessions.lock(tx.conn, session_id)
        if row is None or row["current_turn_id"] != turn_id:
            return False
        await self.close_interaction(tx, session_id, reason or f"the turn {outcome.value}")
        if outcome is not TurnOutcome.COMPLETED:  # a completed turn's engine answered its own calls
            await self._settle_tool_calls(tx, session_id, reason or f"the turn {outcome.value}", turn_id)
        event = {
            TurnOutcome.FAILED: NewEvent(EventKind.TURN_FAILED, {"reason": reason}, turn_id, output_seq),
            TurnOutcome.INTERRUPTED: NewEvent(
                EventKind.TURN_INTERRUPTED,
                {"reason": reason, **({"usage": usage} if usage else {})},
                turn_id,
                output_seq,
            ),
        }.get(outcome)
        if event is not None:
            await tx.append(session_id, [event])
        seconds = await store.turns.set_state(tx.conn, session_id, turn_id, outcome.value)
        tx.committed.append(lambda: self._metrics.turn_ended(outcome.value, seconds))
        await self._withdraw_input(tx, session_id, turn_id, reason or f"the turn {outcome.value}")
        state = SessionState(row["state"])
        await store.sessions.update(
            tx.conn,
            session_id,
            state=SessionState.READY if state.busy else state,
            current_turn_id=None,
            interrupt_deadline=None,
            failure_reason=reason if outcome is TurnOutcome.FAILED else "",
        )
        await self.dispatch_next(tx, session_id)
        return True

    @staticmethod
    async def _withdraw_input(tx: JournalTransaction, session_id: str, turn_id: str, reason: str) -> None:
        """The ended turn's DeliverInput, if no agent has acknowledged it, is withdrawn (acknowledged
        here, with the reason): an agent that reconnects, or restarts, after the settle gets it no more,
        so it never runs a turn that has ended (a chaos round saw one run in an archived session)."""
        for row in await store.agent_commands.unacked_for_session(tx.conn, session_id):
            command = runner_pb2.Command.FromString(row["body"])
            if command.HasField("deliver_input") and command.deliver_input.turn_id == turn_id:
                await store.agent_commands.acknowledge(
                    tx.conn, row["agent_id"], row["command_seq"], f"withdrawn: {reason}"
                )
                log.info("input_withdrawn", session_id=session_id, turn_id=turn_id, agent_id=row["agent_id"])

    async def settle_here(
        self, tx: JournalTransaction, session_id: str, turn_id: str, outcome: TurnOutcome, reason: str
    ) -> bool:
        """End a turn the control plane ends on its own (a lapsed lease, a passed deadline) and tell
        its agent to let go of it: an InterruptTurn carrying the reason follows the turn's input in
        the agent's queue, so the agent denies the turn's questions, stops the engine's turn and drops
        the input if it still waits (the Runner proto's rule). Output the turn still produces is
        journaled as late. False when `turn_id` is not the running turn."""
        row = await store.sessions.lock(tx.conn, session_id)
        if row is None or row["current_turn_id"] != turn_id:
            return False
        if row["agent_id"]:
            let_go = runner_pb2.InterruptTurn(turn_id=turn_id, settled_reason=reason)
            await self._agents.enqueue(tx, row["agent_id"], session_id, runner_pb2.Command(interrupt_turn=let_go))
        return await self.settle(tx, session_id, turn_id, outcome, reason)

    async def runtime_gone(
        self, tx: JournalTransaction, session_id: str, reason: str, *, tell_agent: bool = False
    ) -> None:
        """The session's runtime is gone (lost, released, failed to start again): fail its running
        turn with `reason` — with `tell_agent`, through `settle_here`, for a runtime the control
        plane gives up on while its agent may still run it (a lapsed lease) — then `engine_gone`."""
        row = await store.sessions.lock_existing(tx.conn, session_id)
        if row["current_turn_id"]:
            settle = self.settle_here if tell_agent else self.settle
            await settle(tx, session_id, row["current_turn_id"], TurnOutcome.FAILED, reason)
        await self.engine_gone(tx, session_id, reason)

    async def engine_gone(self, tx: JournalTransaction, session_id: str, reason: str) -> None:
        """The engine that ran the session's background tasks and tool calls is gone: close the
        tasks as lost and settle every tool call still open (those of turns settled earlier, or
        reported late), both with `reason`."""
        await self._settle_tool_calls(tx, session_id, reason)
        lost = await store.background_tasks.lose_open(tx.conn, session_id)
        await tx.append(
            session_id,
            [
                NewEvent(
                    EventKind.BACKGROUND_TASK_LOST,
                    {"task_id": task["task_id"], "description": task["description"], "reason": reason},
                )
                for task in lost
            ],
        )

    async def _settle_tool_calls(
        self, tx: JournalTransaction, session_id: str, reason: str, turn_id: str | None = None
    ) -> None:
        """Give the open tool calls (of `turn_id`, or all) the error result the engine will never send."""
        calls = await store.tool_calls.take(tx.conn, session_id, turn_id)
        await tx.append(
            session_id,
            [tool_call_settled(call["turn_id"], call["tool_use_id"], call["tool_name"], reason) for call in calls],
        )

    async def close_interaction(self, tx: JournalTransaction, session_id: str, reason: str) -> None:
        """Close the pending interaction, if any, without an answer."""
        interaction_id = await store.interactions.close_pending(tx.conn, session_id)
        if interaction_id is not None:
            await tx.append(
                session_id,
                [NewEvent(EventKind.INTERACTION_CLOSED, {"interaction_id": interaction_id, "reason": reason})],
            )

    async def fail_all_queued(self, tx: JournalTransaction, session_id: str, reason: str) -> None:
        for turn_id in await store.turns.queued_ids(tx.conn, session_id):
            await self._fail_queued(tx, session_id, turn_id, reason)

    async def _fail_queued(self, tx: JournalTransaction, session_id: str, turn_id: str, reason: str) -> None:
        await store.turns.set_state(tx.conn, session_id, turn_id, "failed")
        await tx.append(session_id, [NewEvent(EventKind.TURN_FAILED, {"reason": reason}, turn_id=turn_id)])

    async def _place_again(self, tx: JournalTransaction, session: SessionRecord) -> str:
        """Start the session's runtime on a live agent with a free slot, resuming its conversation;
        NoAgentAvailable or CapacityExhausted when there is none."""
        config = session_config.decode(session.config, session.engine, session.permission_mode, session.model)
        spec = session.environment.spec if session.environment else None
        binds = session_config.binds_credentials(config, spec)
        isolation = session_config.isolation(spec)
        agent_id = await self._agents.place(tx.conn, session.engine, session.project_id, binds, isolation)
        transcript = await store.engine_transcripts.find(tx.conn, session.session_id)
        committed = await store.sessions.committed_output_seq(tx.conn, session.session_id)
        # Without a transcript (no turn of the conversation ever ended) another agent has nothing
        # to resume from: "No conversation found" would fail the start. The agent that still holds
        # the sandbox resumes from its own record anyway.
        resume = transcript.engine_session_id if transcript else ""
        mounts = await memory.mounts(tx.conn, session.session_id)
        command_id = await self._agents.enqueue(
            tx,
            agent_id,
            session.session_id,
            runner_pb2.Command(
                start_runtime=runner_pb2.StartRuntime(
                    engine=session.engine,
                    permission_mode=session.permission_mode,
                    model=session.model,
                    resume_engine_session_id=resume,
                    transcript=transcript.content if transcript else b"",
                    committed_output_seq=committed,
                    tool_grants=await tool_grants.in_force(tx.conn, session.session_id),
                    config=memory.with_prompt(config, mounts),
                    environment=session_config.runtime_environment(session.environment),
                    # A sandbox made anew (another agent, or its old one lost) gets the repository
                    # again; the agent leaves a workspace it still holds as it is.
                    git_source=session_config.git_source(session.git_source),
                    project_id=str(session.project_id or ""),
                    agent_id=session.agent.agent_id if session.agent else "",
                    agent_version=session.agent.version if session.agent else 0,
                    memory=mounts,
                )
            ),
        )
        await tx.append(
            session.session_id,
            [NewEvent(EventKind.STARTUP_REQUESTED, {"agent_id": agent_id, "command_id": command_id})],
        )
        await store.sessions.update(tx.conn, session.session_id, agent_id=agent_id)
        log.info("session_placed_again", session_id=session.session_id, agent_id=agent_id, resume=resume)
        return agent_id


def tool_call_settled(turn_id: str, tool_use_id: str, tool_name: str, reason: str) -> NewEvent:
    """The error result a tool call gets when its engine will never send one (TOOL_CALL_SETTLED)."""
    return NewEvent(
        EventKind.TOOL_CALL_SETTLED,
        {"tool_use_id": tool_use_id, "tool_name": tool_name, "reason": reason, "is_error": True},
        turn_id=turn_id,
    )
