"""How much disk a workspace uses, measured from the host without privilege over its files.

GNU `du -s -x -B1` counts the blocks a workspace's files take (each hard-linked inode once, never
following a symbolic link, never leaving the workspace's file system); it walks a tree of any depth.
The walk only reads metadata, and still not as root: a root agent runs it as the sandbox's host user
with one capability, CAP_DAC_READ_SEARCH (so a directory the sandbox made unreadable is counted
too, and nothing can be written); an agent that is not root runs it in a user namespace of its own
where it owns the sandbox's files (`unshare --map-root-user`), else plainly (an unreadable directory
is then not counted, and the log says so).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import structlog

from dataplane_agent.sandboxes.base import SandboxError
from serverkit.waits import bounded

log = structlog.get_logger(__name__)

MEASURE_TIMEOUT = 120.0


class DiskUsage:
    """Measures workspaces; `host_uid` is who a root agent's sandboxes are on the host."""

    def __init__(self, host_uid: int) -> None:
        self._host_uid = host_uid
        self._du = shutil.which("du") or "/usr/bin/du"
        # Not root: whether `unshare --map-root-user` works here (None: not tried yet).
        self._own_namespace: bool | None = None

    async def used_bytes(self, workspace: Path) -> int:
        """Bytes the files under `workspace` take on disk. SandboxError if it cannot be measured."""
        measure = [self._du, "-s", "-x", "-B1", "--", str(workspace)]
        if os.geteuid() == 0:
            return await self._run(self._as_host_user(measure), workspace)
        if self._own_namespace is None:
            self._own_namespace = await _user_namespace_works()
            if not self._own_namespace:
                log.warning(
                    "disk_usage_without_namespace",
                    consequence="directories a sandbox makes unreadable are not counted against its disk limit",
                )
        if self._own_namespace:
            measure = [shutil.which("unshare") or "unshare", "--user", "--map-root-user", *measure]
        return await self._run(measure, workspace)

    def _as_host_user(self, measure: list[str]) -> list[str]:
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        uid = str(self._host_uid)
        return [
            setpriv,
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--inh-caps=-all,+dac_read_search",
            "--ambient-caps=-all,+dac_read_search",
            "--",
            *measure,
        ]

    async def _run(self, argv: list[str], workspace: Path) -> int:
        try:
            process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
        except OSError as error:
            raise SandboxError(f"cannot measure the workspace: {error.strerror}") from error
        try:
            async with asyncio.timeout(MEASURE_TIMEOUT):
                out, err = await process.communicate()
        except TimeoutError:
            process.kill()
            await process.wait()
            raise SandboxError(f"measuring the workspace took longer than {MEASURE_TIMEOUT:.0f}s") from None
        first = out.split(b"\t", 1)[0].strip()
        if not first.isdigit():
            # du names host paths: the details stay in the agent's log.
            log.warning(
                "disk_usage_failed",
                workspace=str(workspace),
                code=process.returncode,
                error=err.decode(errors="replace")[:500],
            )
            raise SandboxError("the workspace's disk use could not be measured (the agent's log says why)")
        if process.returncode != 0:  # a partial count (something vanished or could not be read)
            log.info("disk_usage_partial", workspace=str(workspace), error=err.decode(errors="replace")[:500])
        return int(first)


async def _user_namespace_works() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    try:
        process = await asyncio.create_subprocess_exec(
            unshare,
            "--user",
            "--map-root-user",
            "true",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        return await bounded(process.wait(), 10) == 0
    except (OSError, TimeoutError):
        return False
