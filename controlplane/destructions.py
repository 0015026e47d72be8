"""Destroying released sessions' sandboxes: what an agent's verdict does, and how often to retry.

An archived or deleted session's DestroyRuntime is acknowledged with a verdict:
- CONFIRMED: the sandbox is gone; the session names it no more;
- RETAINED: the agent keeps it on purpose (an agent set to keep released
  sessions' sandboxes for inspection); released all the same, and journaled
  (SANDBOX_RETAINED);
- REFUSED or UNCONFIRMED (acknowledged with an error): journaled
  (RUNTIME_DESTROY_FAILED) and shown on the session (`destroy_failure`); the
  sweep (`controlplane.deadlines`) tries again after an exponential backoff,
  up to `DestroyRetries.attempts` failures, then abandons it: logged at error,
  still shown, no longer retried — an operator removes the sandbox.
The verdict is applied in the transaction that records the acknowledgement
(`controlplane.verdicts`, the one place a verdict is recorded).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import structlog

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane import store
from controlplane.journal import EventKind, JournalTransaction, NewEvent
from controlplane.session import SessionState

log = structlog.get_logger(__name__)

_RELEASED = (SessionState.ARCHIVED.value, SessionState.DELETED.value)


@dataclass(frozen=True, slots=True)
class DestroyRetries:
    """How a failed destruction is retried: after `first`, doubling up to `longest`, until
    `attempts` have failed."""

    first: timedelta = timedelta(seconds=30)
    longest: timedelta = timedelta(minutes=30)
    attempts: int = 8

    def delay(self, failures: int) -> timedelta | None:
        """The wait before the next attempt after `failures` in a row; None: abandon."""
        if failures >= self.attempts:
            return None
        wait: timedelta = self.first * 2 ** max(failures - 1, 0)
        return min(wait, self.longest)


async def record_verdict(
    tx: JournalTransaction,
    agent_id: str,
    session_id: str,
    verdict: runner_pb2.DestroyVerdict,
    error: str,
    retries: DestroyRetries,
) -> None:
    """Apply an agent's answer to a DestroyRuntime of the session (an empty `error`: done)."""
    row = await store.sessions.lock(tx.conn, session_id)
    if row is None or row["state"] not in _RELEASED or row["sandbox_id"] is None:
        return  # not released (a start that failed late), or released already
    sandbox_id = row["sandbox_id"]
    if not error:
        await store.sessions.forget_sandbox(tx.conn, session_id)
        if verdict == runner_pb2.DESTROY_VERDICT_RETAINED:
            await tx.append(
                session_id, [NewEvent(EventKind.SANDBOX_RETAINED, {"sandbox_id": sandbox_id, "agent_id": agent_id})]
            )
            log.info("sandbox_retained", session_id=session_id, agent_id=agent_id, sandbox_id=sandbox_id)
        return
    failures = row["destroy_attempts"] + 1
    wait = retries.delay(failures)
    await store.sessions.destroy_failed(tx.conn, session_id, failures, error, wait)
    payload = {
        "reason": error,
        "attempts": failures,
        "retry_in_seconds": int(wait.total_seconds()) if wait is not None else 0,
        "abandoned": wait is None,
    }
    await tx.append(session_id, [NewEvent(EventKind.RUNTIME_DESTROY_FAILED, payload)])
    bound = log.bind(session_id=session_id, agent_id=agent_id, sandbox_id=sandbox_id, attempts=failures, reason=error)
    if wait is None:
        bound.error("sandbox_destroy_abandoned", fix="remove the sandbox on the agent's host by hand")
    else:
        bound.warning("sandbox_destroy_failed", retry_in_s=wait.total_seconds())
