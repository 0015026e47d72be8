"""What a session's memory costs the agent: putting a full store into the sandbox's home before the
engine starts, and reading it back when a turn ends (no change, one file changed, every file
changed) — through `ConfinedRoot`, which walks one directory descriptor at a time and follows no
link — against the same work done naively on the host (`os.walk`, `open`), measured in the same run.

    python bench/memory_sync.py [--rounds 20] [--files 500] [--file-bytes 4000]

A full store is the bound: 500 documents and 2 MiB (4,000 bytes each by default). No control
plane: the figures are the agent's part of a start and of a turn's end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, revision, summary_row

sys.path.insert(0, str(ROOT / "clients" / "python"))
from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.sandboxes.base import Sandbox
from dataplane_agent.turns import memory


def store(files: int, size: int) -> pb.MemoryMount:
    return pb.MemoryMount(
        store_id="bench",
        name="notes",
        read_write=True,
        files=[
            pb.MemoryFile(path=f"d{i % 10}/note-{i}.md", content=(b"%05d" % i) * (size // 5), version=1)
            for i in range(files)
        ],
    )


def naive_install(root: Path, mount: pb.MemoryMount) -> None:
    for document in mount.files:
        target = root / document.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(document.content)


def naive_read(root: Path) -> dict[str, bytes]:
    found = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            found[str(path.relative_to(root))] = path.read_bytes()
    return found


async def timed(rounds: int, work: Callable[[int], Awaitable[object]]) -> list[float]:
    values = []
    for index in range(rounds):
        began = time.perf_counter()
        await work(index)
        values.append((time.perf_counter() - began) * 1000)
    return values


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--file-bytes", type=int, default=4000)
    args = parser.parse_args()
    mount = store(args.files, args.file_bytes)
    work = Path(tempfile.mkdtemp(prefix="astrabox-memory-bench-"))
    try:
        home = work / "home"
        home.mkdir()
        sandbox = Sandbox("sb", "bench", "s", work, "/workspace", home)
        naive_root = work / "naive"
        notes = home / "memory" / "notes"

        install = await timed(args.rounds, lambda _: memory.install(sandbox, [mount]))
        naive = await timed(args.rounds, lambda _: asyncio.to_thread(naive_install, naive_root, mount))
        mounted = await memory.install(sandbox, [mount])
        unchanged = await timed(args.rounds, lambda _: memory.changes(sandbox, mounted))

        async def one_changed(index: int) -> object:
            (notes / "d0" / "note-0.md").write_bytes(b"changed %d" % index)
            return await memory.changes(sandbox, mounted)

        one = await timed(args.rounds, one_changed)

        async def all_changed(index: int) -> object:
            for document in mount.files:
                (notes / document.path).write_bytes(b"round %d " % index + document.content)
            began = time.perf_counter()
            found = await memory.changes(sandbox, mounted)
            all_times.append((time.perf_counter() - began) * 1000)
            return found

        all_times: list[float] = []
        await timed(args.rounds, all_changed)
        walked = await timed(args.rounds, lambda _: asyncio.to_thread(naive_read, naive_root))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"memory_sync  {revision()}  {args.files} files x {args.file_bytes} bytes, {args.rounds} rounds")
    print(summary_row("install (confined)", install))
    print(summary_row("install (naive, host)", naive))
    print(summary_row("turn end, nothing changed", unchanged))
    print(summary_row("turn end, one file changed", one))
    print(summary_row("turn end, every file changed", all_times))
    print(summary_row("read all (naive, host)", walked))
    ratio = sorted(install)[len(install) // 2] / max(sorted(naive)[len(naive) // 2], 1e-9)
    read_ratio = sorted(unchanged)[len(unchanged) // 2] / max(sorted(walked)[len(walked) // 2], 1e-9)
    print(f"median ratios: install {ratio:.1f}x naive; turn end (nothing changed) {read_ratio:.1f}x a naive read-all")


if __name__ == "__main__":
    asyncio.run(main())
