"""Session latency on a real stack: CreateSession -> READY, and one scripted turn.

Brings up, in a temp dir, an embedded PostgreSQL, the control plane and one
data-plane agent (separate processes, as deployed; the agent uses the local
bubblewrap driver and serves the offline model), then, one session at a time:

  ready  CreateSession call -> RUNTIME_READY event seen by a client watch
  turn   SendMessage call   -> TURN_COMPLETED event seen by a client watch
         (the offline model's default script: one Bash call, then a text reply)

Interleaved with each session, in this process, the same work without the
platform, as baselines:

  bwrap      the driver's launcher running /bin/true in a sandbox (same flags)
  spawn      /bin/true spawned directly (the process-start floor)
  cli start  sandbox create + ClaudeCodeAdapter.start (SDK connect to the CLI)
  cli turn   the same turn through ClaudeCodeSession.run_turn, to the ResultMessage

Prints p50/p90/max per figure and the platform's medians against the baselines'.
Timings are printed, never asserted: two shared cores are noisy.
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

from _common import (
    CONTROLPLANE_ADMISSION_ENV,
    Process,
    api_key_file,
    embedded_postgres,
    offline_agent,
    percentile,
    revision,
    summary_row,
)

from astrabox.client import AstraBoxClient
from dataplane_agent.engines.base import EngineConfig
from dataplane_agent.engines.claude_code import ClaudeCodeAdapter
from dataplane_agent.offline_model import OfflineModel
from dataplane_agent.routes.model import ModelRoute, Upstream
from dataplane_agent.sandboxes.base import SandboxSpec
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from serverkit import logs

PROMPT = "Please create hello.txt"  # no `run:`/`steps:`: the offline model's default script
PERMISSION_MODE = "bypassPermissions"  # what the control plane asks for by default
TIMEOUT = 180.0
ORDER = (
    "platform: CreateSession -> READY",
    "  of which the CreateSession RPC",
    "  of which sandbox create (agent)",
    "  of which journal -> watch (READY)",
    "platform: SendMessage -> TURN_COMPLETED",
    "  of which journal -> watch (TURN_COMPLETED)",
    "baseline: cli start (sandbox + SDK connect)",
    "baseline: cli turn (run_turn -> ResultMessage)",
    "baseline: bwrap /bin/true (driver launcher)",
    "baseline: spawn /bin/true",
)


def ms_since(start: float) -> float:
    return (time.perf_counter() - start) * 1000


async def next_event(watch, kinds: tuple[str, ...], figures_delivery: list[float]):
    """The first event of one of `kinds` on an open watch, and when it arrived; records how long
    after its journal commit the watch delivered it."""
    async with asyncio.timeout(TIMEOUT):
        async for event in watch:
            kind = event.WhichOneof("payload")
            if kind in ("runtime_failed", "turn_failed"):
                raise RuntimeError(f"{kind}: {event}")
            if kind in kinds:
                figures_delivery.append(time.time_ns() / 1e6 - event.time.ToNanoseconds() / 1e6)
                return event, time.perf_counter()
    raise RuntimeError("watch ended")


async def platform_session(client: AstraBoxClient, sandboxes: Path, index: int, figures: dict) -> None:
    start = time.perf_counter()
    session = await client.create_session(request_id=f"bench-{index}")
    figures["  of which the CreateSession RPC"].append(ms_since(start))
    watch = client.watch(session.session_id)
    ready, at = await next_event(watch, ("runtime_ready",), figures["  of which journal -> watch (READY)"])
    figures["platform: CreateSession -> READY"].append((at - start) * 1000)
    figures["  of which sandbox create (agent)"].append(ready.runtime_ready.sandbox_ms)

    start = time.perf_counter()
    accepted = await client.send_message(session.session_id, PROMPT, client_message_id=f"bench-{index}-m1")
    done, at = await next_event(watch, ("turn_completed",), figures["  of which journal -> watch (TURN_COMPLETED)"])
    assert done.turn_id == accepted.turn_id and not done.turn_completed.is_error, done
    figures["platform: SendMessage -> TURN_COMPLETED"].append((at - start) * 1000)
    await watch.aclose()

    # Untimed: delete the session and wait until the agent has removed its sandbox,
    # so its CLI is not still shutting down during the next measurement.
    await client.delete_session(session.session_id)
    directory = sandboxes / f"local-{session.session_id}"
    async with asyncio.timeout(60):
        while directory.exists():
            await asyncio.sleep(0.05)


async def run_true(argv: list[str]) -> float:
    start = time.perf_counter()
    process = await asyncio.create_subprocess_exec(*argv)
    if await process.wait() != 0:
        raise RuntimeError(f"{argv} exited with {process.returncode}")
    return ms_since(start)


async def bare_baselines(
    driver: LocalSandboxDriver, adapter: ClaudeCodeAdapter, route: ModelRoute, index: int, spawns: int, figures: dict
) -> None:
    spec = SandboxSpec(session_id=f"baseline-{index}", agent_id="bench", model_socket=route.socket)
    start = time.perf_counter()
    sandbox = await driver.create(spec)
    config = EngineConfig(permission_mode=PERMISSION_MODE, env=route.env(spec.session_id))
    engine = await adapter.start(sandbox, driver, config)
    figures["baseline: cli start (sandbox + SDK connect)"].append(ms_since(start))

    start = time.perf_counter()
    async with asyncio.timeout(TIMEOUT):
        outputs = [output async for output in engine.run_turn(PROMPT, PERMISSION_MODE)]
    assert outputs[-1].ends_turn and not outputs[-1].payload.get("is_error"), outputs[-1]
    figures["baseline: cli turn (run_turn -> ResultMessage)"].append(ms_since(start))
    await engine.close()

    launcher = await driver.launcher(sandbox, ["/bin/true"], {})
    for _ in range(spawns):
        figures["baseline: bwrap /bin/true (driver launcher)"].append(await run_true([str(launcher)]))
        figures["baseline: spawn /bin/true"].append(await run_true(["/bin/true"]))
    await driver.destroy(sandbox)


async def bench(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="astrabox-bench-latency-"))
    processes: list[Process] = []
    model = OfflineModel()
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
            agent = offline_agent(address, work)
            processes.append(agent)
            await asyncio.to_thread(agent.wait_for_line, r"relay_connected")

            driver = LocalSandboxDriver(work / "baseline-sandboxes")
            await driver.probe()
            adapter = ClaudeCodeAdapter()
            await model.start("127.0.0.1", 0)
            route = ModelRoute(work / "model-route", Upstream(model.base_url))
            await route.start()
            figures: dict[str, list[float]] = defaultdict(list)
            async with AstraBoxClient.connect(address, api_key=api_key) as client:
                for index in range(args.warmup + args.sessions):
                    measured = index >= args.warmup
                    target = figures if measured else defaultdict(list)
                    await bare_baselines(driver, adapter, route, index, args.spawns, target)
                    await platform_session(client, work / "agent" / "sandboxes", index, target)
                    label = "session" if measured else "warm-up"
                    print(
                        f"{label} {index + 1 - args.warmup * measured}: ready "
                        f"{target['platform: CreateSession -> READY'][-1]:.0f} ms, turn "
                        f"{target['platform: SendMessage -> TURN_COMPLETED'][-1]:.0f} ms",
                        file=sys.stderr,
                    )
            report(figures, args)
            await route.stop()
    finally:
        await model.stop()
        for process in reversed(processes):
            process.stop()
        if args.keep:
            print(f"logs and state kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def report(figures: dict[str, list[float]], args: argparse.Namespace) -> None:
    now, postgres = datetime.datetime.now().astimezone(), "fast (fsync off)" if args.fast_postgres else "durable"
    print(
        f"session_latency  {now:%Y-%m-%d %H:%M %Z}  {revision()}  sessions={args.sessions} warmup={args.warmup}"
        f" postgres={postgres}"
    )
    for name in ORDER:
        print(summary_row(name, figures[name]))
    med = {name: percentile(values, 50) for name, values in figures.items()}
    ready, turn = med["platform: CreateSession -> READY"], med["platform: SendMessage -> TURN_COMPLETED"]
    cli_start = med["baseline: cli start (sandbox + SDK connect)"]
    cli_turn = med["baseline: cli turn (run_turn -> ResultMessage)"]
    bwrap, spawn = med["baseline: bwrap /bin/true (driver launcher)"], med["baseline: spawn /bin/true"]
    print("ratios of medians:")
    print(f"  ready / cli start   = {ready / cli_start:5.2f}   (platform adds {ready - cli_start:+.0f} ms)")
    print(f"  turn  / cli turn    = {turn / cli_turn:5.2f}   (platform adds {turn - cli_turn:+.0f} ms)")
    print(f"  ready / bwrap       = {ready / bwrap:5.1f}   (bwrap is {100 * bwrap / ready:.1f}% of ready)")
    print(f"  bwrap / spawn       = {bwrap / spawn:5.2f}   (namespaces add {bwrap - spawn:+.1f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=10, help="measured sessions (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured rounds first (default %(default)s)")
    parser.add_argument("--spawns", type=int, default=5, help="bwrap/spawn samples per round (default %(default)s)")
    parser.add_argument("--fast-postgres", action="store_true", help="PostgreSQL with fsync off (default: durable)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir with the processes' logs")
    args = parser.parse_args()
    logs.configure("json", "warning")  # this process's own logs: warnings only, to stderr
    asyncio.run(bench(args))


if __name__ == "__main__":
    main()
