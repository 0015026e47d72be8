"""Scale: 10,000 sessions over 2 control-plane replicas and 4 agents, 200 of them active, then one
replica SIGKILLed with half the agents and watchers on it.

Brings up, in a temp dir, an embedded PostgreSQL, two control-plane replicas (A and B, separate
processes on one database) and four load agents (`bench/_load_agent.py`, separate processes with
their own ids: the Runner protocol with acknowledgements, resending and redialling, but no
sandboxes or engines, so that the load is the control plane's; what a sandbox and an engine cost
per session is `sandbox_ready.py`'s and `agent_sessions.py`'s). Agents 1-2 and half the watchers
dial A first, the others B first; every gRPC target names both replicas (pick_first), as a client
behind no load balancer would.

Phases, each figure printed (never asserted):
1. create  `--sessions` sessions (`--concurrency` calls at once, split over A and B): the create
   rate, and each replica's RSS and the database's size per session once all are READY.
2. steady  the agents produce `--outputs-per-second` engine messages in all over their latest
   started sessions (`--active` in all); the others are idle-stopped after `--idle-stop-after`.
   `--watchers` SDK watches on the active sessions. For `--steady` seconds: committed outputs/s,
   watch latency (event time -> received) p50/p99, ListSessions (first page of 100, and a label
   filter) and GetSession p50/p99 on each replica, and each process's CPU share: what saturates
   first.
3. kill    replica A is SIGKILLed. The time until every agent is welcomed again (on B) and until
   every watcher of A receives again; then `--after-kill` seconds more of load.
4. check   production stops; once every agent has every output acknowledged, each active
   session's journal must hold every output_seq the agent produced, once; each watcher must have
   received every event of its session's journal, once. Lost and duplicated counts are printed; the
   exit code is 1 when any is not zero.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import itertools
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
from _common import CONTROLPLANE_ADMISSION_ENV, Process, api_key_file, embedded_postgres, percentile, revision

from astrabox.client import AstraBoxClient

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 600.0


@dataclass
class Watcher:
    session_id: str
    replica: str
    seqs: list[int] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    received_at: list[float] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU of the process and its reaped children, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    ticks = sum(int(value) for value in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def postgres_cpu_seconds(data_dir: str) -> float:
    """CPU of the PostgreSQL cluster: its postmaster with the backends it reaped, and the live ones."""
    postmaster = int(Path(data_dir, "postmaster.pid").read_text().split()[0])
    total = cpu_seconds(postmaster)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
                if int(fields[1]) == postmaster:
                    total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def figure(name: str, values: list[float], unit: str = "ms") -> str:
    if not values:
        return f"  {name:<52} n=0"
    return (
        f"  {name:<52} n={len(values):<6} p50={percentile(values, 50):9.1f} {unit}"
        f"  p99={percentile(values, 99):9.1f} {unit}  max={max(values):9.1f} {unit}"
    )


class Stack:
    def __init__(self, work: Path, dsn: str, args: argparse.Namespace) -> None:
        self.work, self.dsn, self.args = work, dsn, args
        self.processes: list[Process] = []
        self.replicas: dict[str, tuple[Process, str]] = {}
        self.agents: list[Process] = []

    async def start(self) -> None:
        key_file, self.api_key = api_key_file(self.work)
        for name in ("A", "B"):
            process = Process(
                f"controlplane-{name}",
                [sys.executable, "-m", "controlplane", "--listen", "127.0.0.1:0"],
                self.work / f"cp-{name}.log",
                env={
                    "ASTRABOX_DATABASE_URL": self.dsn,
                    "ASTRABOX_BOOTSTRAP_KEY_FILE": str(key_file),
                    "ASTRABOX_IDLE_STOP_AFTER": str(self.args.idle_stop_after),
                    **CONTROLPLANE_ADMISSION_ENV,
                },
            )
            self.processes.append(process)
            address = (await asyncio.to_thread(process.wait_for_line, r"listening on (\S+)")).group(1)
            self.replicas[name] = (process, address)
        per_agent_rate = self.args.outputs_per_second / self.args.agents
        per_agent_active = max(1, self.args.active // self.args.agents)
        for index in range(self.args.agents):
            first, second = ("A", "B") if index < self.args.agents // 2 else ("B", "A")
            agent = Process(
                f"agent-{index + 1}",
                [
                    sys.executable,
                    str(ROOT / "bench" / "_load_agent.py"),
                    "--target",
                    self.target(first, second),
                    "--agent-id",
                    f"load-agent-{index + 1}",
                    "--outputs-per-second",
                    str(per_agent_rate),
                    "--active",
                    str(per_agent_active),
                ],
                self.work / f"agent-{index + 1}.log",
            )
            self.processes.append(agent)
            self.agents.append(agent)
        for agent in self.agents:
            await asyncio.to_thread(agent.wait_for_line, r'"welcomed"')

    def target(self, first: str, second: str) -> str:
        return "ipv4:" + ",".join(self.replicas[name][1] for name in (first, second))

    def stop(self) -> None:
        for process in reversed(self.processes):
            with contextlib.suppress(Exception):
                process.stop()


async def create_sessions(clients: list[AstraBoxClient], count: int, concurrency: int) -> tuple[list[str], float]:
    ids: list[str] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(count):
        queue.put_nowait(i)

    async def worker(client: AstraBoxClient) -> None:
        while not queue.empty():
            i = queue.get_nowait()
            session = await client.create_session(
                request_id=f"scale-{i}", labels={"bench": "scale", "batch": str(i // 1000)}
            )
            ids.append(session.session_id)

    start = time.perf_counter()
    async with asyncio.TaskGroup() as tasks:
        for n in range(concurrency):
            tasks.create_task(worker(clients[n % len(clients)]))
    return ids, time.perf_counter() - start


async def wait_ready(pool: asyncpg.Pool, count: int) -> None:
    async with asyncio.timeout(TIMEOUT):
        while await pool.fetchval("SELECT count(*) FROM events WHERE kind = 'runtime_ready'") < count:
            await asyncio.sleep(1)


async def watch(client: AstraBoxClient, watcher: Watcher, stop: asyncio.Event) -> None:
    async for event in client.watch(watcher.session_id, give_up_after=None):
        now = time.time()
        watcher.seqs.append(event.seq)
        watcher.received_at.append(now)
        produced = event.time.ToNanoseconds() / 1e9
        if produced > watcher.started_at + 1:  # live, not the catch-up of what came before the watch
            watcher.latencies_ms.append((now - produced) * 1000)
        if stop.is_set():
            return


async def timed_calls(client: AstraBoxClient, call, n: int) -> list[float]:  # type: ignore[no-untyped-def]
    values = []
    for _ in range(n):
        start = time.perf_counter()
        await call(client)
        values.append((time.perf_counter() - start) * 1000)
    return values


async def bench(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="astrabox-bench-scale-"))
    started = datetime.datetime.now(datetime.UTC)
    problems: list[str] = []
    async with embedded_postgres(args.fast_postgres) as dsn:
        stack = Stack(work, dsn, args)
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
        try:
            await stack.start()
            a_target, b_target = stack.target("A", "B"), stack.target("B", "A")
            clients = [AstraBoxClient.connect(t, api_key=stack.api_key) for t in (a_target, b_target)]
            cp_pids = {name: process.proc.pid for name, (process, _) in stack.replicas.items()}
            rss_before = {name: rss_mb(pid) for name, pid in cp_pids.items()}
            db_before = await pool.fetchval("SELECT pg_database_size(current_database())")

            # 1. create (the project's quotas raised, as an operator would for such a project)
            await clients[0].admin.set_quotas(live_sessions=args.sessions + 100, sessions_per_minute=1_000_000)
            create_start = time.perf_counter()
            ids, took = await create_sessions(clients, args.sessions, args.concurrency)
            await wait_ready(pool, args.sessions)
            ready_took = time.perf_counter() - create_start
            print(f"created {len(ids)} sessions in {took:.1f} s: {len(ids) / took:.0f}/s", file=sys.stderr)
            rss_after = {name: rss_mb(pid) for name, pid in cp_pids.items()}
            db_after = await pool.fetchval("SELECT pg_database_size(current_database())")
            placed = await pool.fetch(
                "SELECT agent_id, count(*) AS n FROM sessions GROUP BY agent_id ORDER BY agent_id"
            )

            # 2. steady: the active sessions are the latest started on each agent
            await asyncio.sleep(3)  # the agents' first outputs name the active sessions
            active = [
                str(r["session_id"])
                for r in await pool.fetch(
                    "SELECT DISTINCT session_id FROM events WHERE kind = 'engine_message' AND at > now() - interval '3 seconds'"
                )
            ]
            stop = asyncio.Event()
            watchers = [Watcher(s, "A" if i % 2 == 0 else "B") for i, s in enumerate(active[: args.watchers])]
            watch_tasks = [
                asyncio.create_task(watch(clients[0] if w.replica == "A" else clients[1], w, stop)) for w in watchers
            ]
            data_dir = await pool.fetchval("SELECT setting FROM pg_settings WHERE name = 'data_directory'")
            cpu_start = {p.name: cpu_seconds(p.proc.pid) for p in stack.processes}
            cpu_start["postgresql"] = postgres_cpu_seconds(data_dir)
            cpu_start["bench (clients, watchers)"] = cpu_seconds(os.getpid())
            committed_start = await pool.fetchval("SELECT count(*) FROM events WHERE kind = 'engine_message'")
            steady_start = time.perf_counter()
            listing: dict[str, list[float]] = defaultdict(list)
            some = itertools.cycle(ids[:: max(1, len(ids) // 200)])
            while time.perf_counter() - steady_start < args.steady:
                for name, client in (("A", clients[0]), ("B", clients[1])):
                    listing[f"ListSessions page of 100, via {name}"] += await timed_calls(
                        client, lambda c: c.list_sessions(page_size=100), 5
                    )
                    listing[f"ListSessions label batch=3, via {name}"] += await timed_calls(
                        client, lambda c: c.list_sessions(page_size=100, label_selector="batch=3"), 5
                    )
                    listing[f"GetSession, via {name}"] += await timed_calls(
                        client, lambda c: c.get_session(next(some)), 20
                    )
            steady_took = time.perf_counter() - steady_start
            committed = (
                await pool.fetchval("SELECT count(*) FROM events WHERE kind = 'engine_message'") - committed_start
            )
            cpu = {p.name: (cpu_seconds(p.proc.pid) - cpu_start[p.name]) / steady_took for p in stack.processes}
            cpu["postgresql"] = (postgres_cpu_seconds(data_dir) - cpu_start["postgresql"]) / steady_took
            me = "bench (clients, watchers)"
            cpu[me] = (cpu_seconds(os.getpid()) - cpu_start[me]) / steady_took
            stopped = await pool.fetchval("SELECT count(*) FROM events WHERE kind = 'runtime_stopped'")
            steady_latency = [ms for w in watchers for ms in w.latencies_ms]

            # 3. kill A
            killed_at = time.time()
            stack.replicas["A"][0].kill()
            agents_back = []
            for agent in stack.agents[: args.agents // 2]:
                await asyncio.to_thread(agent.wait_for_line, r'"stream_ended"', TIMEOUT)
            for agent in stack.agents[: args.agents // 2]:
                line = await asyncio.to_thread(agent.wait_for_line, r'\{"welcomed": ([0-9.]+), "n": 2\}', TIMEOUT)
                agents_back.append(float(line.group(1)) - killed_at)
            await asyncio.sleep(args.after_kill)
            watchers_back = [
                (next((t for t in w.received_at if t > killed_at), float("nan")) - killed_at)
                for w in watchers
                if w.replica == "A"
            ]

            # 4. check
            for agent in stack.agents:
                os.kill(agent.proc.pid, signal.SIGUSR1)
            produced: dict[str, int] = {}
            for agent in stack.agents:
                line = await asyncio.to_thread(agent.wait_for_line, r'^\{"final": ', TIMEOUT)
                produced.update(json.loads(line.string)["final"])
            lost_outputs = duplicated_outputs = 0
            for session_id in active:
                seqs = [
                    r["output_seq"]
                    for r in await pool.fetch(
                        "SELECT output_seq FROM events WHERE session_id = $1 AND output_seq IS NOT NULL", session_id
                    )
                ]
                duplicated_outputs += len(seqs) - len(set(seqs))
                lost_outputs += len(set(range(1, produced.get(session_id, 0) + 1)) - set(seqs))
            journal = {
                w.session_id: [
                    r["seq"]
                    for r in await pool.fetch("SELECT seq FROM events WHERE session_id = $1 ORDER BY seq", w.session_id)
                ]
                for w in watchers
            }
            async with asyncio.timeout(120):
                while any(not w.seqs or w.seqs[-1] < journal[w.session_id][-1] for w in watchers):
                    await asyncio.sleep(0.2)
            stop.set()
            for task in watch_tasks:
                task.cancel()
            lost_events = sum(len(set(journal[w.session_id]) - set(w.seqs)) for w in watchers)
            duplicated_events = sum(len(w.seqs) - len(set(w.seqs)) for w in watchers)
            nacks = sum(a.tail(10_000).count('"nack"') for a in stack.agents)

            print(f"\nscale benchmark, {started:%Y-%m-%d %H:%M} UTC, revision {revision()}")
            print(
                f"  {args.sessions} sessions, 2 replicas, {args.agents} agents, {len(active)} active, "
                f"{len(watchers)} watchers, {args.outputs_per_second:g} outputs/s offered"
            )
            print(f"  create: {len(ids) / took:.0f} sessions/s ({took:.1f} s); all READY after {ready_took:.1f} s")
            print("  placed: " + ", ".join(f"{r['agent_id']}={r['n']}" for r in placed))
            for name in cp_pids:
                per = (rss_after[name] - rss_before[name]) * 1024 / len(ids)
                print(
                    f"  replica {name} RSS: {rss_before[name]:.0f} -> {rss_after[name]:.0f} MB ({per:.1f} KiB/session)"
                )
            print(f"  database: {(db_after - db_before) / len(ids) / 1024:.1f} KiB/session")
            print(f"  idle-stopped during the steady phase: {stopped}")
            print(f"  committed engine outputs: {committed / steady_took:.0f}/s over {steady_took:.0f} s")
            print(figure("watch latency, event time -> received", steady_latency))
            for name, values in listing.items():
                print(figure(name, values))
            print(
                "  CPU share during the steady phase (1.0 = one core): "
                + ", ".join(f"{name} {share:.2f}" for name, share in sorted(cpu.items(), key=lambda x: -x[1]))
            )
            print(figure("replica A killed -> agent welcomed on B", [s * 1000 for s in agents_back]))
            print(figure("replica A killed -> watcher of A receives again", [s * 1000 for s in watchers_back]))
            print(f"  outputs lost {lost_outputs}, duplicated {duplicated_outputs} (journal of {len(active)} sessions)")
            print(f"  events lost {lost_events}, duplicated {duplicated_events} (at {len(watchers)} watchers)")
            print(f"  negative acknowledgements: {nacks}")
            if lost_outputs or duplicated_outputs or lost_events or duplicated_events:
                problems.append("lost or duplicated outputs or events")
            for client in clients:
                await client.close()
        finally:
            await pool.close()
            stack.stop()
    if problems:
        print("PROBLEMS: " + "; ".join(problems))
        print(f"logs kept in {work}")
        return 1
    shutil.rmtree(work, ignore_errors=True)
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--active", type=int, default=200)
    parser.add_argument("--watchers", type=int, default=200)
    parser.add_argument("--outputs-per-second", type=float, default=1000.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--idle-stop-after", type=float, default=30.0)
    parser.add_argument("--steady", type=float, default=30.0)
    parser.add_argument("--after-kill", type=float, default=15.0)
    parser.add_argument("--fast-postgres", action="store_true")
    sys.exit(asyncio.run(bench(parser.parse_args())))


if __name__ == "__main__":
    main()
