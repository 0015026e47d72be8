"""The agent's Prometheus metrics (`--metrics-listen`): every metric object, in one place.

One `AgentMetrics` per agent process object, with its own registry (served by
`serverkit.metrics_http`). Labels are bounded: a driver, a startup phase, a warm-pool hit or miss,
a sandbox state. Never a session, turn or sandbox id.

Recorded as things happen:
    startup phases    `dataplane_agent.runtimes.starts` (each phase a start reports)
    idle stops        `dataplane_agent.runtimes.endings` (a StopRuntime the control plane sent an idle session, done)
Read at scrape time (`attach`), on the event loop, from what owns them:
    the outbox        outputs and bytes not yet committed by the control plane, of how many sessions
    the relay         stream connected, its age, outputs sent on it and not yet acknowledged,
                      streams opened (each reconnect is one more)
    sandboxes         held sessions by state (running engine, stopped, retained), the warm pool's ready ones;
                      leaked ones (no live session, the reconciler's last destruction of them not
                      confirmed) and those the reconciler destroyed
    sandbox usage     CPU and memory of the running sandboxes, totals and the largest, by driver (the last
                      sample of `sandboxes.usage.UsageSampler`, taken on an interval of its own)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from serverkit.metrics_http import on_loop

if TYPE_CHECKING:  # what the scrape reads; imported for their types only (the runtimes import this module)
    from dataplane_agent.relay.client import RelayClient
    from dataplane_agent.relay.outbox import Outbox
    from dataplane_agent.sandboxes.usage import UsageSampler
    from dataplane_agent.state import AgentState

STARTUP_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300)


class AgentMetrics:
    """The metric objects of one agent; `registry` is what its `/metrics` serves."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.startup_phase = Histogram(
            "astrabox_agent_startup_phase_seconds",
            "How long each phase of a runtime's start took, by driver, phase and whether the sandbox "
            "came from the warm pool (ready: the whole start)",
            ["driver", "phase", "warm_pool"],
            buckets=STARTUP_BUCKETS,
            registry=self.registry,
        )
        self.idle_stops = Counter(
            "astrabox_agent_idle_stops",
            "Idle sessions' runtimes stopped on the control plane's word",
            registry=self.registry,
        )

    def startup_phase_done(self, driver: str, phase: str, duration_ms: int, *, warm: bool) -> None:
        self.startup_phase.labels(driver, phase, "hit" if warm else "miss").observe(duration_ms / 1000)

    def attach(self, sources: ScrapeSources, loop: asyncio.AbstractEventLoop) -> None:
        """Serve what `sources` hold, read on `loop` at each scrape."""
        self.registry.register(_AgentState(sources, loop))


@dataclass(frozen=True, slots=True)
class ScrapeSources:
    outbox: Outbox
    relay: RelayClient
    state: AgentState
    # The sessions whose engine runs now (`Runtimes.running`), and the warm pool's ready sandboxes.
    running: Callable[[], int]
    warm_ready: Callable[[], int]
    # What the reconciler counts: sandboxes leaked now, and destroyed since the start (`Reconciler`).
    leaked: Callable[[], int] = lambda: 0
    reaped: Callable[[], int] = lambda: 0
    # The running sandboxes' CPU and memory; None: not sampled.
    usage: UsageSampler | None = None


@dataclass(frozen=True, slots=True)
class _Reading:
    outbox_outputs: int
    outbox_bytes: int
    outbox_sessions: int
    # Epoch seconds; None: the outbox is empty.
    outbox_oldest: float | None
    held: int
    retained: int


class _AgentState(Collector):
    def __init__(self, sources: ScrapeSources, loop: asyncio.AbstractEventLoop) -> None:
        self._sources = sources
        self._loop = loop

    async def _read(self) -> _Reading:
        outputs, size, sessions = await self._sources.outbox.totals()
        oldest = await self._sources.outbox.oldest_produce_time()
        held = len(await self._sources.state.sessions())
        retained = len(await self._sources.state.retained())
        return _Reading(outputs, size, sessions, oldest, held, retained)

    def describe(self) -> Iterable[Metric]:
        return []  # read at scrape time only (the registry must not collect at registration)

    def collect(self) -> Iterable[Metric]:
        sources = self._sources
        relay = sources.relay
        stream = relay.stream_status()
        yield _gauge(
            "astrabox_agent_relay_connected", "Whether the stream to the control plane is open", int(stream is not None)
        )
        yield _gauge(
            "astrabox_agent_relay_stream_age_seconds",
            "How long the open stream has been up (0: none)",
            stream[0] if stream else 0,
        )
        yield _gauge(
            "astrabox_agent_relay_unacknowledged_outputs",
            "Outputs sent on the open stream that the control plane has not acknowledged",
            stream[1] if stream else 0,
        )
        opened = CounterMetricFamily(
            "astrabox_agent_relay_streams_opened", "Streams to the control plane welcomed (each reconnect is one)"
        )
        opened.add_metric([], relay.streams_opened)
        yield opened
        yield _gauge("astrabox_agent_warm_pool_ready", "Sandboxes ready in the warm pool", sources.warm_ready())
        yield _gauge(
            "astrabox_agent_sandboxes_leaked",
            "Sandboxes with no live session that the reconciler's last pass could not destroy",
            sources.leaked(),
        )
        reaped = CounterMetricFamily(
            "astrabox_agent_sandboxes_reaped", "Sandboxes with no live session the reconciler destroyed"
        )
        reaped.add_metric([], sources.reaped())
        yield reaped
        if sources.usage is not None:
            yield from _usage(sources.usage)
        reading = on_loop(self._loop, self._read)
        if reading is None:  # the state database did not answer in time: no value is better than a wrong one
            return
        yield _gauge(
            "astrabox_agent_outbox_outputs", "Outputs not yet committed by the control plane", reading.outbox_outputs
        )
        yield _gauge("astrabox_agent_outbox_bytes", "Bytes of the outputs not yet committed", reading.outbox_bytes)
        yield _gauge(
            "astrabox_agent_outbox_sessions", "Sessions with outputs not yet committed", reading.outbox_sessions
        )
        yield _gauge(
            "astrabox_agent_outbox_oldest_age_seconds",
            "How long ago the oldest output not yet committed was produced (0: none waits)",
            max(0.0, time.time() - reading.outbox_oldest) if reading.outbox_oldest is not None else 0,
        )
        running = sources.running()
        sandboxes = GaugeMetricFamily(
            "astrabox_agent_sandboxes", "Sessions' sandboxes held here, by state", labels=["state"]
        )
        sandboxes.add_metric(["running"], running)
        sandboxes.add_metric(["stopped"], max(0, reading.held - running))
        sandboxes.add_metric(["retained"], reading.retained)
        yield sandboxes


def _usage(sampler: UsageSampler) -> Iterable[Metric]:
    """The last sample's totals and maxima by driver: never one series per sandbox."""
    snapshot, driver = sampler.snapshot, [sampler.driver_name]
    families: list[Metric] = []
    for name, documentation, value in (
        ("astrabox_agent_sandboxes_measured", "Running sandboxes whose CPU and memory were read", snapshot.measured),
        ("astrabox_agent_sandboxes_cpu_cores", "CPUs' worth of time the sandboxes used, together", snapshot.cpu_cores),
        (
            "astrabox_agent_sandbox_cpu_cores_max",
            "CPUs' worth of time the busiest sandbox used",
            snapshot.cpu_cores_max,
        ),
        ("astrabox_agent_sandboxes_memory_bytes", "Memory the sandboxes hold, together", snapshot.memory_bytes),
        ("astrabox_agent_sandbox_memory_bytes_max", "Memory the largest sandbox holds", snapshot.memory_bytes_max),
    ):
        family = GaugeMetricFamily(name, documentation, labels=["driver"])
        family.add_metric(driver, value)
        families.append(family)
    cpu = CounterMetricFamily(
        "astrabox_agent_sandbox_cpu_seconds", "CPU time the sandboxes measured have used", labels=["driver"]
    )
    cpu.add_metric(driver, snapshot.cpu_seconds_total)
    families.append(cpu)
    return families


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)
