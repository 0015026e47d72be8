"""Commands on a session's conversation: messages, interrupts, answers, modes, tasks.

Each is accepted into the journal with the projection change and the agent
command that carries it out, in one transaction; a retry with the same id
has no second effect. A message's or answer's size is held to the project's
message_bytes quota (`controlplane.quotas`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane import quotas, requests, session_config, store, tool_grants, usage, validation
from controlplane.agents import Agents
from controlplane.errors import (
    InteractionNotFound,
    InteractionNotPending,
    InvalidArgument,
    RequestIdReused,
    SessionNotFound,
    SessionNotReady,
    TaskNotFound,
)
from controlplane.journal import EventKind, Journal, JournalTransaction, NewEvent
from controlplane.session import BackgroundTaskState, InteractionKind, SessionRecord, SessionState
from controlplane.tool_grants import GrantScope
from controlplane.turns import QueuedTurn, Turns

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class SendMessage:
    session_id: str
    client_message_id: str
    text: str
    permission_mode: str = ""


@dataclass(frozen=True, slots=True)
class AcceptedMessage:
    turn_id: str
    seq: int


@dataclass(frozen=True, slots=True)
class Answer:
    """A human's answer: exactly one of allow, deny, answers, tool_result."""

    decision: str  # "allow" | "deny" | "answers" | "tool_result"
    updated_input_json: str = ""
    # deny: what the engine is told; tool_result: the custom tool's result text.
    message: str = ""
    # tool_result: the custom tool failed.
    is_error: bool = False
    answers: Mapping[str, str] = field(default_factory=dict)
    # With "allow": also let later calls of the tool run without asking.
    grant: GrantScope | None = None

    @property
    def size(self) -> int:
        """Its UTF-8 bytes, as the project's message_bytes quota counts them."""
        texts = [self.updated_input_json, self.message, *self.answers.keys(), *self.answers.values()]
        return sum(_utf8(text) for text in texts)


def _utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


class Conversation:
    def __init__(self, journal: Journal, agents: Agents, turns: Turns, interrupt_deadline: timedelta) -> None:
        self._journal = journal
        self._agents = agents
        self._turns = turns
        self._interrupt_deadline = interrupt_deadline

    async def _locked(self, tx: JournalTransaction, session_id: str) -> SessionRecord:
        row = await store.sessions.lock(tx.conn, session_id)
        if row is None or row["state"] == SessionState.DELETED.value:
            raise SessionNotFound(session_id)
        return SessionRecord.from_row(row)

    async def send_message(self, request: SendMessage) -> AcceptedMessage:
        """Accept a message; it runs now, or after the turns queued before it."""
        session_id = validation.session_id(request.session_id)
        validation.client_id("client_message_id", request.client_message_id)
        validation.message_text(request.text)
        async with self._journal.transaction() as tx:
            session = await self._locked(tx, session_id)
            # The message's own mode, for its turn only; none: the session's when the turn runs.
            own_mode = ""
            if request.permission_mode:
                manifest = await self._agents.engine_manifest(session.engine, session.agent_id, tx.conn)
                own_mode = validation.permission_mode(manifest, request.permission_mode)
            print_ = requests.fingerprint(text=request.text, permission_mode=request.permission_mode)
            previous = await store.turns.by_client_message_id(tx.conn, session_id, request.client_message_id)
            if previous is not None:
                if previous["fingerprint"] != print_:
                    raise RequestIdReused(
                        f"client_message_id {validation.echo(request.client_message_id)} was already used"
                        " for a different message",
                        {"client_message_id": request.client_message_id, "turn_id": previous["turn_id"]},
                    )
                return AcceptedMessage(previous["turn_id"], previous["accepted_seq"])
            if session.state not in (
                SessionState.READY,
                SessionState.RUNNING,
                SessionState.WAITING_FOR_INPUT,
                SessionState.INTERRUPTING,
            ):
                detail = f": {session.failure_reason}" if session.failure_reason else ""
                raise SessionNotReady(
                    f"session {session_id} is {session.state.value} and cannot take messages{detail}",
                    {"session_id": session_id, "state": session.state.value},
                )
            spec = session_config.decode(session.config, session.engine, session.permission_mode, session.model)
            usage.check_budget(session_id, session.usage, spec.limits.max_cost_usd_per_session)
            assert session.project_id is not None
            await quotas.check_message(tx.conn, session.project_id, _utf8(request.text), "the message")
            turn = QueuedTurn(str(uuid.uuid4()), request.text, own_mode)
            seq = await self._turns.queue(tx, session, turn, request.client_message_id, print_)
        log.info("message_accepted", session_id=session_id, turn_id=turn.turn_id, seq=seq)
        return AcceptedMessage(turn.turn_id, seq)

    async def interrupt(self, session_id: str, request_id: str) -> None:
        """Stop the running turn; a no-op when the session is idle or already interrupting."""
        session_id = validation.session_id(session_id)
        async with self._journal.transaction() as tx:
            session = await self._locked(tx, session_id)
            if not await requests.first_time(tx, session_id, request_id, "interrupt"):
                return
            if session.state not in (SessionState.RUNNING, SessionState.WAITING_FOR_INPUT):
                return  # idle, or an interrupt is already under way
            await tx.append(
                session_id,
                [NewEvent(EventKind.INTERRUPT_REQUESTED, {"request_id": request_id}, turn_id=session.current_turn_id)],
            )
            await self._turns.close_interaction(tx, session_id, "the turn is being interrupted")
            deadline_ms = int(self._interrupt_deadline.total_seconds() * 1000)
            await store.sessions.update(tx.conn, session_id, state=SessionState.INTERRUPTING)
            # The agent's deadline, then time to report it.
            await store.sessions.set_interrupt_deadline(tx.conn, session_id, self._interrupt_deadline * 3)
            await self._agents.enqueue(
                tx,
                session.agent_id,
                session_id,
                runner_pb2.Command(
                    interrupt_turn=runner_pb2.InterruptTurn(turn_id=session.current_turn_id, deadline_ms=deadline_ms)
                ),
            )
        log.info("interrupt_requested", session_id=session_id)

    async def respond(
        self, session_id: str, interaction_id: str, request_id: str, answer: Answer, *, subagent: bool = False
    ) -> None:
        """Answer a pending interaction. A sub-agent call is answered only by the control plane
        (`subagent`: `controlplane.subagents`, with the child's result)."""
        session_id = validation.session_id(session_id)
        if not interaction_id:
            raise InvalidArgument("interaction_id", "interaction_id must not be empty")
        async with self._journal.transaction() as tx:
            session = await self._locked(tx, session_id)
            if not await requests.first_time(
                tx,
                session_id,
                request_id,
                "respond",
                interaction_id=interaction_id,
                decision=answer.decision,
                input=answer.updated_input_json,
                message=answer.message,
                answers=dict(answer.answers),
                is_error=answer.is_error,
                grant=None if answer.grant is None else [answer.grant.input_pattern, str(answer.grant.expires_at)],
            ):
                return
            assert session.project_id is not None
            await quotas.check_message(tx.conn, session.project_id, answer.size, "the answer")
            row = await store.interactions.lock(tx.conn, session_id, interaction_id)
            if row is None:
                raise InteractionNotFound(
                    f"session {session_id} has no interaction {validation.echo(interaction_id)}",
                    {"interaction_id": interaction_id},
                )
            if row["state"] != "pending":
                raise InteractionNotPending(
                    f"interaction {validation.echo(interaction_id)} is already {row['state']};"
                    " only one answer takes effect",
                    {"interaction_id": interaction_id, "state": row["state"]},
                )
            kind = InteractionKind(row["kind"])
            if (kind is InteractionKind.SUBAGENT) is not subagent:
                raise InvalidArgument(
                    "answer",
                    "this interaction is a sub-agent call: the control plane answers it with the child session's"
                    " result (interrupt the session to stop it)",
                )
            if answer.grant is not None:
                if kind is not InteractionKind.TOOL_APPROVAL:
                    raise InvalidArgument("allow.grant", "only a tool approval's answer can grant later calls")
                answer.grant.check(datetime.now(UTC))
            command = _decision(kind, row["input"], answer)
            command.interaction_id = interaction_id
            await store.interactions.answer(
                tx.conn, interaction_id, request_id, _answer_payload(interaction_id, request_id, answer)
            )
            await tx.append(
                session_id,
                [
                    NewEvent(
                        EventKind.INTERACTION_ANSWERED,
                        _answer_payload(interaction_id, request_id, answer),
                        turn_id=row["turn_id"],
                    )
                ],
            )
            if session.state is SessionState.WAITING_FOR_INPUT:
                await store.sessions.update(tx.conn, session_id, state=SessionState.RUNNING)
            await self._agents.enqueue(tx, session.agent_id, session_id, runner_pb2.Command(answer_interaction=command))
            if answer.grant is not None:
                await tool_grants.grant(tx, self._agents, session_id, session.agent_id, row, answer.grant)
        log.info("interaction_answered", session_id=session_id, interaction_id=interaction_id, decision=answer.decision)

    async def set_permission_mode(self, session_id: str, mode: str, request_id: str) -> None:
        session_id = validation.session_id(session_id)
        async with self._journal.transaction() as tx:
            session = await self._locked(tx, session_id)
            manifest = await self._agents.engine_manifest(session.engine, session.agent_id, tx.conn)
            validation.permission_mode(manifest, mode)
            if not await requests.first_time(tx, session_id, request_id, "permission_mode", mode=mode):
                return
            if mode == session.permission_mode:
                return
            await tx.append(
                session_id,
                [
                    NewEvent(
                        EventKind.PERMISSION_MODE_CHANGED,
                        {
                            "permission_mode": mode,
                            "previous_permission_mode": session.permission_mode,
                            "request_id": request_id,
                        },
                    )
                ],
            )
            await store.sessions.update(tx.conn, session_id, permission_mode=mode)
            if session.runtime_available and session.agent_id:
                await self._agents.enqueue(
                    tx,
                    session.agent_id,
                    session_id,
                    runner_pb2.Command(set_permission_mode=runner_pb2.SetPermissionMode(permission_mode=mode)),
                )

    async def revoke_tool_grant(self, session_id: str, grant_id: str, request_id: str) -> None:
        session_id = validation.session_id(session_id)
        async with self._journal.transaction() as tx:
            session = await self._locked(tx, session_id)
            if not await requests.first_time(tx, session_id, request_id, "revoke_tool_grant", grant_id=grant_id):
                return
            await tool_grants.revoke(tx, self._agents, session_id, session.agent_id, grant_id, request_id)

    async def stop_background_task(self, session_id: str, task_id: str, request_id: str) -> None:
        session_id = validation.session_id(session_id)
        if not task_id:
            raise InvalidArgument("task_id", "task_id must not be empty")
        async with self._journal.transaction() as tx:
            session = await self._locked(tx, session_id)
            if not await requests.first_time(tx, session_id, request_id, "stop_task", task_id=task_id):
                return
            state = await store.background_tasks.state_of(tx.conn, session_id, task_id)
            if state != BackgroundTaskState.OPEN.value:
                raise TaskNotFound(
                    f"session {session_id} has no open background task {validation.echo(task_id)}", {"task_id": task_id}
                )
            await tx.append(
                session_id, [NewEvent(EventKind.TASK_STOP_REQUESTED, {"task_id": task_id, "request_id": request_id})]
            )
            await self._agents.enqueue(
                tx, session.agent_id, session_id, runner_pb2.Command(stop_task=runner_pb2.StopTask(task_id=task_id))
            )


def _decision(kind: InteractionKind, tool_input: Mapping[str, Any], answer: Answer) -> runner_pb2.AnswerInteraction:
    if kind in (InteractionKind.CUSTOM_TOOL, InteractionKind.SUBAGENT):
        if answer.decision == "deny":
            return runner_pb2.AnswerInteraction(deny=runner_pb2.AnswerInteraction.Deny(message=answer.message))
        if answer.decision != "tool_result":
            raise InvalidArgument(
                "tool_result", "this interaction is a custom tool call: answer it with `tool_result` (or deny it)"
            )
        return runner_pb2.AnswerInteraction(
            tool_result=runner_pb2.AnswerInteraction.ToolResult(content=answer.message, is_error=answer.is_error)
        )
    if answer.decision == "tool_result":
        raise InvalidArgument("tool_result", "only a custom tool call is answered with `tool_result`")
    if kind is InteractionKind.QUESTION:
        if answer.decision == "deny":
            return runner_pb2.AnswerInteraction(deny=runner_pb2.AnswerInteraction.Deny(message=answer.message))
        if answer.decision != "answers" or not answer.answers:
            raise InvalidArgument("answers", "this interaction is a question: answer it with `answers` (or deny it)")
        updated = {**tool_input, "answers": dict(answer.answers)}
        return runner_pb2.AnswerInteraction(
            allow=runner_pb2.AnswerInteraction.Allow(updated_input_json=json.dumps(updated))
        )
    if answer.decision == "allow":
        if answer.updated_input_json:
            try:
                edited = json.loads(answer.updated_input_json)
            except ValueError:
                edited = None
            if not isinstance(edited, dict):
                raise InvalidArgument("allow.updated_input_json", "updated_input_json must be a JSON object")
        return runner_pb2.AnswerInteraction(
            allow=runner_pb2.AnswerInteraction.Allow(updated_input_json=answer.updated_input_json)
        )
    if answer.decision == "deny":
        return runner_pb2.AnswerInteraction(deny=runner_pb2.AnswerInteraction.Deny(message=answer.message))
    raise InvalidArgument("answer", "a tool approval is answered with `allow` or `deny`")


def _answer_payload(interaction_id: str, request_id: str, answer: Answer) -> dict[str, Any]:
    if answer.decision == "tool_result":
        return {
            "interaction_id": interaction_id,
            "request_id": request_id,
            "decision": answer.decision,
            "tool_result": answer.message,
            "is_error": answer.is_error,
        }
    return {
        "interaction_id": interaction_id,
        "request_id": request_id,
        "decision": answer.decision,
        "updated_input_json": answer.updated_input_json,
        "message": answer.message,
        "answers": dict(answer.answers),
    }
