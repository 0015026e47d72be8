"""The processes of a chaos round, each one that can be killed and started again.

An embedded PostgreSQL, control-plane replicas (each on a fixed loopback
port, so a restarted replica is where it was), data-plane agents (each with
its own state directory and agent id, dialling its own `CuttingProxy` in front
of every replica) and one proxy for the clients. Kills are SIGKILL of the
process itself, as a crash: what it started is left to the platform to find.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from _common import AGENT_ADMISSION_ENV, CONTROLPLANE_ADMISSION_ENV

from chaos.proxy import CuttingProxy
from tests.support.processes import Process
from tests.support.restartable_postgres import RestartablePostgres

# Replicas and agents that cannot start (the database is down, say) are tried again until then.
_START_DEADLINE_S = 180.0


class StartFailed(Exception):
    """A process did not come up before its deadline."""


class Postgres:
    """The round's database: restarted in `immediate` mode (no checkpoint) or killed outright.

    Driven from `RestartablePostgres`'s helper process: pg_ctl runs as the `postgres` user, which
    makes Python fork() rather than vfork(), and a child forked from this process (busy gRPC
    threads) crashed with SIGSEGV before it ran pg_ctl, ending a 45-minute round after 17.
    """

    def __init__(self) -> None:
        self.server = RestartablePostgres(max_connections=200)
        self.dsn = ""

    @property
    def data_dir(self) -> Path:
        return self.server.data_dir

    async def start(self) -> str:
        for attempt in range(20):
            try:
                self.dsn = await self.server.start()
                return self.dsn
            except RuntimeError:  # a killed server's backends may still hold its shared memory for a moment
                if attempt == 19:
                    raise
                await asyncio.sleep(0.5)
        raise AssertionError("unreachable")

    async def restart_immediate(self) -> None:
        await self.server.stop("immediate")
        await self.start()

    async def kill(self) -> None:
        """SIGKILL the postmaster and every backend, as a crashed host would leave it; then start."""
        pid = _postmaster_pid(self.data_dir)
        if pid is not None:
            for victim in [pid, *_children(pid)]:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(victim, signal.SIGKILL)
        await asyncio.sleep(0.3)
        await self.start()

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await self.server.close()


class Member:
    """One killable process (a replica or an agent) with how to start it again."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict[str, str], ready: str) -> None:
        self.name = name
        self._argv = argv
        self._log_path = log_path
        self._env = env
        self._ready = ready
        self.process: Process | None = None
        self.starts = 0

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.proc.poll() is None

    async def start(self) -> str:
        """Start until it prints its ready line (retrying while it exits early); the line's group 1."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _START_DEADLINE_S
        while True:
            self.process = Process(self.name, self._argv, self._log_path, env=self._env)
            self.starts += 1
            try:
                match = await asyncio.to_thread(self.process.wait_for_line, self._ready, 60.0)
                return match.group(1) if match.groups() else ""
            except (RuntimeError, TimeoutError) as error:
                self.kill()
                if loop.time() > deadline:
                    raise StartFailed(f"{self.name} did not start: {error}") from error
                await asyncio.sleep(1.0)

    def kill(self) -> None:
        """SIGKILL the process alone, as a crash does; its children are not swept."""
        if self.process is None:
            return
        proc = self.process.proc
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


@dataclass
class Cluster:
    """Everything a round runs: PostgreSQL, replicas, agents and the proxies in front of the replicas."""

    work: Path
    rng: random.Random
    api_key_file: Path
    replicas: int = 2
    agents: int = 2
    driver: str = "local"
    capacity: int = 8
    idle_stop_after: float = 20.0
    installation: str = ""
    postgres: Postgres = field(init=False)
    controlplanes: list[Member] = field(default_factory=list)
    controlplane_addresses: list[str] = field(default_factory=list)
    dataplanes: list[Member] = field(default_factory=list)
    agent_proxies: list[CuttingProxy] = field(default_factory=list)
    client_proxy: CuttingProxy = field(init=False)

    def __post_init__(self) -> None:
        self.postgres = Postgres()

    @property
    def agent_ids(self) -> list[str]:
        return [f"chaos-agent-{i + 1}" for i in range(self.agents)]

    def agent_state(self, index: int) -> Path:
        return self.work / f"agent-{index + 1}"

    async def start(self) -> None:
        dsn = await self.postgres.start()
        env = {"ASTRABOX_DATABASE_URL": dsn, "ASTRABOX_BOOTSTRAP_KEY_FILE": str(self.api_key_file)}
        env |= CONTROLPLANE_ADMISSION_ENV
        for index in range(self.replicas):
            # First on a free port; afterwards always on the same one.
            member = self._controlplane(index, "127.0.0.1:0", env)
            address = await member.start()
            member._argv[member._argv.index("--listen") + 1] = address
            self.controlplanes.append(member)
            self.controlplane_addresses.append(address)
        self.client_proxy = CuttingProxy("clients", self.controlplane_addresses, self.rng)
        await self.client_proxy.start()
        for index, agent_id in enumerate(self.agent_ids):
            proxy = CuttingProxy(f"runner:{agent_id}", self.controlplane_addresses, self.rng)
            await proxy.start()
            self.agent_proxies.append(proxy)
            member = self._agent(index, agent_id, proxy.address)
            self.dataplanes.append(member)
            await member.start()

    def _controlplane(self, index: int, listen: str, env: dict[str, str]) -> Member:
        argv = [sys.executable, "-m", "controlplane", "--listen", listen,
                "--idle-stop-after", str(self.idle_stop_after)]  # fmt: skip
        return Member(
            f"controlplane-{index + 1}", argv, self.work / f"controlplane-{index + 1}.log", env, r"listening on (\S+)"
        )

    def _agent(self, index: int, agent_id: str, target: str) -> Member:
        argv = [sys.executable, "-m", "dataplane_agent", "--controlplane", target,
                "--state-dir", str(self.agent_state(index)), "--agent-id", agent_id,
                "--capacity", str(self.capacity), "--log-format", "json", "--driver", self.driver]  # fmt: skip
        if self.driver == "docker":
            argv += ["--installation", self.installation]
        # No key and no URL: the agent serves the built-in offline model on loopback.
        env = {"ANTHROPIC_API_KEY": "", "ASTRABOX_MODEL_BASE_URL": "", **AGENT_ADMISSION_ENV}
        return Member(agent_id, argv, self.work / f"{agent_id}.log", env, r"(relay_connected)")

    async def ensure_running(self) -> None:
        """Start whatever a fault left down (the end of a round), and let every proxy flow."""
        for member in [*self.controlplanes, *self.dataplanes]:
            if not member.running:
                await member.start()

    async def stop(self) -> None:
        for member in [*self.dataplanes, *self.controlplanes]:
            await asyncio.to_thread(member.stop)
        for proxy in [*self.agent_proxies, self.client_proxy]:
            await proxy.close()
        if self.driver == "docker" and self.installation:
            subprocess.run(
                f"docker ps -aq --filter label=astrabox.installation={self.installation} | xargs -r docker rm -f",
                shell=True,
                capture_output=True,
                check=False,
            )
        await self.postgres.stop()  # and removes its data directory


def _postmaster_pid(data_dir: Path) -> int | None:
    try:
        return int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def _children(pid: int) -> list[int]:
    """Every process whose parent is `pid` (PostgreSQL's backends of its postmaster)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            found.append(int(entry.name))
    return found
