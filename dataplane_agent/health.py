"""The agent's own health, in a file an operator's probe reads: `<state dir>/health.json`.

The agent serves no port of its own (it dials the control plane), so its health is written, not
served: every `--health-interval` seconds, atomically (a new file renamed over the old one), with

    status            SERVING when its stream to the control plane is up and its sandbox driver is
                      usable; NOT_SERVING otherwise, and once the agent has stopped
    stream_connected  whether a Connect stream is open (Welcome received)
    outbox_depth      outputs not yet committed by the control plane, and outbox_sessions: of how many
                      sessions (a growing depth with the stream up means commits are failing)
    driver_usable     whether the driver's own check (`SandboxDriver.probe`) passed, re-run every
                      `--driver-probe-interval` seconds (it may start a test sandbox: not every write);
                      driver_error says why not
    updated_at        when it was written (a stale file means the agent is hung or gone)

A probe such as `jq -e '.status == "SERVING"' ~/.astrabox/agent/health.json` (checking
updated_at's age as well) is the agent's liveness and readiness. The file holds no secret: no
address beyond the control plane's, no session id.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import structlog

from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.sandboxes.base import SandboxDriver, SandboxError
from serverkit.waits import bounded

log = structlog.get_logger(__name__)

FILE_NAME = "health.json"


class HealthFile:
    """Writes the agent's health to `path` until cancelled, and NOT_SERVING when it stops."""

    def __init__(
        self,
        path: Path,
        *,
        stream_connected: Callable[[], bool],
        outbox: Outbox,
        driver: SandboxDriver,
        write_interval: float = 5.0,
        driver_probe_interval: float = 60.0,
        driver_probe_timeout: float = 60.0,
    ) -> None:
        self._path = path
        self._stream_connected = stream_connected
        self._outbox = outbox
        self._driver = driver
        self._write_interval = write_interval
        self._driver_probe_interval = driver_probe_interval
        self._driver_probe_timeout = driver_probe_timeout
        self._driver_error: str | None = None  # the startup probe passed: usable until a probe says not
        self._driver_probed_at = time.monotonic()

    async def run(self) -> None:
        try:
            while True:
                await self.write()
                await asyncio.sleep(self._write_interval)
        finally:
            self._write({**await self._snapshot(probe=False), "status": "NOT_SERVING", "stopped": True})

    async def write(self) -> dict[str, object]:
        """Write the health now; what was written."""
        health = await self._snapshot(probe=True)
        self._write(health)
        return health

    async def _snapshot(self, *, probe: bool) -> dict[str, object]:
        if probe and time.monotonic() - self._driver_probed_at >= self._driver_probe_interval:
            await self._probe_driver()
        depth: int | None = None
        sessions: int | None = None
        try:
            cursors = await self._outbox.cursors()
            depth, sessions = sum(c.pending for c in cursors), len(cursors)
        except Exception as error:  # the agent's database failing: the depth is unknown, and says so
            log.warning("outbox_unreadable", error=type(error).__name__)
        connected = self._stream_connected()
        usable = self._driver_error is None
        health: dict[str, object] = {
            "status": "SERVING" if connected and usable else "NOT_SERVING",
            "stream_connected": connected,
            "outbox_depth": depth,
            "outbox_sessions": sessions,
            "driver": self._driver.name,
            "driver_usable": usable,
            "updated_at": datetime.now(UTC).isoformat(),
        }
        if self._driver_error is not None:
            health["driver_error"] = self._driver_error
        return health

    async def _probe_driver(self) -> None:
        self._driver_probed_at = time.monotonic()
        try:
            await bounded(self._driver.probe(), self._driver_probe_timeout)
        except Exception as error:  # SandboxError says what to do; anything else is named by its class
            message = str(error) if isinstance(error, SandboxError) else type(error).__name__
            if self._driver_error is None:
                log.warning("driver_unusable", driver=self._driver.name, error=message)
            self._driver_error = message
        else:
            if self._driver_error is not None:
                log.info("driver_usable_again", driver=self._driver.name)
            self._driver_error = None

    def _write(self, health: dict[str, object]) -> None:
        partial = self._path.with_name(f".{self._path.name}.{os.getpid()}")
        try:
            partial.write_text(json.dumps(health, sort_keys=True) + "\n")
            partial.replace(self._path)
        except OSError as error:
            log.warning("health_file_unwritable", path=str(self._path), error=error.strerror)
