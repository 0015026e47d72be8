"""Retention: a released session is forgotten `session_retention` after it was archived or deleted.

Forgetting deletes everything the control plane keeps of it — its journal (events), turns,
interactions, background tasks, open tool calls, tool grants, idempotency records (session
requests), engine transcript, command leases and acknowledged agent commands — and then the session
row itself, in one transaction per batch of `BATCH` sessions so no lock is held long. Only
sessions whose sandbox is confirmed destroyed, or kept on purpose by its agent, and with no command
still unacknowledged are taken: a session whose destruction is pending or was abandoned to an
operator is kept until that is settled. The agent removes a session's workspace when it destroys
its sandbox, so nothing is left of it on the data plane either. Audit records are not the
session's: they stay (`controlplane.identity.audit`).

Every replica sweeps; `FOR UPDATE SKIP LOCKED` gives concurrent sweeps different sessions.
Acknowledged agent commands of live sessions are pruned separately (`--command-retention`,
`controlplane.deadlines`).
"""

from __future__ import annotations

from datetime import timedelta

import asyncpg
import structlog

from controlplane import store

log = structlog.get_logger(__name__)

# Sessions forgotten per transaction.
BATCH = 100

# What refers to a session, child tables first; the session row goes last.
_OWNERS = (
    store.events,
    store.turns,
    store.interactions,
    store.background_tasks,
    store.tool_calls,
    store.tool_grants,
    store.subagent_calls,
    store.session_requests,
    store.engine_transcripts,
    store.memory_stores,
    store.command_leases,
    store.agent_commands,
)


async def forget_released(pool: asyncpg.Pool, retention: timedelta, batch: int = BATCH) -> int:
    """Forget up to `batch` sessions released longer than `retention` ago; how many. Zero retention:
    sessions are kept forever."""
    if retention <= timedelta(0):
        return 0
    try:
        async with pool.acquire() as conn, conn.transaction():
            session_ids = await store.sessions.lock_forgettable(conn, retention, batch)
            if not session_ids:
                return 0
            rows = {
                owner.__name__.rpartition(".")[2]: await owner.forget_sessions(conn, session_ids) for owner in _OWNERS
            }
            forgotten = await store.sessions.forget(conn, session_ids)
    except asyncpg.ForeignKeyViolationError as error:
        # A table referring to sessions that _OWNERS does not name (tests/controlplane/test_retention.py
        # checks there is none): nothing was deleted; the sweep goes on with its other work.
        log.error("retention_blocked", error=str(error))
        return 0
    log.info("sessions_forgotten", count=forgotten, rows={name: n for name, n in rows.items() if n})
    return forgotten
