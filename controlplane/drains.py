"""Cordons and drains: an operator taking an agent out of placement, and emptying it.

A cordoned agent takes no new session (`controlplane.agents` skips it when placing, and rechecks under
the agent's row lock); what runs there goes on. A drained agent is cordoned too, and the sweep
(`controlplane.deadlines`, every replica) moves its sessions off it as each falls idle: the session's
runtime is given up here (RUNTIME_LOST, saying why) and destroyed on the agent, so its next message
places it on another agent, which resumes its conversation from the transcript. A turn in progress
finishes first, and so do open background tasks, until the drain's deadline; past it, running turns
are interrupted (their agent told to let go) and tasks are lost, and the next sweep moves the session.

The state is two columns of `agents` (migration 0028), so it holds across replicas and restarts,
and a reconnecting agent stays cordoned (its Hello renews the lease, not the hold). Each step locks
the session and checks again, so replicas sweeping at once, or a message arriving as a drain moves
its session, do each thing once: a message that comes first makes the session busy (it waits for
the next sweep); one that comes after finds no runtime and is placed elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg
import structlog

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane import store
from controlplane.agents import Agents
from controlplane.errors import AgentNotFound
from controlplane.journal import EventKind, Journal, NewEvent
from controlplane.turns import TurnOutcome, Turns

log = structlog.get_logger(__name__)

# At most this many sessions moved, and turns interrupted, per draining agent and sweep.
DRAIN_BATCH = 100
# A drain's deadline when the operator gives none, and the longest one may be.
DEFAULT_DRAIN_TIMEOUT = timedelta(minutes=30)
MAX_DRAIN_TIMEOUT = timedelta(days=7)


@dataclass(frozen=True, slots=True)
class Hold:
    """An agent's cordon and drain as they stand."""

    agent_id: str
    cordoned_at: datetime | None
    drain_deadline: datetime | None


class Drains:
    def __init__(self, pool: asyncpg.Pool, journal: Journal, turns: Turns, agents: Agents) -> None:
        self._pool = pool
        self._journal = journal
        self._turns = turns
        self._agents = agents

    async def cordon(self, agent_id: str, drain_for: timedelta | None = None) -> Hold:
        """Cordon the agent; with `drain_for`, drain it as well, by then. Idempotent: a cordon keeps
        its first time, a running drain its deadline. AgentNotFound when it never connected."""
        row = await store.agents.cordon(self._pool, agent_id, drain_for)
        if row is None:
            raise AgentNotFound(agent_id)
        log.info("agent_cordoned", agent_id=agent_id, draining=row["drain_deadline"] is not None)
        return Hold(agent_id, row["cordoned_at"], row["drain_deadline"])

    async def uncordon(self, agent_id: str) -> Hold:
        """Return the agent to placement and end its drain (sessions moved already stay moved)."""
        if not await store.agents.uncordon(self._pool, agent_id):
            raise AgentNotFound(agent_id)
        log.info("agent_uncordoned", agent_id=agent_id)
        return Hold(agent_id, None, None)

    async def sweep(self) -> int:
        """One pass over the agents being drained; how many sessions it moved or interrupted."""
        done = 0
        for agent in await store.agents.draining(self._pool):
            agent_id, overdue = agent["agent_id"], agent["overdue"]
            for session_id in await store.sessions.movable_on(self._pool, agent_id, overdue, DRAIN_BATCH):
                done += await self._move(agent_id, overdue, session_id)
            if overdue:
                for row in await store.sessions.turns_on(self._pool, agent_id, DRAIN_BATCH):
                    done += await self._interrupt(agent_id, row["session_id"], row["turn_id"])
        return done

    async def _move(self, agent_id: str, overdue: bool, session_id: str) -> int:
        reason = f"its data-plane agent {agent_id} is being drained; its next message starts it on another agent"
        async with self._journal.transaction() as tx:
            if not await store.sessions.lock_if_movable(tx.conn, agent_id, overdue, session_id):
                return 0
            await tx.append(session_id, [NewEvent(EventKind.RUNTIME_LOST, {"reason": reason})])
            await store.sessions.update(tx.conn, session_id, runtime_available=False)
            await self._turns.engine_gone(tx, session_id, reason)
            await self._agents.enqueue(
                tx,
                agent_id,
                session_id,
                runner_pb2.Command(destroy_runtime=runner_pb2.DestroyRuntime(reason=f"agent {agent_id} is drained")),
            )
        log.info("session_drained", session_id=session_id, agent_id=agent_id)
        return 1

    async def _interrupt(self, agent_id: str, session_id: str, turn_id: str) -> int:
        reason = f"its data-plane agent {agent_id} is being drained and the drain's deadline passed"
        async with self._journal.transaction() as tx:
            row = await store.sessions.lock_existing(tx.conn, session_id)
            if row["agent_id"] != agent_id:
                return 0
            settled = await self._turns.settle_here(tx, session_id, turn_id, TurnOutcome.INTERRUPTED, reason)
        if settled:
            log.warning("turn_interrupted_by_drain", session_id=session_id, agent_id=agent_id, turn_id=turn_id)
        return int(settled)
