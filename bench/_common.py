"""Shared helpers for the benchmarks: child processes, a throwaway PostgreSQL, figures."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

# gRPC's C core logs at INFO each time a child is spawned next to its threads; keep stderr readable.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the benchmarks drive processes with the tests' own harness

from controlplane.embedded_postgres import EmbeddedPostgres  # noqa: E402
from controlplane.identity import keys  # noqa: E402
from tests.support import admission  # noqa: E402
from tests.support.processes import Process  # noqa: E402 - also re-exported for the scripts


@contextlib.asynccontextmanager
async def embedded_postgres(fast: bool) -> AsyncIterator[str]:
    """A throwaway PostgreSQL cluster in its own temp dir; yields the DSN of its database."""
    data_dir = Path(tempfile.mkdtemp(prefix="astrabox-bench-pg-"))
    cluster = EmbeddedPostgres(data_dir, fast=fast, settings={"max_connections": "100"})
    try:
        yield await cluster.start()
    finally:
        with contextlib.suppress(Exception):
            await cluster.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def api_key_file(work: Path) -> tuple[Path, str]:
    """A new API key written to `work/api-key` (mode 0600), for the control plane to register as its
    bootstrap admin key (`--bootstrap-key-file`, `ControlPlaneSettings.bootstrap_key_file`); returns
    (path, key). The key is for the benchmark's clients (`api_key=`): never print it."""
    path = work / "api-key"
    key = keys.new_key().secret
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(key + "\n")
    return path, key


# The benchmarks' control planes admit the agents they start at once, as a single-team installation
# would (`--agent-admission automatic` with an enrollment token); agents are otherwise pending until
# an operator admits them (controlplane.identity.agent_admission).
ENROLLMENT_TOKEN = admission.TOKEN  # tests.support.runner_stub, an agent of the heartbeats benchmark, presents it
CONTROLPLANE_ADMISSION = {"enrollment_token": ENROLLMENT_TOKEN, "agent_admission": "automatic"}
CONTROLPLANE_ADMISSION_ENV = {"ASTRABOX_ENROLLMENT_TOKEN": ENROLLMENT_TOKEN, "ASTRABOX_AGENT_ADMISSION": "automatic"}
AGENT_ADMISSION_ENV = {"ASTRABOX_ENROLLMENT_TOKEN": ENROLLMENT_TOKEN}


def offline_agent(address: str, work: Path, *args: str) -> Process:
    """A data-plane agent for a benchmark: state in `work/agent`, log in `work/agent.log`, the
    offline model, extra flags `args`."""
    argv = [sys.executable, "-m", "dataplane_agent", "--controlplane", address, "--state-dir", str(work / "agent"),
            "--agent-id", "bench-agent", "--capacity", "4", "--log-format", "json", *args]  # fmt: skip
    env = {"ANTHROPIC_API_KEY": "", "ASTRABOX_MODEL_BASE_URL": "", **AGENT_ADMISSION_ENV}
    return Process("agent", argv, work / "agent.log", env=env)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def summary_row(name: str, values: Sequence[float], unit: str = "ms") -> str:
    p50, p90, top = percentile(values, 50), percentile(values, 90), max(values)
    return f"  {name:<48} n={len(values):<4} p50={p50:9.1f} {unit}  p90={p90:9.1f} {unit}  max={top:9.1f} {unit}"


def revision() -> str:
    """The checked-out commit, with "+dirty" when the working tree has changes."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    dirty = "+dirty" if git("status", "--porcelain", "--untracked-files=no") else ""
    return (git("rev-parse", "--short", "HEAD") or "unknown") + dirty


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


TURN_END = ("turn_completed", "turn_failed", "turn_interrupted")
WATCH_TIMEOUT = 180.0


def event_ms(event) -> float:
    """An event's journal time, in milliseconds."""
    return event.time.ToNanoseconds() / 1e6


async def watch_until(watch, predicate) -> list[tuple[object, float]]:
    """Events from an open watch up to and including the first that satisfies `predicate`, each with
    its perf_counter receive time; RuntimeError on RUNTIME_FAILED or the watch ending."""
    events = []
    async with asyncio.timeout(WATCH_TIMEOUT):
        async for event in watch:
            events.append((event, time.perf_counter()))
            if event.WhichOneof("payload") == "runtime_failed":
                raise RuntimeError(f"runtime_failed: {event}")
            if predicate(event):
                return events
    raise RuntimeError("watch ended")


def turn_end(turn_id: str):
    """A `watch_until` predicate: the turn's last event."""
    return lambda e: e.turn_id == turn_id and e.WhichOneof("payload") in TURN_END
