"""Sub-agent calls: a session's agent calls another agent of the project, which runs as a child session.

The parent's engine calls `mcp__subagents__<agent>` with `{"prompt": ...}`; the call parks its turn
on an interaction of kind SUBAGENT, journaled with a `subagent_calls` row in the same transaction
(`controlplane.output_applier`). Every replica's loop leases the open calls (a replica that dies
mid-step leaves its call to the next one) and moves each on by the steps below, each idempotent
(the child's request id and its prompt's client_message_id derive from the call):

- creating: the child session is created from the agent (its version as the parent's agent pins
  it, else the newest) in the parent's project and environment, in its own sandbox, labelled with
  its parent; the parent journals SUBAGENT_STARTED naming it. A call deeper than `max_depth` is
  refused (SUBAGENT_DEPTH_EXCEEDED) and so is one the child cannot be created for.
- starting: once the child is ready, the prompt is sent as its first message.
- running: once the child's turn ended, its final text (TurnCompleted.result) answers the parent's
  interaction as a tool result, through `Conversation.respond`, the path of a custom tool's result;
  a failed or interrupted turn, a child gone, or `deadline` passed answer it as an error.
The parent's journal ends the call with SUBAGENT_FINISHED. A parent whose call is closed (its turn
interrupted or ended, the parent archived) lets go of the child: it is interrupted, or archived
with its parent. A child's usage is its own session's.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg
import structlog

from controlplane import database, session_config, store
from controlplane.agents import Agents
from controlplane.conversation import Answer, Conversation, SendMessage
from controlplane.deadlines import stop_idle_runtime
from controlplane.errors import InteractionNotPending, KernelError
from controlplane.journal import EventKind, Journal, NewEvent
from controlplane.kernel import CreateSession, SessionKernel
from controlplane.session import SessionRecord, SessionState
from controlplane.validation import echo

log = structlog.get_logger(__name__)

# The label a sub-agent's session carries: its parent's id (`--label-selector astrabox.dev/parent-session=ID`).
PARENT_LABEL = "astrabox.dev/parent-session"
DEPTH_EXCEEDED = "SUBAGENT_DEPTH_EXCEEDED"
NOT_STARTED = "SUBAGENT_NOT_STARTED"
FAILED = "SUBAGENT_FAILED"
DEADLINE_EXCEEDED = "SUBAGENT_DEADLINE_EXCEEDED"
PARENT_CALL_CLOSED = "PARENT_CALL_CLOSED"
# What of the child's text goes back to the parent's model, and into SUBAGENT_FINISHED.
MAX_RESULT_BYTES = 32 * 1024
_PREVIEW_CHARS = 1024
_GONE = (SessionState.FAILED, SessionState.ARCHIVED, SessionState.DELETED)
_TAKES_MESSAGES = (SessionState.READY, SessionState.RUNNING, SessionState.WAITING_FOR_INPUT, SessionState.INTERRUPTING)


@dataclass(frozen=True, slots=True)
class SubagentSettings:
    # How often a pass runs.
    interval: timedelta = timedelta(seconds=1)
    # How long a replica holds a call it works on: another takes it over after this.
    lease: timedelta = timedelta(seconds=30)
    # How deep sub-agents may nest: a session at this depth cannot call one.
    max_depth: int = 3
    # How long a call may take, from the parent's call to the child's answer.
    deadline: timedelta = timedelta(minutes=30)
    # Calls leased per pass.
    batch: int = 100


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the parent's model reads as the call's result."""

    text: str
    is_error: bool = False
    reason: str = ""


def child_request_id(interaction_id: str) -> str:
    return f"subagent-{interaction_id}"


class Subagents:
    def __init__(
        self,
        pool: asyncpg.Pool,
        journal: Journal,
        agents: Agents,
        kernel: SessionKernel,
        conversation: Conversation,
        settings: SubagentSettings = SubagentSettings(),
    ) -> None:
        self._pool = pool
        self._journal = journal
        self._agents = agents
        self._kernel = kernel
        self._conversation = conversation
        self._settings = settings

    async def run(self) -> None:
        """A pass every `interval` until cancelled."""
        while True:
            await asyncio.sleep(self._settings.interval.total_seconds())
            try:
                await self.tick()
            except database.FAULTS as error:  # the next pass tries again; anything else is a bug
                log.warning("subagent_pass_failed", error=str(error))

    async def tick(self) -> int:
        """Lease the open calls whose lease lapsed and move each on; how many."""
        now = datetime.now(UTC)
        rows = await store.subagent_calls.lease_open(self._pool, now, now + self._settings.lease, self._settings.batch)
        for row in rows:
            try:
                await self._work(row)
            except database.FAULTS as error:  # the lease lapses and this or another replica tries again
                log.warning("subagent_call_interrupted", interaction_id=row["interaction_id"], error=str(error))
        return len(rows)

    async def _work(self, row: asyncpg.Record) -> None:
        parent_id, interaction_id = str(row["parent_session_id"]), row["interaction_id"]
        parent = await self._journal.session(parent_id)
        pending = await store.interactions.state_of(self._pool, parent_id, interaction_id) == "pending"
        if parent is None or not pending:  # the parent let go of the call (interrupted, ended, archived)
            await self._let_go(row, parent)
            return
        if datetime.now(UTC) >= row["created_at"] + self._settings.deadline:
            minutes = self._settings.deadline.total_seconds() / 60
            await self._stop_child(row, archive=False)
            outcome = Outcome(f"The sub-agent did not finish within {minutes:g} minutes.", True, DEADLINE_EXCEEDED)
            await self._settle(row, outcome)
            return
        if row["state"] == store.subagent_calls.CREATING:
            child_id = await self._create(row, parent)
            if not child_id:
                return
            row = await self._reread(row)
        if row["state"] == store.subagent_calls.STARTING:
            if not await self._start(row):
                return
            row = await self._reread(row)
        await self._wait(row)

    async def _reread(self, row: asyncpg.Record) -> asyncpg.Record:
        async with self._pool.acquire() as conn, conn.transaction():
            fresh = await store.subagent_calls.lock(conn, str(row["parent_session_id"]), row["interaction_id"])
        assert fresh is not None
        return fresh

    async def _create(self, row: asyncpg.Record, parent: SessionRecord) -> str:
        """Create the child session; its id, or empty when the call was settled instead."""
        parent_id, agent = str(row["parent_session_id"]), row["agent"]
        if row["depth"] > self._settings.max_depth:
            text = (
                f"The sub-agent {echo(agent)} was not started: sub-agents nest at most {self._settings.max_depth}"
                " deep and this session is already that deep."
            )
            await self._settle(row, Outcome(text, True, DEPTH_EXCEEDED))
            return ""
        if not row["prompt"].strip():
            await self._settle(row, Outcome("The sub-agent needs a non-empty `prompt`.", True, NOT_STARTED))
            return ""
        spec = session_config.decode(parent.config, parent.engine, parent.permission_mode, parent.model)
        pin = next((s.version for s in spec.subagents if s.agent == agent), None)
        if pin is None:
            text = f"{echo(agent)} is not one of this agent's sub-agents."
            await self._settle(row, Outcome(text, True, NOT_STARTED))
            return ""
        environment = parent.environment
        try:
            child = await self._kernel.create_session(
                CreateSession(
                    request_id=child_request_id(row["interaction_id"]),
                    project_id=row["project_id"],
                    agent=agent,
                    agent_version=pin,
                    environment=environment.environment_id if environment else "",
                    environment_version=environment.version if environment else 0,
                    labels={PARENT_LABEL: parent_id},
                )
            )
        except KernelError as error:
            text = f"The sub-agent {echo(agent)} could not be started: {error.message}"
            await self._settle(row, Outcome(text, True, NOT_STARTED))
            return ""
        version = child.agent.version if child.agent else 0
        async with self._journal.transaction() as tx:
            await store.sessions.lock(tx.conn, parent_id)  # sessions first, as the output applier
            locked = await store.subagent_calls.lock(tx.conn, parent_id, row["interaction_id"])
            if locked is None or locked["state"] != store.subagent_calls.CREATING:
                return str(locked["child_session_id"]) if locked is not None else ""
            await store.subagent_calls.created(tx.conn, parent_id, row["interaction_id"], child.session_id, version)
            started = {
                "interaction_id": row["interaction_id"],
                "child_session_id": child.session_id,
                "agent": agent,
                "agent_version": version,
            }
            await tx.append(parent_id, [NewEvent(EventKind.SUBAGENT_STARTED, started, turn_id=row["parent_turn_id"])])
        log.info("subagent_started", session_id=parent_id, child_session_id=child.session_id, agent=agent)
        return child.session_id

    async def _start(self, row: asyncpg.Record) -> bool:
        """Send the child its prompt once it is ready; False while it is not (or it was settled)."""
        child_id = str(row["child_session_id"])
        child = await self._journal.session(child_id)
        if child is None or child.state in _GONE:
            why = child.failure_reason if child is not None and child.failure_reason else "it is gone"
            await self._settle(row, Outcome(f"The sub-agent's session did not start: {why}", True, FAILED))
            return False
        if child.state not in _TAKES_MESSAGES:  # still CREATING: looked at again on a later pass
            await self._look_again(row)
            return False
        try:
            accepted = await self._conversation.send_message(SendMessage(child_id, "subagent-prompt", row["prompt"]))
        except KernelError as error:
            await self._settle(row, Outcome(f"The sub-agent refused the prompt: {error.message}", True, FAILED))
            return False
        async with self._pool.acquire() as conn:
            await store.subagent_calls.started(
                conn, str(row["parent_session_id"]), row["interaction_id"], accepted.turn_id
            )
        return True

    async def _wait(self, row: asyncpg.Record) -> None:
        child_id = str(row["child_session_id"])
        ended = await store.events.turn_end(self._pool, child_id, row["child_turn_id"])
        if ended is None:
            child = await self._journal.session(child_id)
            if child is None or child.state in _GONE:
                why = child.failure_reason if child is not None and child.failure_reason else "it is gone"
                await self._settle(row, Outcome(f"The sub-agent's session ended: {why}", True, FAILED))
            else:
                await self._look_again(row)
            return
        payload = ended["payload"]
        if ended["kind"] == EventKind.TURN_COMPLETED.value and not payload.get("is_error"):
            await self._settle(row, Outcome(str(payload.get("result") or "")))
        else:
            result = str(payload.get("result") or payload.get("reason") or "")
            what = {
                "turn_completed": "ended in an error",
                "turn_failed": "failed",
                "turn_interrupted": "was interrupted",
            }
            text = f"The sub-agent's turn {what.get(ended['kind'], 'ended')}: {result}".rstrip(": ")
            await self._settle(row, Outcome(text, True, FAILED))
        # It answered: its sandbox's slot goes back now rather than after the idle stop (its files
        # stay, and a message to it starts it again).
        await stop_idle_runtime(self._journal, self._agents, child_id, timedelta(0), "its sub-agent call was answered")

    async def _look_again(self, row: asyncpg.Record) -> None:
        at = datetime.now(UTC) + self._settings.interval
        await store.subagent_calls.look_again(self._pool, str(row["parent_session_id"]), row["interaction_id"], at)

    async def _let_go(self, row: asyncpg.Record, parent: SessionRecord | None) -> None:
        archive = parent is None or parent.state in (SessionState.ARCHIVED, SessionState.DELETED)
        await self._stop_child(row, archive=archive)
        await self._finish(
            row, Outcome("The parent's call was closed before the sub-agent answered.", True, PARENT_CALL_CLOSED)
        )

    async def _stop_child(self, row: asyncpg.Record, *, archive: bool) -> None:
        if row["child_session_id"] is None:
            return
        child_id, request_id = str(row["child_session_id"]), f"subagent-stop-{row['interaction_id']}"
        try:
            if archive:
                await self._kernel.archive_session(child_id, request_id)
            else:
                await self._conversation.interrupt(child_id, request_id)
        except KernelError as error:  # gone already: nothing to stop
            log.info("subagent_stop_refused", child_session_id=child_id, reason=error.reason)

    async def _settle(self, row: asyncpg.Record, outcome: Outcome) -> None:
        """Answer the parent's call with `outcome`, then end it; a retry answers nothing twice."""
        parent_id, interaction_id = str(row["parent_session_id"]), row["interaction_id"]
        text = outcome.text.encode("utf-8")[:MAX_RESULT_BYTES].decode("utf-8", "ignore")
        answer = Answer("tool_result", message=text, is_error=outcome.is_error)
        try:
            await self._conversation.respond(
                parent_id, interaction_id, f"subagent-result-{interaction_id}", answer, subagent=True
            )
        except InteractionNotPending:
            outcome = Outcome(outcome.text, True, PARENT_CALL_CLOSED)
        except KernelError as error:
            log.warning("subagent_result_refused", session_id=parent_id, reason=error.reason, error=error.message)
            outcome = Outcome(outcome.text, True, error.reason)
        await self._finish(row, outcome)

    async def _finish(self, row: asyncpg.Record, outcome: Outcome) -> None:
        parent_id, interaction_id = str(row["parent_session_id"]), row["interaction_id"]
        async with self._journal.transaction() as tx:
            parent = await store.sessions.lock(tx.conn, parent_id)  # sessions first, as the output applier
            locked = await store.subagent_calls.lock(tx.conn, parent_id, interaction_id)
            if locked is None or locked["state"] == store.subagent_calls.DONE:
                return
            await store.subagent_calls.finish(tx.conn, parent_id, interaction_id, outcome.is_error, outcome.reason)
            if parent is not None and parent["state"] != SessionState.DELETED.value:
                finished = {
                    "interaction_id": interaction_id,
                    "child_session_id": str(locked["child_session_id"] or ""),
                    "is_error": outcome.is_error,
                    "reason": outcome.reason,
                    "result_preview": outcome.text[:_PREVIEW_CHARS],
                }
                event = NewEvent(EventKind.SUBAGENT_FINISHED, finished, turn_id=locked["parent_turn_id"])
                await tx.append(parent_id, [event])
        log.info("subagent_finished", session_id=parent_id, interaction_id=interaction_id, reason=outcome.reason)
