"""What the workspace disk limit costs: a local sandbox made and destroyed with an ext4 image of its
own against one with a plain directory, and measuring a workspace (the measured limit's `du`, run
as the sandbox's user with one capability) against the same `du` run plainly by root, in one run.

    python bench/workspace_disk.py [--rounds 20] [--files 2000]

Needs root and loop devices for the image figures (it says so otherwise). Drives the local driver
directly (no control plane, no engine): the figures are the sandbox step of a session's start.
"""

from __future__ import annotations

import argparse
import asyncio
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
from dataplane_agent.sandboxes.base import SandboxSpec
from dataplane_agent.sandboxes.disk import WorkspaceDisk
from dataplane_agent.sandboxes.disk_usage import DiskUsage
from dataplane_agent.sandboxes.host_user import DEFAULT_HOST_UID
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from serverkit import logs


async def make_and_destroy(root: Path, disk: WorkspaceDisk | None, rounds: int) -> tuple[list[float], list[float]]:
    driver = LocalSandboxDriver(root, disk=disk)
    await driver.probe()
    made, destroyed = [], []
    for i in range(rounds):
        spec = SandboxSpec(session_id=f"bench-{'img' if disk else 'dir'}-{i}", agent_id="bench")
        began = time.perf_counter()
        sandbox = await driver.create(spec)
        made.append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        await driver.destroy(sandbox)
        destroyed.append((time.perf_counter() - began) * 1000)
    return made, destroyed


async def measuring(workspace: Path, rounds: int) -> tuple[list[float], list[float]]:
    usage = DiskUsage(DEFAULT_HOST_UID)
    confined, plain = [], []
    for _ in range(rounds):
        began = time.perf_counter()
        await usage.used_bytes(workspace)
        confined.append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        subprocess.run(["du", "-s", "-x", "-B1", str(workspace)], capture_output=True, check=True)
        plain.append((time.perf_counter() - began) * 1000)
    return confined, plain


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--files", type=int, default=2000, help="files in the measured workspace")
    args = parser.parse_args()
    logs.configure("json", "warning")
    print(f"workspace disk limit, {args.rounds} rounds; revision {revision()}, {time.strftime('%Y-%m-%d %H:%M')}")
    scratch = Path(tempfile.mkdtemp(prefix="astrabox-bench-disk-"))
    try:
        figures: dict[str, list[float]] = {}
        disk = WorkspaceDisk(10240)
        if why := disk.unavailable():
            print(f"  (no image figures: {why})")
        else:
            figures["create, 10 GiB image"], figures["destroy, 10 GiB image"] = await make_and_destroy(
                scratch / "img", disk, args.rounds
            )
        (
            figures["create, plain directory (baseline)"],
            figures["destroy, plain directory (baseline)"],
        ) = await make_and_destroy(scratch / "dir", None, args.rounds)
        tree = scratch / "tree"
        for i in range(args.files):
            (tree / f"d{i % 50}").mkdir(parents=True, exist_ok=True)
            (tree / f"d{i % 50}" / f"f{i}").write_bytes(b"x" * 4096)
        shutil.chown(tree, DEFAULT_HOST_UID, DEFAULT_HOST_UID)
        (
            figures[f"measure {args.files} files, as the sandbox's user"],
            figures[f"measure {args.files} files, root du (baseline)"],
        ) = await measuring(tree, args.rounds)
        for name, values in figures.items():
            print(summary_row(name, values))
        for step in ("create", "destroy"):
            image = figures.get(f"{step}, 10 GiB image")
            if image:
                base = figures[f"{step}, plain directory (baseline)"]
                print(f"  {step}: image / directory p50 = {statistics.median(image) / statistics.median(base):.1f}x")
        confined = figures[f"measure {args.files} files, as the sandbox's user"]
        plain = figures[f"measure {args.files} files, root du (baseline)"]
        print(f"  measure: confined / plain p50 = {statistics.median(confined) / statistics.median(plain):.1f}x")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
