"""Shared helpers for the benchmarks: child processes, a throwaway PostgreSQL, figures."""

from __future__ import annotations

import contextlib
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

# gRPC's C core logs at INFO each time a child is spawned next to its threads; keep stderr readable.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from controlplane.embedded_postgres import EmbeddedPostgres  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class Process:
    """A child process whose output goes to a log file and is scanned for a readiness line."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.name, self.log_path = name, log_path
        self._lines: list[str] = []
        self._cond = threading.Condition()
        self._log = open(log_path, "a", buffering=1)  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}, start_new_session=True,
        )
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._log.write(line)
            with self._cond:
                self._lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for_line(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        regex, deadline, seen = re.compile(pattern), time.monotonic() + timeout, 0
        with self._cond:
            while True:
                for line in self._lines[seen:]:
                    if match := regex.search(line):
                        return match
                seen = len(self._lines)
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; see {self.log_path}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.name} did not print /{pattern}/ in {timeout}s; see {self.log_path}")
                self._cond.wait(0.5)

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()


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
