"""What confinement costs a workspace call: uploads checked by the agent and unpacked by tar inside
the sandbox, downloads packed there, listings walked by directory descriptors, commands whose every
process is ended — against doing the same on the host in the agent's own process (the way it was
done before, with root's privilege), measured in the same run.

    python bench/workspace_calls.py [--driver local|docker] [--rounds 20] [--files 200]

Drives the agent's WorkspaceService directly (no control plane): the figures are the agent's part
of a call. The baseline for an upload is tarfile extraction into a host directory, for a download
tarfile packing, for a listing os.scandir, for a command a bare `bash -c true` on the host (the
sandbox runs `bash -lc`, a login shell, in a sandbox started for it).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, revision, summary_row

sys.path.insert(0, str(ROOT / "clients" / "python"))
from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.sandboxes.base import AGENT_LABEL, SESSION_LABEL, Sandbox, SandboxSpec
from dataplane_agent.workspace.service import WorkspaceService


def repository(files: int) -> bytes:
    """A gzip'd tree of `files` small source files in a few directories (about 4 KiB each)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for i in range(files):
            data = (f"# file {i}\n" + "x = 1\n" * 600).encode()
            member = tarfile.TarInfo(f"repo/pkg{i % 10}/module_{i}.py")
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


class Calls:
    """Plays the control plane for one sandbox: one request at a time, replies collected."""

    def __init__(self, service: WorkspaceService) -> None:
        self._service = service
        self._count = 0

    async def call(self, **op: object) -> list[pb.WorkspaceReply]:
        self._count += 1
        rid, replies, done = f"b{self._count}", [], asyncio.Event()

        async def reply(message: pb.WorkspaceReply) -> None:
            replies.append(message)
            if message.last:
                done.set()

        if "archive" in op:
            data = op.pop("archive")
            chunks = [data[i : i + 256 * 1024] for i in range(0, len(data), 256 * 1024)]  # type: ignore[index]
            for i, chunk in enumerate(chunks):
                last = i == len(chunks) - 1
                request = pb.WorkspaceRequest(
                    request_id=rid,
                    session_id="bench",
                    write_archive=pb.WriteArchive(path=str(op["path"]), chunk=chunk, last=last),
                )
                self._service.submit(request, reply)
        else:
            self._service.submit(pb.WorkspaceRequest(request_id=rid, session_id="bench", **op), reply)
        await asyncio.wait_for(done.wait(), 120)
        if replies[-1].WhichOneof("body") == "error":
            raise RuntimeError(replies[-1].error.message)
        return replies


async def timed(work: Callable[[], Awaitable[object]] | Callable[[], object]) -> float:
    began = time.perf_counter()
    result = work()
    if asyncio.iscoroutine(result):
        await result
    return (time.perf_counter() - began) * 1000


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", choices=("local", "docker"), default="local")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--files", type=int, default=200)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="astrabox-bench-ws-"))
    if args.driver == "local":
        from dataplane_agent.sandboxes.local import LocalSandboxDriver

        driver = LocalSandboxDriver(work / "sandboxes")
    else:
        from dataplane_agent.engines.claude_code import BUNDLED_CLI
        from dataplane_agent.sandboxes.docker import DockerSandboxDriver

        driver = DockerSandboxDriver(
            work / "sandboxes", installation=f"bench-{os.getpid()}", agent_id="bench", programs=[BUNDLED_CLI]
        )
    sandbox: Sandbox = await driver.create(
        SandboxSpec(session_id="bench", agent_id="bench", labels={SESSION_LABEL: "bench", AGENT_LABEL: "bench"})
    )

    async def lookup(_session_id: str) -> Sandbox:
        return sandbox

    calls = Calls(WorkspaceService(lookup, driver))
    archive = repository(args.files)
    host = work / "host"
    figures: dict[str, list[float]] = {}

    def record(name: str, ms: float) -> None:
        figures.setdefault(name, []).append(ms)

    def host_extract() -> None:
        shutil.rmtree(host, ignore_errors=True)
        host.mkdir()
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
            tar.extractall(host, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))

    def host_pack() -> None:
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            tar.add(host / "repo", arcname="repo")

    try:
        for round_ in range(args.rounds + 1):  # the first round warms up and is not counted
            keep = round_ > 0
            samples = {
                "upload (sandbox tar)": await timed(lambda: calls.call(archive=archive, path="")),
                "upload baseline (tarfile on the host)": await timed(host_extract),
                "download (sandbox tar)": await timed(lambda: calls.call(read_archive=pb.ReadArchive(path="repo"))),
                "download baseline (tarfile on the host)": await timed(host_pack),
                "list (fd walk)": await timed(lambda: calls.call(list_directory=pb.ListDirectory(path="repo/pkg1"))),
                "list baseline (os.scandir)": await timed(
                    lambda: [e.stat(follow_symlinks=False) for e in os.scandir(host / "repo" / "pkg1")]
                ),
                "command (all processes ended)": await timed(
                    lambda: calls.call(exec_command=pb.ExecCommand(command="true"))
                ),
                "command baseline (a bare bash on the host)": await timed(
                    lambda: subprocess.run(["/bin/bash", "-c", "true"], check=True)
                ),
            }
            if keep:
                for name, ms in samples.items():
                    record(name, ms)
    finally:
        await driver.destroy(sandbox)
        shutil.rmtree(work, ignore_errors=True)

    with tarfile.open(fileobj=io.BytesIO(archive)) as members:
        unpacked = sum(m.size for m in members)
    print(
        f"workspace calls, {args.driver} driver, {args.files} files ({unpacked // 1024} KiB, {len(archive) // 1024} KiB gzip), "
        f"{args.rounds} rounds; revision {revision()}, {time.strftime('%Y-%m-%d %H:%M')}"
    )
    for name, values in figures.items():
        print(summary_row(name, values))
    for call in ("upload", "download", "list", "command"):
        mine = [
            x for name, values in figures.items() if name.startswith(call) and "baseline" not in name for x in values
        ]
        base = [x for name, values in figures.items() if name.startswith(call) and "baseline" in name for x in values]
        print(f"  {call:<10} p50 ratio to its baseline: {statistics.median(mine) / statistics.median(base):.1f}x")


if __name__ == "__main__":
    asyncio.run(main())
