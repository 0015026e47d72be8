"""The outbox's worker: sends due webhook deliveries, at least once, one replica at a time each.

Each pass leases a batch of due deliveries (`SELECT … FOR UPDATE SKIP LOCKED`, then a lease
deadline on the row, in one transaction that also logs each attempt's start), sends them
concurrently and records each outcome. A replica that dies mid-attempt leaves its lease to lapse;
the delivery is then due again on any replica (its attempt in the log has no outcome). An outcome
is recorded only by the attempt that still holds the delivery (its attempt number unchanged), so a
replica that stalled past its lease cannot overwrite a newer attempt's result.

A failed attempt is retried after `first * 2^(n-1)` seconds (at most `longest`), of which a random
half is jitter, until `max_attempts` attempts or `max_age` since the delivery (or its last manual
redelivery) began; then it is failed, and stays in the log for a redelivery.

Finished deliveries (delivered or failed) are deleted with their attempts `retention` after they
finished, a bounded batch at most every `prune_interval`; a zero retention keeps them forever.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg
import structlog

from controlplane import database, store
from controlplane.errors import KernelError
from controlplane.metrics import ControlPlaneMetrics
from controlplane.webhooks.sender import Outcome, Sender
from controlplane.webhooks.subscriptions import Webhooks

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class DeliverySettings:
    poll_interval: timedelta = timedelta(seconds=1)
    lease: timedelta = timedelta(seconds=60)
    batch: int = 32
    retry_first: timedelta = timedelta(seconds=5)
    retry_longest: timedelta = timedelta(hours=1)
    max_attempts: int = 10
    max_age: timedelta = timedelta(days=1)
    retention: timedelta = timedelta(days=30)
    prune_interval: timedelta = timedelta(minutes=1)
    prune_batch: int = 500


def retry_delay(round_attempt: int, settings: DeliverySettings, draw: Callable[[], float] = random.random) -> timedelta:
    """How long after failed attempt number `round_attempt` (of this round) the next one is due."""
    full: timedelta = min(settings.retry_first * 2 ** min(round_attempt - 1, 30), settings.retry_longest)
    jitter: timedelta = full / 2 * draw()
    return full / 2 + jitter


class Dispatcher:
    def __init__(
        self,
        pool: asyncpg.Pool,
        webhooks: Webhooks,
        sender: Sender,
        settings: DeliverySettings,
        metrics: ControlPlaneMetrics | None = None,
    ) -> None:
        self._pool = pool
        self._metrics = metrics or ControlPlaneMetrics()
        self._webhooks = webhooks
        self._sender = sender
        self._settings = settings

    async def run(self) -> None:
        """Send deliveries until cancelled; a database outage pauses it, never ends it."""
        pruned_at = asyncio.get_running_loop().time()
        while True:
            try:
                if asyncio.get_running_loop().time() - pruned_at >= self._settings.prune_interval.total_seconds():
                    pruned_at = asyncio.get_running_loop().time()
                    await self.prune_once()
                sent = await self.pass_once()
            except database.FAULTS as error:
                log.warning("webhook_pass_failed", error=type(error).__name__, detail=str(error)[:300])
                sent = 0
            except Exception:  # a fault of one pass must not stop the deliveries for good
                log.exception("webhook_pass_crashed")
                sent = 0
            if sent < self._settings.batch:
                await asyncio.sleep(self._settings.poll_interval.total_seconds())

    async def prune_once(self) -> int:
        """Delete one batch of deliveries finished longer than `retention` ago; how many."""
        if self._settings.retention <= timedelta(0):
            return 0
        pruned = await store.webhook_deliveries.prune_finished(
            self._pool, self._settings.retention, self._settings.prune_batch
        )
        if pruned:
            log.info("webhook_deliveries_pruned", count=pruned)
        return pruned

    async def pass_once(self) -> int:
        """Lease and send one batch of due deliveries; how many were attempted."""
        async with self._pool.acquire() as conn, conn.transaction():
            claimed = await store.webhook_deliveries.claim(conn, self._settings.batch, self._settings.lease)
            for row in claimed:
                await store.webhook_attempts.begin(conn, row["delivery_id"], row["attempts"])
        if not claimed:
            return 0
        hooks = {
            row["webhook_id"]: row
            for row in await store.webhooks.get_many(self._pool, list({r["webhook_id"] for r in claimed}))
        }
        async with asyncio.TaskGroup() as attempts:
            for row in claimed:
                attempts.create_task(self._attempt(row, hooks.get(row["webhook_id"])))
        return len(claimed)

    async def _attempt(self, delivery: asyncpg.Record, hook: asyncpg.Record | None) -> None:
        delivery_id = str(delivery["delivery_id"])
        try:
            if hook is None:
                outcome = Outcome(None, "the webhook was deleted")
            else:
                secrets = self._webhooks.signing_secrets(hook, datetime.now(UTC))
                outcome = await self._sender.send(hook["url"], delivery_id, delivery["payload_json"], secrets)
        except KernelError as error:  # its secret does not open
            outcome = Outcome(None, error.message)
        self._metrics.webhook_attempts.labels(outcome.kind).inc()
        try:
            await self._record(delivery, outcome)
        except database.FAULTS as error:  # the lease lapses and the delivery is attempted again
            log.warning("webhook_outcome_unrecorded", delivery_id=delivery_id, error=type(error).__name__)
            return
        log.info(
            "webhook_attempt",
            delivery_id=delivery_id,
            webhook_id=str(delivery["webhook_id"]),
            attempt=delivery["attempts"],
            status_code=outcome.status_code,
            error=outcome.error or None,
        )

    async def _record(self, delivery: asyncpg.Record, outcome: Outcome) -> None:
        now = datetime.now(UTC)
        next_at: datetime | None = None
        if outcome.delivered:
            state = "delivered"
        else:
            next_at = now + retry_delay(delivery["round_attempts"], self._settings)
            exhausted = delivery["round_attempts"] >= self._settings.max_attempts
            too_old = next_at > delivery["round_started_at"] + self._settings.max_age
            state = "failed" if exhausted or too_old else "pending"
        async with self._pool.acquire() as conn, conn.transaction():
            await store.webhook_attempts.end(
                conn, delivery["delivery_id"], delivery["attempts"], outcome.status_code, outcome.error, outcome.excerpt
            )
            await store.webhook_deliveries.finish(
                conn,
                delivery["delivery_id"],
                delivery["attempts"],
                state,
                next_at,
                outcome.status_code,
                outcome.error,
            )
