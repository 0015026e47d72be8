"""What gVisor costs a docker sandbox: runc against runsc (`--sandbox-runtime`), measured in the same run.

    python bench/isolation.py [--rounds 10]

Drives the docker driver directly (no control plane), alternating the runtimes round by round so that
both see the same machine. Per round and runtime:
- ready: `create` (container made and started) until a first `true` has run through a launcher
  (`docker exec`), the part of a session's start the runtime changes;
- exec: one more `true` through a launcher, a program's start in a running sandbox;
- stat loop: python3 calling os.stat and open/close 20,000 times each (system calls, little else);
- find /usr: a walk of the image's /usr (directory reads and stats);
- compute: python3 summing squares, no system calls (the runtime's cost should vanish here).
Prints p50/p90/max per figure and the ratio of the medians runsc/runc; asserts nothing. Needs Docker,
the sandbox image and runsc registered with dockerd (`source scripts/test && ensure_runsc`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, revision, summary_row

sys.path.insert(0, str(ROOT / "clients" / "python"))
from dataplane_agent.sandboxes.base import AGENT_LABEL, SESSION_LABEL, Sandbox, SandboxSpec
from dataplane_agent.sandboxes.docker import DockerSandboxDriver
from dataplane_agent.sandboxes.isolation import RUNC, RUNSC

STAT_LOOP = (
    'python3 -c \'import os\nfor _ in range(20000):\n    os.stat("/usr/bin/python3")\n'
    '    os.close(os.open("/etc/hostname", os.O_RDONLY))\''
)
COMMANDS = {
    "stat loop (20k stat + open/close)": STAT_LOOP,
    "find /usr": "find /usr -xdev > /dev/null",
    "compute (no syscalls)": "python3 -c 'sum(i * i for i in range(3_000_000))'",
}


async def run(driver: DockerSandboxDriver, sandbox: Sandbox, script: str) -> float:
    """Milliseconds `script` takes through a launcher (the `docker exec` included)."""
    launcher = await driver.launcher(sandbox, ["/bin/sh", "-c"], {})
    started = time.perf_counter()
    done = await asyncio.to_thread(subprocess.run, [str(launcher), script], capture_output=True, timeout=300)
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0:
        raise SystemExit(f"{script!r} failed: {done.stderr.decode(errors='replace')[-500:]}")
    return elapsed


async def round_of(driver: DockerSandboxDriver, name: str, figures: dict[str, list[float]], counted: bool) -> None:
    spec = SandboxSpec(session_id=name, agent_id="bench", labels={SESSION_LABEL: name, AGENT_LABEL: "bench"})
    started = time.perf_counter()
    sandbox = await driver.create(spec)
    await run(driver, sandbox, "true")
    ready = (time.perf_counter() - started) * 1000
    try:
        results = {"ready (create + first exec)": ready, "exec true": await run(driver, sandbox, "true")}
        for label, script in COMMANDS.items():
            results[label] = await run(driver, sandbox, script)
    finally:
        await driver.destroy(sandbox)
    if counted:
        for label, ms in results.items():
            figures.setdefault(label, []).append(ms)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="astrabox-bench-isolation-"))
    installation = f"bench-{os.getpid()}"
    drivers = {
        runtime: DockerSandboxDriver(work / runtime, installation=installation, agent_id="bench", runtime=runtime)
        for runtime in (RUNC, RUNSC)
    }
    for driver in drivers.values():
        await driver.probe()
    figures: dict[str, dict[str, list[float]]] = {runtime: {} for runtime in drivers}
    try:
        for round_ in range(args.rounds + 1):  # the first round warms up and is not counted
            order = (RUNC, RUNSC) if round_ % 2 == 0 else (RUNSC, RUNC)
            for runtime in order:
                await round_of(drivers[runtime], f"{runtime}-{round_}", figures[runtime], round_ > 0)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"isolation  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  {revision()}  rounds={args.rounds}")
    for label in figures[RUNC]:
        for runtime in (RUNC, RUNSC):
            print(summary_row(f"{label} [{runtime}]", figures[runtime][label]))
        ratio = statistics.median(figures[RUNSC][label]) / statistics.median(figures[RUNC][label])
        print(f"  {'':<48} runsc/runc (medians) = {ratio:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
