"""Session ready time per sandbox configuration: warm-pool docker, cold docker, cold local.

One embedded PostgreSQL and control plane; per configuration its own agent (own state
dir, offline model), started, measured and stopped: pool hit (--driver docker
--warm-pool 4, the pool full before each create), cold docker (--driver docker), cold
local (--driver local). Ready: CreateSession call -> RUNTIME_READY on a client watch, one
session at a time, each deleted (its sandbox gone) before the next. Raw costs, next to
every session: bare docker (`docker create IMAGE sleep infinity` + `docker start`; the
`docker rm -f` untimed) and bare bwrap (`bwrap --ro-bind / / --unshare-pid /bin/true`).
Prints p50/p90/max and ratios of medians; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import asyncpg
from _common import (
    AGENT_ADMISSION_ENV,
    CONTROLPLANE_ADMISSION_ENV,
    Process,
    api_key_file,
    embedded_postgres,
    percentile,
    revision,
    summary_row,
)

from astrabox.client import AstraBoxClient
from serverkit import logs

TIMEOUT, POOL = 180.0, 4
CONFIGS = {  # name -> (agent flags, docker installation id)
    "pool hit (docker, warm pool 4)": (["--driver", "docker", "--warm-pool", str(POOL)], "benchpool"),
    "cold docker": (["--driver", "docker"], "benchcold"),
    "cold local (bwrap)": (["--driver", "local"], ""),
}
BARE_DOCKER, BARE_BWRAP = "bare: docker create + start", "bare: bwrap --unshare-pid /bin/true"


async def run(*argv: str) -> str:
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    out, _ = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"{argv} exited with {process.returncode}")
    return out.decode().strip()


async def bare_docker(image: str) -> float:
    start = time.perf_counter()
    container = await run("docker", "create", image, "sleep", "infinity")
    await run("docker", "start", container)
    elapsed = (time.perf_counter() - start) * 1000
    await run("docker", "rm", "-f", container)
    return elapsed


async def bare_bwrap() -> float:
    start = time.perf_counter()
    await run("bwrap", "--ro-bind", "/", "/", "--unshare-pid", "/bin/true")
    return (time.perf_counter() - start) * 1000


async def wait_pool_full(agent: Process, since: int) -> None:
    """Until the agent logs its pool at POOL ready sandboxes after log line `since`."""
    async with asyncio.timeout(TIMEOUT):
        while not any("pool_sandbox_ready" in line and f'"ready": {POOL}' in line for line in agent._lines[since:]):
            if agent.proc.poll() is not None:
                raise RuntimeError(f"agent exited; log: {agent.log_path}\n{agent.tail()}")
            await asyncio.sleep(0.02)


async def sandbox_gone(sandboxes: Path, session_id: str, container: str) -> None:
    async with asyncio.timeout(60):
        while sandboxes.exists() and any(session_id in p.name for p in sandboxes.iterdir()):
            await asyncio.sleep(0.05)
        while container and await run("docker", "ps", "-aq", "--filter", f"name=^{container}$"):
            await asyncio.sleep(0.05)


async def one_session(
    client: AstraBoxClient, agent: Process, tag: str, state: Path, installation: str, figures: dict, name: str
) -> None:
    mark = len(agent._lines)
    start = time.perf_counter()
    session = await client.create_session(request_id=tag)
    watch = client.watch(session.session_id)
    async with asyncio.timeout(TIMEOUT):
        async for event in watch:
            kind = event.WhichOneof("payload")
            if kind == "runtime_failed":
                raise RuntimeError(f"{kind}: {event}")
            elif kind == "runtime_ready":
                figures[name].append((time.perf_counter() - start) * 1000)
                figures[f"  of which sandbox create (agent)|{name}"].append(event.runtime_ready.sandbox_ms)
                break
    await watch.aclose()
    if installation == "benchpool":
        hit = any("pool_claimed" in line and session.session_id in line for line in agent._lines[mark:])
        figures[f"hits|{name}"].append(float(hit))
    await client.delete_session(session.session_id)
    container = f"astrabox-{installation}-{session.session_id}" if installation else ""
    await sandbox_gone(state / "sandboxes", session.session_id, container)


async def sweep(installation: str) -> None:
    if ids := (await run("docker", "ps", "-aq", "--filter", f"label=astrabox.installation={installation}")).split():
        await run("docker", "rm", "-f", *ids)


async def expire_lease(dsn: str, agent_id: str) -> None:
    connection = await asyncpg.connect(dsn)
    await connection.execute("UPDATE agents SET lease_expires_at = now() WHERE agent_id = $1", agent_id)
    await connection.close()


async def bench(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="astrabox-bench-ready-"))
    processes: list[Process] = []
    figures: dict[str, list[float]] = defaultdict(list)
    try:
        async with embedded_postgres(args.fast_postgres) as dsn:
            key_file, api_key = api_key_file(work)
            controlplane = Process(
                "controlplane",
                [sys.executable, "-m", "controlplane", "--listen", "127.0.0.1:0"],
                work / "controlplane.log",
                env={
                    "ASTRABOX_DATABASE_URL": dsn,
                    "ASTRABOX_BOOTSTRAP_KEY_FILE": str(key_file),
                    **CONTROLPLANE_ADMISSION_ENV,
                },
            )
            processes.append(controlplane)
            address = (await asyncio.to_thread(controlplane.wait_for_line, r"listening on (\S+)")).group(1)
            async with AstraBoxClient.connect(address, api_key=api_key) as client:
                for number, (name, (flags, installation)) in enumerate(CONFIGS.items()):
                    if args.only and not any(word in name for word in args.only):
                        continue
                    state = work / f"agent-{number}"
                    extra = ["--installation", installation, "--image", args.image] if installation else []
                    argv = [
                        sys.executable,
                        "-m",
                        "dataplane_agent",
                        "--controlplane",
                        address,
                        "--state-dir",
                        str(state),
                        "--agent-id",
                        f"bench-agent-{number}",
                        "--capacity",
                        "4",
                        "--log-format",
                        "json",
                        "--log-level",
                        "debug",
                        *flags,
                        *extra,
                    ]
                    agent = Process(
                        f"agent-{number}",
                        argv,
                        work / f"agent-{number}.log",  # the offline model:
                        env={"ANTHROPIC_API_KEY": "", "ASTRABOX_MODEL_BASE_URL": "", **AGENT_ADMISSION_ENV},
                    )
                    processes.append(agent)
                    try:
                        await asyncio.to_thread(agent.wait_for_line, r"relay_connected")
                        since = 0  # the pool refill to wait for is logged after the previous create
                        for index in range(args.warmup + args.sessions):
                            target = figures if index >= args.warmup else defaultdict(list)
                            target[BARE_DOCKER].append(await bare_docker(args.image))
                            target[BARE_BWRAP].append(await bare_bwrap())
                            if "--warm-pool" in flags:
                                await wait_pool_full(agent, since)
                            since = len(agent._lines)
                            await one_session(
                                client, agent, f"bench-{number}-{index}", state, installation, target, name
                            )
                            print(f"{name} {index + 1}: ready {target[name][-1]:.0f} ms", file=sys.stderr)
                    finally:
                        agent.stop()
                        processes.remove(agent)
                        # Else the next configuration's sessions go to it until its lease's TTL (15 s).
                        await expire_lease(dsn, f"bench-agent-{number}")
                        if installation:
                            await sweep(installation)
            report(figures, args)
    finally:
        for process in reversed(processes):
            process.stop()
        for installation in ("benchpool", "benchcold"):
            await sweep(installation)
        if args.keep:
            print(f"logs and state kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def report(figures: dict[str, list[float]], args: argparse.Namespace) -> None:
    now, postgres = datetime.datetime.now().astimezone(), "fast (fsync off)" if args.fast_postgres else "durable"
    print(
        f"sandbox_ready  {now:%Y-%m-%d %H:%M %Z}  {revision()}  sessions={args.sessions} warmup={args.warmup}"
        f" postgres={postgres}"
    )
    print("CreateSession -> RUNTIME_READY on a client watch:")
    for name in CONFIGS:
        if not figures[name]:
            continue
        print(summary_row(name, figures[name]))
        print(summary_row("  of which sandbox create (agent)", figures[f"  of which sandbox create (agent)|{name}"]))
    print(summary_row(BARE_DOCKER, figures[BARE_DOCKER]))
    print(summary_row(BARE_BWRAP, figures[BARE_BWRAP]))
    print(
        f"  pool hits: {sum(hits := figures[f'hits|{next(iter(CONFIGS))}']):.0f} of {len(hits)} claimed a warm sandbox"
    )
    med = {name: percentile(values, 50) for name, values in figures.items() if values}
    pool, docker, local = (med.get(name, float("nan")) for name in CONFIGS)
    step = {name: med.get(f"  of which sandbox create (agent)|{name}", float("nan")) for name in CONFIGS}
    docker_step, local_step = step["cold docker"], step["cold local (bwrap)"]
    print("ratios of medians (the sandbox step is what the bare commands do; ready adds the engine's start):")
    print(
        f"  cold docker sandbox step / bare docker = {docker_step / med[BARE_DOCKER]:6.2f}"
        f"   ({docker_step - med[BARE_DOCKER]:+.0f} ms; target <= 1.5)"
    )
    print(
        f"  cold docker ready / bare docker        = {docker / med[BARE_DOCKER]:6.2f}   ({docker - med[BARE_DOCKER]:+.0f} ms)"
    )
    print(
        f"  pool hit ready p50                     = {pool:6.1f} ms (target < 50 ms: {'met' if pool < 50 else 'NOT met'})"
    )
    print(
        f"  cold local sandbox step / bare bwrap   = {local_step / med[BARE_BWRAP]:6.2f}"
        f"   ({local_step - med[BARE_BWRAP]:+.0f} ms)"
    )
    print(
        f"  cold local ready / bare bwrap          = {local / med[BARE_BWRAP]:6.1f}   ({local - med[BARE_BWRAP]:+.0f} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sessions", type=int, default=10, help="measured sessions per configuration (default %(default)s)"
    )
    parser.add_argument(
        "--warmup", type=int, default=1, help="unmeasured sessions first, per configuration (default %(default)s)"
    )
    parser.add_argument("--image", default="astrabox/sandbox:latest", help="sandbox image (default %(default)s)")
    parser.add_argument("--fast-postgres", action="store_true", help="PostgreSQL with fsync off (default: durable)")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="WORD",
        help="only the configurations whose name has WORD (pool, cold docker, local); repeatable",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir with the processes' logs")
    args = parser.parse_args()
    logs.configure("json", "warning")
    asyncio.run(bench(args))


if __name__ == "__main__":
    main()
