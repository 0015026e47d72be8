"""What sandboxes use of the host — CPU and memory — sampled on a bounded interval for the metrics.

Each driver measures its own way (`usage`): docker from each container's stats, the local driver from
the sandbox's cgroups where it has them (without a group, a local sandbox is not measured: see
`limits.py`). The agent's metrics may never carry a sandbox's or session's id, so what leaves this
module is a `UsageSnapshot` across the sandboxes measured: their totals and the largest one. It is
sampled every `USAGE_INTERVAL_S` by a task of its own (a reading of many containers takes Docker a
second or more each), never at scrape time, and the scrape only reads the last snapshot. CPU is a rate
between two samples of the same sandbox, so a sandbox counts towards the cores from its second sample.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from dataplane_agent.sandboxes.base import Sandbox

log = structlog.get_logger(__name__)

USAGE_INTERVAL_S = 15.0


@dataclass(frozen=True, slots=True)
class SandboxUsage:
    """One sandbox's reading; None where its driver cannot tell."""

    # CPU time used since the sandbox began.
    cpu_seconds: float | None
    # Memory held now, page cache that can be dropped left out.
    memory_bytes: int | None


@dataclass(frozen=True, slots=True)
class UsageSnapshot:
    """The sandboxes measured at the last sample, with no sandbox named."""

    measured: int = 0
    cpu_cores: float = 0.0
    cpu_cores_max: float = 0.0
    memory_bytes: int = 0
    memory_bytes_max: int = 0
    # CPU seconds every sandbox measured since the agent started has used (it only grows).
    cpu_seconds_total: float = 0.0


class MeasuringDriver(Protocol):
    """A driver that can read what its sandboxes use."""

    name: str

    async def usage(self, sandboxes: Sequence[Sandbox]) -> Mapping[str, SandboxUsage]:
        """Each of `sandboxes` it could measure, by sandbox id."""


class UsageSampler:
    """Samples the sandboxes `sandboxes()` names every `interval` seconds; `snapshot` is the last."""

    def __init__(
        self, driver: object, sandboxes: Callable[[], Sequence[Sandbox]], interval: float = USAGE_INTERVAL_S
    ) -> None:
        self.driver_name: str = getattr(driver, "name", "unknown")
        self._driver: MeasuringDriver | None = driver if callable(getattr(driver, "usage", None)) else None  # type: ignore[assignment]
        self._sandboxes = sandboxes
        self._interval = interval
        self.snapshot = UsageSnapshot()
        # Each sandbox's last CPU reading and when it was taken (monotonic seconds).
        self._last: dict[str, tuple[float, float]] = {}

    @property
    def available(self) -> bool:
        """Whether the driver measures its sandboxes at all."""
        return self._driver is not None

    async def run(self) -> None:
        """Sample until cancelled; a sample that fails or overruns the interval is logged and skipped."""
        if self._driver is None:
            log.info("sandbox_usage_unavailable", driver=self.driver_name)
            return
        while True:
            try:
                async with asyncio.timeout(self._interval):
                    await self.sample()
            except Exception as error:
                log.warning("sandbox_usage_not_sampled", error=f"{type(error).__name__}: {error}")
            await asyncio.sleep(self._interval)

    async def sample(self) -> UsageSnapshot:
        """One sample of every sandbox named now; the snapshot it leaves."""
        sandboxes = list(self._sandboxes())
        readings = await self._driver.usage(sandboxes) if self._driver is not None and sandboxes else {}
        now = time.monotonic()
        cores: list[float] = []
        memory: list[int] = []
        added = 0.0
        last: dict[str, tuple[float, float]] = {}
        for sandbox_id, reading in readings.items():
            if reading.memory_bytes is not None:
                memory.append(reading.memory_bytes)
            if reading.cpu_seconds is None:
                continue
            last[sandbox_id] = (now, reading.cpu_seconds)
            before = self._last.get(sandbox_id)
            if before is None:  # first seen: what it used so far counts, its rate from the next sample
                added += reading.cpu_seconds
                continue
            used = max(0.0, reading.cpu_seconds - before[1])
            added += used
            if now > before[0]:
                cores.append(used / (now - before[0]))
        self._last = last  # sandboxes gone are forgotten
        self.snapshot = UsageSnapshot(
            measured=len(readings),
            cpu_cores=sum(cores),
            cpu_cores_max=max(cores, default=0.0),
            memory_bytes=sum(memory),
            memory_bytes_max=max(memory, default=0),
            cpu_seconds_total=self.snapshot.cpu_seconds_total + added,
        )
        return self.snapshot


def from_docker_stats(stats: Mapping[str, Any]) -> SandboxUsage | None:
    """A container's reading from Docker's stats (`GET /containers/{id}/stats?stream=0`), as
    `docker stats` computes memory: usage less the inactive page cache; None for a stopped one."""
    cpu = (stats.get("cpu_stats") or {}).get("cpu_usage") or {}
    mem = stats.get("memory_stats") or {}
    total = cpu.get("total_usage")
    used = mem.get("usage")
    if total is None and used is None:
        return None
    detail = mem.get("stats") or {}
    cache = detail.get("inactive_file", detail.get("total_inactive_file", 0))
    return SandboxUsage(
        cpu_seconds=total / 1e9 if total is not None else None,
        memory_bytes=max(0, used - cache) if used is not None else None,
    )
