"""Deadlines of transitional states: nothing waits forever.

A periodic sweep settles what outlived its deadline:
- sessions on an agent whose lease lapsed lose their runtime (the next
  message places them again), and their running turn fails with a reason;
- an interrupt the agent never reported is settled as interrupted;
- a runtime start that never finished fails the session;
- a sandbox whose destruction the agent could not confirm is destroyed again.
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


class DeadlineSweeper:
    def __init__(
        self, pool: asyncpg.Pool, journal: Journal, turns: Turns, agents: Agents, startup_deadline: timedelta,
        destroy_retry: timedelta = timedelta(seconds=30),
    ) -> None:
        self._pool = pool
        self._journal = journal
        self._turns = turns
        self._agents = agents
        self._startup_deadline = startup_deadline
        self._destroy_retry = destroy_retry

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
        return len(lost) + len(interrupts) + len(startups) + retried

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
                await self._agents.enqueue(tx, row["agent_id"], row["session_id"], runner_pb2.Command(
                    destroy_runtime=runner_pb2.DestroyRuntime(reason="retrying an unconfirmed destruction")))
            log.info("destroy_retried", session_id=row["session_id"], agent_id=row["agent_id"])
        return len(rows)

    async def _runtime_lost(self, session_id: str, agent_id: str) -> None:
        reason = f"the data-plane agent {agent_id} stopped answering (its lease lapsed)"
        async with self._journal.transaction() as tx:
            row = await tx.lock_session(session_id)
            if not row["runtime_available"]:
                return
            await tx.append(session_id, [NewEvent(EventKind.RUNTIME_LOST, {"reason": reason})])
            await tx.update_session(session_id, runtime_available=False)
            if row["current_turn_id"]:
                await self._turns.settle(tx, session_id, row["current_turn_id"], TurnOutcome.FAILED, reason)
        log.info("runtime_lost", session_id=session_id, agent_id=agent_id)

    async def _interrupt_overdue(self, session_id: str) -> None:
        async with self._journal.transaction() as tx:
            row = await tx.lock_session(session_id)
            if row["state"] != SessionState.INTERRUPTING.value or not row["current_turn_id"]:
                return
            await self._turns.settle(tx, session_id, row["current_turn_id"], TurnOutcome.INTERRUPTED,
                                     "the agent did not confirm the interrupt before its deadline")
        log.warning("interrupt_settled_by_deadline", session_id=session_id)

    async def _startup_overdue(self, session_id: str) -> None:
        reason = f"the runtime did not start within {int(self._startup_deadline.total_seconds())} s"
        async with self._journal.transaction() as tx:
            row = await tx.lock_session(session_id)
            if row["state"] != SessionState.CREATING.value:
                return
            await tx.append(session_id, [NewEvent(EventKind.RUNTIME_FAILED, {"reason": reason})])
            await tx.update_session(session_id, state=SessionState.FAILED, failure_reason=reason)
            if row["agent_id"]:  # a start that finishes late must not leave its sandbox behind
                await self._agents.enqueue(tx, row["agent_id"], session_id, runner_pb2.Command(
                    destroy_runtime=runner_pb2.DestroyRuntime(reason=reason)))
        log.warning("startup_settled_by_deadline", session_id=session_id)
