"""Real AstraBox processes for end-to-end and fault tests.

Each process is started with the same Python as the tests, prints one
"... listening on ADDR" / "... connected" style line we wait for, and is
stopped with SIGTERM (or killed with SIGKILL by fault tests).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from tests.support import admission

ROOT = Path(__file__).resolve().parents[2]


class Process:
    """A child process whose output is captured to a log file and scanned for a line."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        cwd: Path = ROOT,
    ) -> None:
        self.name = name
        self.log_path = log_path
        self._lines: list[str] = []
        self._cond = threading.Condition()
        self._log = open(log_path, "a", buffering=1)  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )
        self._pump_thread = threading.Thread(target=self._pump, daemon=True)
        self._pump_thread.start()

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
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for line in self._lines[seen:]:
                    if match := regex.search(line):
                        return match
                seen = len(self._lines)
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"{self.name} exited with {self.proc.returncode}; log: {self.log_path}\n{self.tail()}"
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"{self.name} did not print /{pattern}/ in {timeout}s; log: {self.log_path}\n{self.tail()}"
                    )
                self._cond.wait(min(remaining, 0.5))

    def output(self, timeout: float = 30.0) -> str:
        """Everything the process printed, once it has exited and its output has been read to the end."""
        self.proc.wait(timeout)
        self._pump_thread.join(timeout)
        with self._cond:
            return "".join(self._lines)

    def tail(self, n: int = 40) -> str:
        return "".join(self._lines[-n:])

    def kill(self) -> None:
        """SIGKILL the process itself, as a crash would; then sweep what it left."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()


def start_controlplane(
    database_url: str, log_dir: Path, listen: str = "127.0.0.1:0", args: Sequence[str] = ()
) -> tuple[Process, str]:
    process = Process(
        "controlplane",
        [sys.executable, "-m", "controlplane", "--listen", listen, *args],
        log_dir / "controlplane.log",
        # By environment, as a user should: the URL holds the database's password.
        env={"ASTRABOX_DATABASE_URL": database_url, **admission.CONTROLPLANE_ENV},
    )
    address = process.wait_for_line(r"controlplane listening on (\S+)").group(1)
    return process, address


def start_agent(
    target: str,
    state_dir: Path,
    log_dir: Path,
    agent_id: str = "e2e-agent",
    args: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> Process:
    process = Process(
        "agent",
        [
            sys.executable,
            "-m",
            "dataplane_agent",
            "--controlplane",
            target,
            "--state-dir",
            str(state_dir),
            "--agent-id",
            agent_id,
            *args,
        ],
        log_dir / "agent.log",
        # No key: the agent serves the built-in offline model on loopback.
        env={"ANTHROPIC_API_KEY": "", "ASTRABOX_MODEL_BASE_URL": "", **admission.AGENT_ENV, **(env or {})},
    )
    process.wait_for_line(r"relay_connected", timeout=60)
    return process


def sandbox_processes(workspace: Path) -> list[str]:
    """The command lines of the host's processes (root sees them all) that see `workspace` as their
    /workspace: those of one sandbox, of either driver, whoever started them and whoever their
    parent is now. Zombies are not running: they are left out."""
    wanted = workspace.stat()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            seen = (entry / "root" / "workspace").stat()
            if (seen.st_dev, seen.st_ino) != (wanted.st_dev, wanted.st_ino):
                continue
            if (entry / "stat").read_text().rpartition(")")[2].split()[0] == "Z":
                continue
            found.append((entry / "cmdline").read_bytes().rstrip(b"\0").replace(b"\0", b" ").decode())
        except OSError:
            continue
    return found
