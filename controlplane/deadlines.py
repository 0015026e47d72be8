"""Deadlines of transitional states: nothing waits forever.

A periodic sweep settles what outlived its deadline:
- sessions on an agent whose lease lapsed lose their runtime (the next
  message places them again): their running turn fails with a reason, and
  its tool calls and the runtime's background tasks are settled with it (a
  lease some replica's live stream holds has not lapsed: `controlplane.leases`);
  the agent is told to let go of that turn (an InterruptTurn carrying the
  reason waits in its queue), so an agent that comes back after a partition
  does not keep the session's engine parked on a turn nobody can answer;
- a running turn whose input its agent has not accepted (its DeliverInput
  unacknowledged) within `delivery_deadline` fails the same way;
- a running turn dispatched longer ago than its session's `turn_timeout` (the
  agent definition's limit) is interrupted the same way, with that reason;
- an interrupt the agent never reported is settled as interrupted;
- a runtime start that never finished fails the session;
- a released session's sandbox whose destruction failed is destroyed again
  once its backoff has passed, until abandoned (`controlplane.destructions`);
- acknowledged commands older than `command_retention` are deleted, a bounded
  batch per pass;
- sessions archived or deleted longer than `session_retention` ago, their
  sandbox gone, are forgotten with everything of theirs, a bounded batch per
  pass (`controlplane.retention`);
- agents being drained have their idle sessions moved off, and past the
  drain's deadline their running turns interrupted (`controlplane.drains`);
- a session idle for `idle_stop_after` (no turn, no queued message, no open
  background task, no event since) has its runtime stopped (StopRuntime):
  the agent closes the engine and stops the sandbox, keeping its files, and
  the next message starts both again. The RUNTIME_STOP_REQUESTED event is
  itself activity, so a stop the agent skipped is asked again only after
  another idle period.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import asyncpg
import structlog

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane import database, retention, store
from controlplane.agents import Agents
from controlplane.drains import Drains
from controlplane.journal import EventKind, Journal, NewEvent
from controlplane.session import SessionState
from controlplane.turns import TurnOutcome, Turns

log = structlog.get_logger(__name__)

# At most this many destructions retried, and done commands pruned, per pass.
SWEEP_BATCH = 500


class DeadlineSweeper:
    def __init__(
        self,
        pool: asyncpg.Pool,
        journal: Journal,
        turns: Turns,
        agents: Agents,
        startup_deadline: timedelta,
        destroy_retry: timedelta = timedelta(seconds=30),
        idle_stop_after: timedelta = timedelta(0),
        delivery_deadline: timedelta = timedelta(seconds=240),
        command_retention: timedelta = timedelta(days=1),
        session_retention: timedelta = timedelta(0),
        sweep_batch: int = SWEEP_BATCH,
    ) -> None:
        self._pool = pool
        self._sweep_batch = sweep_batch
        self._journal = journal
        self._turns = turns
        self._agents = agents
        self._startup_deadline = startup_deadline
        self._destroy_retry = destroy_retry
        self._idle_stop_after = idle_stop_after
        self._delivery_deadline = delivery_deadline
        self._command_retention = command_retention
        self._session_retention = session_retention
        self._drains = Drains(pool, journal, turns, agents)

    async def run(self, interval: float) -> None:
        """Sweep every `interval` seconds until cancelled."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sweep()
            except database.FAULTS as error:  # the next sweep tries again; anything else is a bug
                log.warning("deadline_sweep_failed", error=str(error))

    async def sweep(self) -> int:
        """One pass; returns how many sessions it settled something for."""
        lost = await store.sessions.on_lapsed_leases(self._pool)
        interrupts = await store.sessions.interrupts_overdue(self._pool)
        startups = await store.sessions.startups_overdue(self._pool, self._startup_deadline)
        for row in lost:
            await self._runtime_lost(row["session_id"], row["agent_id"])
        for session_id in interrupts:
            await self._interrupt_overdue(session_id)
        for session_id in startups:
            await self._startup_overdue(session_id)
        undelivered = await store.turns.undelivered_since(self._pool, self._delivery_deadline)
        for row in undelivered:
            await self._delivery_overdue(row["session_id"], row["turn_id"])
        over_time = await store.sessions.turns_over_time(self._pool)
        for row in over_time:
            await self._turn_over_time(row["session_id"], row["turn_id"], row["turn_timeout"])
        retried = await self._retry_destroys()
        stopped = await self._stop_idle()
        drained = await self._drains.sweep()
        pruned = await store.agent_commands.prune_done(self._pool, self._command_retention, self._sweep_batch)
        if pruned:
            log.info("commands_pruned", count=pruned)
        await retention.forget_released(self._pool, self._session_retention)
        return (
            len(lost)
            + len(interrupts)
            + len(startups)
            + len(undelivered)
            + len(over_time)
            + retried
            + stopped
            + drained
        )

    async def _stop_idle(self) -> int:
        """Ask the agents of sessions idle for `idle_stop_after` to stop their runtimes."""
        if self._idle_stop_after <= timedelta(0):
            return 0
        rows = await store.sessions.idle_since(self._pool, self._idle_stop_after)
        reason = f"idle for {self._idle_stop_after.total_seconds():g} s"
        stopped = 0
        for row in rows:
            if await stop_idle_runtime(self._journal, self._agents, row["session_id"], self._idle_stop_after, reason):
                stopped += 1
        return stopped

    async def _retry_destroys(self) -> int:
        """Released sessions still naming a sandbox whose destruction is due again get another one
        (`destroy_retry` after the last command for the session, or its backoff, whichever is later)."""
        rows = await store.sessions.destroys_due(self._pool, self._destroy_retry, self._sweep_batch)
        for row in rows:
            async with self._journal.transaction() as tx:
                await self._agents.enqueue(
                    tx,
                    row["agent_id"],
                    row["session_id"],
                    runner_pb2.Command(
                        destroy_runtime=runner_pb2.DestroyRuntime(reason="retrying an unconfirmed destruction")
                    ),
                )
            log.info("destroy_retried", session_id=row["session_id"], agent_id=row["agent_id"])
        return len(rows)

    async def _runtime_lost(self, session_id: str, agent_id: str) -> None:
        reason = f"the data-plane agent {agent_id} stopped answering (its lease lapsed)"
        async with self._journal.transaction() as tx:
            row = await store.sessions.lock_existing(tx.conn, session_id)
            # Read again under the session's lock: a stream may have come back, or renewed, since the sweep's read.
            if (
                not row["runtime_available"]
                or row["agent_id"] != agent_id
                or not await store.agents.lease_lapsed(tx.conn, agent_id)
            ):
                return
            await tx.append(session_id, [NewEvent(EventKind.RUNTIME_LOST, {"reason": reason})])
            await store.sessions.update(tx.conn, session_id, runtime_available=False)
            await self._turns.runtime_gone(tx, session_id, reason, tell_agent=True)
        log.info("runtime_lost", session_id=session_id, agent_id=agent_id)

    async def _delivery_overdue(self, session_id: str, turn_id: str) -> None:
        seconds = self._delivery_deadline.total_seconds()
        reason = f"the data-plane agent did not accept the message within {seconds:g} s"
        async with self._journal.transaction() as tx:
            settled = await self._turns.settle_here(tx, session_id, turn_id, TurnOutcome.FAILED, reason)
        if settled:
            log.warning("delivery_settled_by_deadline", session_id=session_id, turn_id=turn_id)

    async def _turn_over_time(self, session_id: str, turn_id: str, limit: timedelta) -> None:
        reason = f"the turn ran longer than its agent's turn_timeout of {limit.total_seconds():g} s"
        async with self._journal.transaction() as tx:
            settled = await self._turns.settle_here(tx, session_id, turn_id, TurnOutcome.INTERRUPTED, reason)
        if settled:
            log.info("turn_interrupted_by_timeout", session_id=session_id, turn_id=turn_id)

    async def _interrupt_overdue(self, session_id: str) -> None:
        async with self._journal.transaction() as tx:
            row = await store.sessions.lock_existing(tx.conn, session_id)
            if row["state"] != SessionState.INTERRUPTING.value or not row["current_turn_id"]:
                return
            await self._turns.settle(
                tx,
                session_id,
                row["current_turn_id"],
                TurnOutcome.INTERRUPTED,
                "the agent did not confirm the interrupt before its deadline",
            )
        log.warning("interrupt_settled_by_deadline", session_id=session_id)

    async def _startup_overdue(self, session_id: str) -> None:
        reason = f"the runtime did not start within {int(self._startup_deadline.total_seconds())} s"
        async with self._journal.transaction() as tx:
            row = await store.sessions.lock_existing(tx.conn, session_id)
            if row["state"] != SessionState.CREATING.value:
                return
            await tx.append(session_id, [NewEvent(EventKind.RUNTIME_FAILED, {"reason": reason})])
            await store.sessions.update(tx.conn, session_id, state=SessionState.FAILED, failure_reason=reason)
            if row["agent_id"]:  # a start that finishes late must not leave its sandbox behind
                await self._agents.enqueue(
                    tx,
                    row["agent_id"],
                    session_id,
                    runner_pb2.Command(destroy_runtime=runner_pb2.DestroyRuntime(reason=reason)),
                )
        log.warning("startup_settled_by_deadline", session_id=session_id)


async def stop_idle_runtime(
    journal: Journal, agents: Agents, session_id: str, idle_for: timedelta, reason: str
) -> bool:
    """Ask the session's agent to stop its runtime if it is idle and has journaled nothing for
    `idle_for` (RUNTIME_STOP_REQUESTED; files kept, the next message starts it again); whether it did."""
    async with journal.transaction() as tx:
        # Still idle, and nothing journaled since: the session is locked now.
        idle = await store.sessions.lock_if_idle_since(tx.conn, idle_for, session_id)
        if idle is None:
            return False
        await tx.append(session_id, [NewEvent(EventKind.RUNTIME_STOP_REQUESTED, {"reason": reason})])
        await agents.enqueue(
            tx, idle["agent_id"], session_id, runner_pb2.Command(stop_runtime=runner_pb2.StopRuntime(reason=reason))
        )
    log.info("idle_runtime_stop_requested", session_id=session_id, agent_id=idle["agent_id"])
    return True
