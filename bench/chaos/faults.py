"""The faults of a chaos round, injected one after another at random until the round stops.

    agent_kill          SIGKILL an agent, start it again after 0.2-3 s
    agent_move          SIGKILL an agent and keep it down past its lease: its sessions lose
                        their runtime and their next message is placed on the other agent
    controlplane_kill   SIGKILL a replica, start it again after 0.2-3 s (its streams move over)
    postgres_restart    PostgreSQL stopped in immediate mode (no checkpoint) and started
    postgres_kill       PostgreSQL's postmaster and backends SIGKILLed, then started
    runner_cut          an agent's Runner stream cut (its proxy drops every connection)
    runner_stall        an agent's Runner stream stalled for 2-8 s
    runner_partition    an agent's Runner stream stalled past the lease (the agent does not notice)
    client_cut          every client connection cut (watchers resume, calls are retried)
    client_stall        every client connection stalled for 1-5 s
    release_mid_turn    a session with a turn in progress archived or deleted

`lanes` faults run at once, never two on the same target (an agent, a replica, PostgreSQL, a
proxy): a lane that draws a busy target skips that draw.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import defaultdict
from collections.abc import AsyncIterator

from chaos.cluster import Cluster
from chaos.driver import Driver
from chaos.records import Fault, Round
from chaos.sandboxes import descendants_of, still_running
from controlplane.settings import ControlPlaneSettings

LEASE_TTL_S = ControlPlaneSettings.__dataclass_fields__["lease_ttl"].default.total_seconds()

# Process kills cost a CLI start (seconds on a loaded machine) to every session they hit: fewer of
# them than of cuts and stalls, so that turns also get to run between faults.
WEIGHTS = {
    "agent_kill": 8,
    "agent_move": 3,
    "controlplane_kill": 8,
    "postgres_restart": 4,
    "postgres_kill": 3,
    "runner_cut": 14,
    "runner_stall": 10,
    "runner_partition": 3,
    "client_cut": 12,
    "client_stall": 8,
    "release_mid_turn": 8,
}


class Injector:
    def __init__(
        self, cluster: Cluster, driver: Driver, round: Round, rng: random.Random, gap: tuple[float, float]
    ) -> None:
        self._cluster, self._driver, self._round, self._rng, self._gap = cluster, driver, round, rng, gap
        self._busy: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    def quiet_for(self, seconds: float) -> bool:
        """No fault in progress, and none ended in the last `seconds`."""
        now = time.monotonic()
        return all(fault.end and now - fault.end > seconds for fault in self._round.faults)

    async def run(self, stop: asyncio.Event, lanes: int = 1) -> None:
        async with asyncio.TaskGroup() as tasks:
            for _ in range(lanes):
                tasks.create_task(self._lane(stop))

    async def _lane(self, stop: asyncio.Event) -> None:
        kinds, weights = list(WEIGHTS), list(WEIGHTS.values())
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self._rng.uniform(*self._gap))
                return
            except TimeoutError:
                pass
            kind = self._rng.choices(kinds, weights, k=1)[0]
            await getattr(self, kind)()

    @contextlib.asynccontextmanager
    async def _hold(self, target: str) -> AsyncIterator[bool]:
        """Whether `target` was free (and is now this fault's until the block ends)."""
        lock = self._busy[target]
        if lock.locked():
            yield False
            return
        async with lock:
            yield True

    def _begin(self, kind: str, target: str, excuses: frozenset[str] = frozenset()) -> Fault:
        fault = Fault(kind, target, time.monotonic(), time.time(), excuses_lapse_of=excuses)
        self._round.faults.append(fault)
        return fault

    def _pick_agent(self) -> int:
        return self._rng.randrange(len(self._cluster.dataplanes))

    async def agent_kill(self, down: tuple[float, float] = (0.2, 3.0), kind: str = "agent_kill") -> None:
        member = self._cluster.dataplanes[self._pick_agent()]
        async with self._hold(member.name) as free:
            if not free:
                return
            fault = self._begin(kind, member.name, frozenset({member.name}))
            started = descendants_of(member.process.proc.pid) if member.running and member.process else {}
            member.kill()
            await asyncio.sleep(self._rng.uniform(*down))
            # Before the next agent starts (it ends what sandboxes still run): what the killed one
            # started on the host must be gone by now, the last stragglers given 2 s more.
            for _ in range(20):
                fault.left_on_host = still_running(started)
                if not fault.left_on_host:
                    break
                await asyncio.sleep(0.1)
            await member.start()
            fault.finish()

    async def agent_move(self) -> None:
        await self.agent_kill((LEASE_TTL_S + 6.0, LEASE_TTL_S + 10.0), "agent_move")

    async def controlplane_kill(self) -> None:
        member = self._rng.choice(self._cluster.controlplanes)
        async with self._hold(member.name) as free:
            if not free:
                return
            fault = self._begin("controlplane_kill", member.name, frozenset(self._cluster.agent_ids))
            member.kill()
            await asyncio.sleep(self._rng.uniform(0.2, 3.0))
            await member.start()
            fault.finish()

    async def postgres_restart(self) -> None:
        async with self._hold("postgres") as free:
            if not free:
                return
            fault = self._begin("postgres_restart", "postgres", frozenset(self._cluster.agent_ids))
            await self._cluster.postgres.restart_immediate()
            fault.finish()

    async def postgres_kill(self) -> None:
        async with self._hold("postgres") as free:
            if not free:
                return
            fault = self._begin("postgres_kill", "postgres", frozenset(self._cluster.agent_ids))
            await self._cluster.postgres.kill()
            fault.finish()

    async def runner_cut(self) -> None:
        index = self._pick_agent()
        proxy = self._cluster.agent_proxies[index]
        fault = self._begin("runner_cut", self._cluster.agent_ids[index], frozenset({self._cluster.agent_ids[index]}))
        fault.finish(f"{proxy.cut()} connection(s)")

    async def runner_stall(self, seconds: tuple[float, float] = (2.0, 8.0), kind: str = "runner_stall") -> None:
        index = self._pick_agent()
        proxy = self._cluster.agent_proxies[index]
        async with self._hold(proxy.name) as free:
            if not free:
                return
            agent_id = self._cluster.agent_ids[index]
            fault = self._begin(kind, agent_id, frozenset({agent_id}))
            await proxy.stall(self._rng.uniform(*seconds))
            fault.finish()

    async def runner_partition(self) -> None:
        await self.runner_stall((LEASE_TTL_S + 5.0, LEASE_TTL_S + 10.0), "runner_partition")

    async def client_cut(self) -> None:
        fault = self._begin("client_cut", "clients")
        fault.finish(f"{self._cluster.client_proxy.cut()} connection(s)")

    async def client_stall(self) -> None:
        async with self._hold("clients") as free:
            if not free:
                return
            fault = self._begin("client_stall", "clients")
            await self._cluster.client_proxy.stall(self._rng.uniform(1.0, 5.0))
            fault.finish()

    async def release_mid_turn(self) -> None:
        candidates = self._driver.with_open_turn()
        if not candidates:
            return
        actor = self._rng.choice(candidates)
        how = "archived" if self._rng.random() < 0.4 else "deleted"
        assert actor.session is not None
        fault = self._begin("release_mid_turn", f"{how} {actor.session.session_id}")
        await actor.release(how)
        fault.finish()
