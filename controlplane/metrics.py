"""The control plane's Prometheus metrics: every metric object, in one place (`--metrics-listen`).

One `ControlPlaneMetrics` per process object, with its own registry (served by
`serverkit.metrics_http`). Names follow Prometheus conventions: the `astrabox_` prefix, units in
the name, bounded labels only — a service and method (only methods the server has), a status code,
a session state, a turn outcome. Never a session, turn or agent id: those are unbounded.

Where they are recorded:
    RPCs                 `RpcMetrics`, the outermost server interceptor (a stream counts when it ends,
                         with its final code)
    sessions by state    scrape time, one GROUP BY over sessions, cached `SESSIONS_CACHE_S`: how many, how
                         long the most stalled one has gone unchanged (a stuck start or interrupt),
                         released sessions' sandboxes not destroyed yet (retried or abandoned: leaked);
                         with the engines' background tasks open
    the database         `astrabox_database_up`, the health monitor's last probe (`controlplane.health`)
    turns                `controlplane.turns` (dispatched; settled, once its transaction committed)
    journal commits      `controlplane.relay`: each committed batch of an agent's outputs, its size,
                         and each output's lag from its produce_time on the agent to the commit
    relay streams        `controlplane.relay`: agent streams opened, and those open now
    webhooks             `controlplane.webhooks.dispatcher`: each attempt's outcome; at scrape time
                         (cached with the sessions), the deliveries pending and the oldest one's age
    schedules            `controlplane.schedules.scheduler`: each run's outcome (started, failed)
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import asyncpg
import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from controlplane import store
from controlplane.session import SessionState
from serverkit.metrics_http import Cached, on_loop

SESSIONS_CACHE_S = 5.0
# Seconds: from a fast unary call to a long stream.
RPC_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)
TURN_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class ControlPlaneMetrics:
    """The metric objects of one control plane; `registry` is what its `/metrics` serves."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.rpc_requests = Counter(
            "astrabox_rpc_requests",
            "RPCs handled, by method and final status code",
            ["service", "method", "code"],
            registry=r,
        )
        self.rpc_duration = Histogram(
            "astrabox_rpc_duration_seconds",
            "How long RPCs took, to their final status (streams: their whole life)",
            ["service", "method"],
            buckets=RPC_BUCKETS,
            registry=r,
        )
        self.turns_started = Counter("astrabox_turns_started", "Turns dispatched to an agent", registry=r)
        self.turns_ended = Counter(
            "astrabox_turns_ended",
            "Turns settled, by outcome (completed, failed, interrupted)",
            ["outcome"],
            registry=r,
        )
        self.turn_duration = Histogram(
            "astrabox_turn_duration_seconds",
            "From a turn's dispatch to its settlement, by outcome",
            ["outcome"],
            buckets=TURN_BUCKETS,
            registry=r,
        )
        self.journal_commit = Histogram(
            "astrabox_journal_commit_seconds",
            "How long journaling one batch of an agent's outputs took (one transaction)",
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.journal_batch = Histogram(
            "astrabox_journal_batch_outputs",
            "Outputs journaled per transaction of an agent's batches",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.ack_lag = Histogram(
            "astrabox_relay_ack_lag_seconds",
            "From an output's produce_time on its agent to its journal commit here",
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.relay_streams_opened = Counter(
            "astrabox_relay_streams_opened", "Agent Connect streams welcomed (an agent's reconnects count)", registry=r
        )
        self.agents_connected = Gauge(
            "astrabox_relay_agents_connected", "Agent streams open on this replica now", registry=r
        )
        self.webhook_attempts = Counter(
            "astrabox_webhook_attempts",
            "Webhook delivery attempts, by outcome: delivered (a 2xx answer), rejected (another status), "
            "unreachable (no answer, or the address was refused)",
            ["outcome"],
            registry=r,
        )
        self.schedule_runs = Counter(
            "astrabox_schedule_runs",
            "Schedule runs by outcome: started (the session took the prompt), failed, or retried (a refusal"
            " the schedule's retry policy tries again, each time)",
            ["outcome"],
            registry=r,
        )
        self.database_up = Gauge(
            "astrabox_database_up", "Whether PostgreSQL answered the health monitor's last probe", registry=r
        )

    def watch_database(self, serving: Callable[[], bool | None]) -> None:
        """Serve `astrabox_database_up` from `serving()` (the health monitor's last answer; None: none yet)."""
        self.database_up.set_function(lambda: 1.0 if serving() else 0.0)

    def watch_sessions(self, pool: asyncpg.Pool, loop: asyncio.AbstractEventLoop) -> None:
        """Serve sessions by state, counted at scrape time (cached) from `pool` on `loop`."""
        self.registry.register(_SessionsByState(pool, loop))

    def turn_ended(self, outcome: str, seconds: float | None) -> None:
        self.turns_ended.labels(outcome).inc()
        if seconds is not None:
            self.turn_duration.labels(outcome).observe(max(0.0, seconds))


# Settled states: a session stays in them for good, which is no stall.
_RELEASED = frozenset({SessionState.ARCHIVED, SessionState.DELETED, SessionState.FAILED})


class _SessionsByState(Collector):
    def __init__(self, pool: asyncpg.Pool, loop: asyncio.AbstractEventLoop) -> None:
        self._pool = pool
        self._loop = loop
        self._cache = Cached(SESSIONS_CACHE_S)

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return []  # read at scrape time only (the registry must not collect at registration)

    async def _count(self) -> tuple[list[asyncpg.Record], int, asyncpg.Record]:
        async with self._pool.acquire() as conn:
            return (
                await store.sessions.gauges_by_state(conn),
                await store.background_tasks.count_open(conn),
                await store.webhook_deliveries.backlog(conn),
            )

    def collect(self) -> Iterable[GaugeMetricFamily]:
        counts = self._cache.get(lambda: on_loop(self._loop, self._count))
        if counts is None:  # the database did not answer in time: no value is better than a wrong one
            return []
        rows, tasks_open, backlog = counts
        by_state = {row["state"]: row for row in rows}
        family = GaugeMetricFamily("astrabox_sessions", "Sessions by state", labels=["state"])
        stalled = GaugeMetricFamily(
            "astrabox_sessions_stalled_seconds",
            "The longest any session in a live state has gone without a change (0: none in it)",
            labels=["state"],
        )
        for state in SessionState:
            row = by_state.get(state.value)
            family.add_metric([state.value], row["n"] if row else 0)
            if state not in _RELEASED:
                stalled.add_metric([state.value], max(0.0, row["stalled"]) if row else 0)
        released = GaugeMetricFamily(
            "astrabox_released_sandboxes",
            "Sandboxes of released sessions not destroyed yet: still retried (pending) or given up on "
            "(abandoned: an operator's to remove)",
            labels=["destruction"],
        )
        released.add_metric(["pending"], sum(row["releasing"] for row in rows))
        released.add_metric(["abandoned"], sum(row["abandoned"] for row in rows))
        tasks = GaugeMetricFamily(
            "astrabox_background_tasks_open", "Engines' background tasks open, across every session", value=tasks_open
        )
        pending = GaugeMetricFamily(
            "astrabox_webhook_deliveries_pending",
            "Webhook deliveries not yet delivered nor failed, across every project",
            value=backlog["pending"],
        )
        oldest = GaugeMetricFamily(
            "astrabox_webhook_oldest_pending_seconds",
            "How long the oldest pending webhook delivery has waited (0: none pending)",
            value=max(0.0, backlog["oldest_s"] or 0.0),
        )
        return [family, stalled, released, tasks, pending, oldest]


class RpcMetrics(grpc.aio.ServerInterceptor):  # type: ignore[misc, unused-ignore]
    """Counts every RPC the server has a handler for by service, method and final code, and times it.

    Outermost, so it sees the status the caller sees: an authentication refusal, a bounded field,
    a domain error mapped by the edge."""

    def __init__(self, metrics: ControlPlaneMetrics) -> None:
        self._metrics = metrics

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:  # an unknown method: answered UNIMPLEMENTED by gRPC, not an unbounded label
            return handler
        service, _, method = handler_call_details.method.lstrip("/").rpartition("/")
        record = _Recorder(self._metrics, service or "unknown", method)
        for kind in ("unary_unary", "unary_stream", "stream_unary", "stream_stream"):
            behavior = getattr(handler, kind)
            if behavior is not None:
                wrapped = record.generator(behavior) if inspect.isasyncgenfunction(behavior) else record.call(behavior)
                return handler._replace(**{kind: wrapped})
        return handler


class _Recorder:
    def __init__(self, metrics: ControlPlaneMetrics, service: str, method: str) -> None:
        self._metrics = metrics
        self._service = service
        self._method = method

    def _done(self, began: float, context: grpc.aio.ServicerContext, error: BaseException | None) -> None:
        code = _final_code(context, error)
        self._metrics.rpc_requests.labels(self._service, self._method, code.name).inc()
        self._metrics.rpc_duration.labels(self._service, self._method).observe(time.perf_counter() - began)

    def call(self, behavior: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            began = time.perf_counter()
            try:
                response = await behavior(request, context)
            except BaseException as error:
                self._done(began, context, error)
                raise
            self._done(began, context, None)
            return response

        return call

    def generator(self, behavior: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
        async def call(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            began = time.perf_counter()
            try:
                async for response in behavior(request, context):
                    yield response
            except BaseException as error:
                self._done(began, context, error)
                raise
            self._done(began, context, None)

        return call


def _final_code(context: grpc.aio.ServicerContext, error: BaseException | None) -> grpc.StatusCode:
    if isinstance(error, asyncio.CancelledError | GeneratorExit):
        return grpc.StatusCode.CANCELLED
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code
    if isinstance(code, int):  # the aio context keeps the code it was aborted with as its number
        for known in grpc.StatusCode:
            if known.value[0] == code:
                return known
    return grpc.StatusCode.OK if error is None else grpc.StatusCode.UNKNOWN
