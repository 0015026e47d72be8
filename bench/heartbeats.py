"""Heartbeats under load: how long a heartbeat takes to renew its agent's lease while clients
watch and a CPU hog competes, and whether any lease lapses.

A temp dir with an embedded PostgreSQL; the control plane in a process of its own
(`controlplane.server.serve` with a --lease-ttl lease and --heartbeat-interval heartbeats; run
here rather than as `python -m controlplane` so an older revision, without those flags, can be
measured the same way); as its agent `tests.support.runner_stub` (a Runner client in its own
process: RuntimeStarted for each session, engine messages at --outputs-per-second, heartbeats
timed from send_time to the HeartbeatAck that answers them, i.e. after the renewal committed);
--sessions sessions. Then, phase after phase, each --phase seconds:

  baseline           nothing else runs
  watchers           --watchers clients watch the sessions (AstraBoxClient.watch, in a process
                     of their own), each engine message waking watchers / sessions of them
  watchers + hog     the same, with one busy-looping process per core

Prints, per phase, how many heartbeats were answered (by the end of the run) of those sent, the
p50/p99/max of their round trips and their ratio to the baseline's (medians of the same run);
then the RUNTIME_LOST events journaled, and whether the agent's stream ended. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
from _common import CONTROLPLANE_ADMISSION, ROOT, Process, api_key_file, embedded_postgres, percentile, revision

from astrabox.client import AstraBoxClient


def serve_controlplane(args: argparse.Namespace) -> None:
    """--role controlplane: one control plane until killed."""
    from datetime import timedelta

    from controlplane.server import serve
    from controlplane.settings import ControlPlaneSettings
    from serverkit import logs

    logs.configure()

    async def run() -> None:
        settings = ControlPlaneSettings(
            database_url=os.environ["ASTRABOX_DATABASE_URL"],
            listen="127.0.0.1:0",
            bootstrap_key_file=os.environ["ASTRABOX_BOOTSTRAP_KEY_FILE"],
            lease_ttl=timedelta(seconds=args.lease_ttl),
            heartbeat_interval=timedelta(seconds=args.heartbeat_interval),
            **CONTROLPLANE_ADMISSION,
        )
        async with serve(settings) as running:
            print(f"controlplane listening on {running.address}", flush=True)
            await asyncio.Event().wait()

    asyncio.run(run())


def watch_sessions(args: argparse.Namespace) -> None:
    """--role watchers: --watchers watches spread over the sessions until killed."""

    async def run() -> None:
        # Watching as the SDK does (AstraBoxClient.watch resumes a stream that fails or is cancelled).
        key = os.environ["BENCH_API_KEY"]
        clients = [AstraBoxClient.connect(args.target, api_key=key) for _ in range(max(1, args.watchers // 100))]
        sessions = args.session_ids.split(",")
        started = [False] * args.watchers

        async def watch(i: int) -> None:
            async for _ in clients[i % len(clients)].watch(sessions[i % len(sessions)]):
                if not started[i]:
                    started[i] = True
                    if all(started):
                        print("watchers all watching", flush=True)

        await asyncio.gather(*(watch(i) for i in range(args.watchers)))

    asyncio.run(run())


def round_trips(log: Path, start: float, end: float) -> tuple[list[float], int]:
    """The round trips (ms) the agent logged for heartbeats sent in [start, end), and how many it sent."""
    found, sent = [], 0
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if "heartbeat_sent" in record:
                sent += start <= record["heartbeat_sent"] < end
            elif start <= record["sent"] < end:
                found.append(record["heartbeat_rtt_ms"])
    return found, sent


def row(name: str, values: list[float], sent: int) -> str:
    answered = f"answered {len(values)} of {sent}"
    if not values:
        return f"  {name:<22} {answered}"
    return (
        f"  {name:<22} {answered:<18} p50={percentile(values, 50):8.1f} ms  p99={percentile(values, 99):8.1f} ms"
        f"  max={max(values):8.1f} ms"
    )


async def bench(args: argparse.Namespace, work: Path) -> None:
    key_path, key = api_key_file(work)
    me = [sys.executable, str(Path(__file__).resolve())]
    async with embedded_postgres(fast=args.fast_postgres) as dsn:
        env = {"ASTRABOX_DATABASE_URL": dsn, "ASTRABOX_BOOTSTRAP_KEY_FILE": str(key_path)}
        ttl = ["--lease-ttl", str(args.lease_ttl), "--heartbeat-interval", str(args.heartbeat_interval)]
        controlplane = Process("controlplane", [*me, "--role", "controlplane", *ttl], work / "cp.log", env=env)
        processes = [controlplane]
        hogs: list[subprocess.Popen[bytes]] = []
        try:
            target = controlplane.wait_for_line(r"controlplane listening on (\S+)").group(1)
            agent_argv = [sys.executable, "-m", "tests.support.runner_stub", "--target", target,
                          "--outputs-per-second", str(args.outputs_per_second)]  # fmt: skip
            agent = Process("agent", agent_argv, work / "agent.log")
            processes.append(agent)
            agent.wait_for_line("runner_stub connected")
            async with AstraBoxClient.connect(target, api_key=key) as client:
                sessions = [(await client.create_session()).session_id for _ in range(args.sessions)]
                for session_id in sessions:
                    await client.wait_for_state(session_id, ["READY"])
            phases: list[tuple[str, float, float]] = []

            async def phase(name: str) -> None:
                start = time.time()
                await asyncio.sleep(args.phase)
                phases.append((name, start, time.time()))

            await phase("baseline")
            watchers = Process(
                "watchers",
                [*me, "--role", "watchers", "--target", target, "--watchers", str(args.watchers),
                 "--session-ids", ",".join(sessions)],
                work / "watchers.log",
                env={"BENCH_API_KEY": key},
            )  # fmt: skip
            processes.append(watchers)
            await asyncio.to_thread(watchers.wait_for_line, "watchers all watching", 300)
            await phase(f"{args.watchers} watchers")
            hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
            await phase(f"{args.watchers} watchers + hog")
            for hog in hogs:
                hog.kill()
            await asyncio.sleep(2 * args.lease_ttl)  # heartbeats still queued are answered; a lapse is swept
            conn = await asyncpg.connect(dsn)
            try:
                lost = await conn.fetchval("SELECT count(*) FROM events WHERE kind = 'runtime_lost'")
            finally:
                await conn.close()
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
            for process in reversed(processes):
                process.stop()

    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(
        f"heartbeats  {stamp}  {revision()}  lease={args.lease_ttl:g}s heartbeat={args.heartbeat_interval:g}s "
        f"sessions={args.sessions} outputs/s={args.outputs_per_second:g} phase={args.phase:g}s "
        f"cores={os.cpu_count()} load={os.getloadavg()[0]:.1f}"
    )
    print("heartbeat -> HeartbeatAck (the lease renewed), by when the heartbeat was sent:")
    medians = {}
    for name, start, end in phases:
        values, sent = round_trips(work / "agent.log", start, end)
        medians[name] = percentile(values, 50) if values else float("nan")
        print(row(name, values, sent))
    baseline = medians["baseline"]
    print("ratios of medians to the baseline:")
    for name, median in medians.items():
        if name != "baseline":
            print(f"  {name:<22} {median / baseline:8.2f}")
    ended = [line.strip() for line in (work / "agent.log").read_text().splitlines() if "stream ended" in line]
    print(f"RUNTIME_LOST events: {lost}; agent stream: {ended[0] if ended else 'never ended'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--role", choices=["bench", "controlplane", "watchers"], default="bench", help=argparse.SUPPRESS
    )
    parser.add_argument("--target", help=argparse.SUPPRESS)
    parser.add_argument("--session-ids", help=argparse.SUPPRESS)
    parser.add_argument("--watchers", type=int, default=1000)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--outputs-per-second", type=float, default=5.0, help="engine messages, over all sessions")
    parser.add_argument("--phase", type=float, default=30.0, help="seconds per phase")
    parser.add_argument("--lease-ttl", type=float, default=3.0)
    parser.add_argument("--heartbeat-interval", type=float, default=1.0)
    parser.add_argument("--fast-postgres", action="store_true", help="fsync off")
    args = parser.parse_args()
    if args.role == "controlplane":
        serve_controlplane(args)
    elif args.role == "watchers":
        watch_sessions(args)
    else:
        work = Path(tempfile.mkdtemp(prefix="astrabox-bench-heartbeats-"))
        asyncio.run(bench(args, work))
        shutil.rmtree(work, ignore_errors=True)  # kept, with the processes' logs, when the run failed


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
