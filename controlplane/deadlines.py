"""Deadlines of transitional states: nothing waits forever.

A periodic sweep settles what outlived its deadline:
- sessions on an agent whose lease lapsed lose their runtime (the next
  message places them again), and their running turn fails with a reason;
- an interrupt the agent never reported is settled as interrupted;
- a runtime start that never finished fails the session;
- a sandbox whose destruction the agent could not confirm is destroyed again;
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
from controlplane.agents import Agents
from controlplane.journal import EventKind, Journal, NewEvent
from controlplane.session import SessionState
from controlplane.turns import TurnOutcome, Turns

log = structlog.get_logger(__name__)

# Sessions whose runtime runs and has nothing to do (the query's alias: s).
_IDLE = (
    " WHERE s.state = 'ready' AND s.runtime_available AND NOT s.runtime_stopped AND s.current_turn_id IS NULL"
    " AND s.deleted_at IS NULL AND s.agent_id IS NOT NULL"
    " AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.session_id = s.session_id AND t.state = 'queued')"
    " AND NOT EXISTS (SELECT 1 FROM background_tasks b WHERE b.session_id = s.session_id AND b.state = 'open')"
)
# Such sessions whose last event is older than $1.
_IDLE_SINCE = (
    "SELECT s.session_id::text AS session_id, s.agent_id FROM sessions s"
    " JOIN events e ON e.session_id = s.session_id AND e.seq = s.last_seq" + _IDLE + " AND e.at < now() - $1::interval"
)


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
    ) -> None:
        self._pool = pool
        self._journal = journal
        self._turns = turns
        self._agents = agents
        self._startup_deadline = startup_deadline
        self._destroy_retry = destroy_retry
        self._idle_stop_after = idle_stop_after

    async def run(self, interval: float) -> None:
        """Sweep every `interval` seconds until cancelled."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sweep()
            except (OSError, asyncpg.PostgresError) as error:
                log.warning("deadline_sweep_failed", error=str(error))

    async def sweep(self) -> int:
        """One pass; returns how many sessions it settled something for."""
        lost = await self._pool.fetch(
            "SELECT s.session_id::text AS session_id, s.agent_id FROM sessions s JOIN agents a USING (agent_id)"
            " WHERE s.runtime_available AND s.deleted_at IS NULL AND a.lease_expires_at < now()"
        )
        interrupts = await self._pool.fetch(
            "SELECT session_id::text AS session_id FROM sessions WHERE state = 'interrupting' AND interrupt_deadline < now()"
        )
        startups = await self._pool.fetch(
            "SELECT session_id::text AS session_id FROM sessions WHERE state = 'creating' AND created_at < now() - $1::interval",
            self._startup_deadline,
        )
        for row in lost:
            await self._runtime_lost(row["session_id"], row["agent_id"])
        for row in interrupts:
            await self._interrupt_overdue(row["session_id"])
        for row in startups:
            await self._startup_overdue(row["session_id"])
        retried = await self._retry_destroys()
        stopped = await self._stop_idle()
        return len(lost) + len(interrupts) + len(startups) + retried + stopped

    async def _stop_idle(self) -> int:
        """Ask the agents of sessions idle for `idle_stop_after` to stop their runtimes."""
        if self._idle_stop_after <= timedelta(0):
            return 0
        rows = await self._pool.fetch(_IDLE_SINCE, self._idle_stop_after)
        reason = f"idle for {self._idle_stop_after.total_seconds():g} s"
        stopped = 0
        for row in rows:
            session_id = row["session_id"]
            async with self._journal.transaction() as tx:
                # Still idle, and nothing journaled since the query: the session is locked now.
                idle = await tx.conn.fetchrow(
                    _IDLE_SINCE + " AND s.session_id = $2 FOR UPDATE OF s", self._idle_stop_after, session_id
                )
                if idle is None:
                    continue
                await tx.append(session_id, [NewEvent(EventKind.RUNTIME_STOP_REQUESTED, {"reason": reason})])
                await self._agents.enqueue(
                    tx,
                    idle["agent_id"],
                    session_id,
                    runner_pb2.Command(stop_runtime=runner_pb2.StopRuntime(reason=reason)),
                )
            stopped += 1
            log.info("idle_runtime_stop_requested", session_id=session_id, agent_id=idle["agent_id"])
        return stopped

    async def _retry_destroys(self) -> int:
        """Released sessions still naming a sandbox whose destroy was refused get another one."""
        rows = await self._pool.fetch(
            "SELECT s.session_id::text AS session_id, s.agent_id FROM sessions s"
            " WHERE s.state IN ('deleted', 'archived') AND s.sandbox_id IS NOT NULL"
            "  AND NOT EXISTS (SELECT 1 FROM agent_commands c WHERE c.session_id = s.session_id"
            "   AND (c.acked_at IS NULL OR c.acked_at > now() - $1::interval))",
            self._destroy_retry,
        )
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
            row = await tx.lock_existing_session(session_id)
            if not row["runtime_available"]:
                return
            await tx.append(session_id, [NewEvent(EventKind.RUNTIME_LOST, {"reason": reason})])
            await tx.update_session(session_id, runtime_available=False)
            if row["current_turn_id"]:
                await self._turns.settle(tx, session_id, row["current_turn_id"], TurnOutcome.FAILED, reason)
        log.info("runtime_lost", session_id=session_id, agent_id=agent_id)

    async def _interrupt_overdue(self, session_id: str) -> None:
        async with self._journal.transaction() as tx:
            row = await tx.lock_existing_session(session_id)
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
            row = await tx.lock_existing_session(session_id)
            if row["state"] != SessionState.CREATING.value:
                return
            await tx.append(session_id, [NewEvent(EventKind.RUNTIME_FAILED, {"reason": reason})])
            await tx.update_session(session_id, state=SessionState.FAILED, failure_reason=reason)
            if row["agent_id"]:  # a start that finishes late must not leave its sandbox behind
                await self._agents.enqueue(
                    tx,
                    row["agent_id"],
                    session_id,
                    runner_pb2.Command(destroy_runtime=runner_pb2.DestroyRuntime(reason=reason)),
                )
        log.warning("startup_settled_by_deadline", session_id=session_id)
