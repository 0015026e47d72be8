"""The workspace disk limit where no image of its own enforces it: measured, and enforced by
stopping the runtime.

`--sandbox-disk-mb` limits every workspace; a session's environment may set its own limit
(`limits.disk_bytes`), which replaces it for that session's workspace. Where the agent can give each workspace an ext4 image
of its own (`sandboxes.disk`: a root agent with loop devices) the file system enforces it: writes
past it fail with ENOSPC. Elsewhere — an agent that is not root, a host without loop devices, or
`--sandbox-disk-by measurement` — this module enforces it:

- every `--sandbox-disk-check-seconds` it measures the workspace of each session whose engine runs
  (`sandboxes.disk_usage`, never as root over the sandbox's files);
- a session over its limit has its turn and queued messages ended (TURN_FAILED, with the reason)
  and its runtime stopped, its files kept: RUNTIME_STOPPED with the reason. Its next message starts
  the runtime again, so that files can be deleted: while its workspace is over the limit, the
  runtime is stopped again as soon as it uses more than when it was stopped;
- an upload that would take a workspace over its limit is refused (WORKSPACE_FULL).

Between two checks a sandbox can write past the limit by what it writes in one interval; the
file system (an image) is the only hard limit.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from dataplane_agent.sandboxes.base import Sandbox, SandboxError
from dataplane_agent.sandboxes.disk_usage import DiskUsage
from dataplane_agent.turns.engine_calls import describe

log = structlog.get_logger(__name__)

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class OverLimit:
    session_id: str
    reason: str


class MeasuredDiskLimit:
    """Workspaces of at most `limit_mb` MiB, measured every `interval` seconds."""

    def __init__(self, limit_mb: int, interval: float, usage: DiskUsage) -> None:
        self.limit_bytes = limit_mb * MIB
        self.interval = interval
        self._usage = usage
        # Sessions whose environment sets a limit of its own: theirs, in bytes.
        self._bounds: dict[str, int] = {}
        # Sessions stopped over their limit: what they used then. Started again, they may run while
        # they use no more (to delete files); growing past it stops them again.
        self._stopped_at: dict[str, int] = {}

    def bound(self, session_id: str, limit_mb: int) -> None:
        """The session's workspace is limited to `limit_mb` MiB (its environment's; 0: the agent's)."""
        if limit_mb:
            self._bounds[session_id] = limit_mb * MIB
        else:
            self._bounds.pop(session_id, None)

    def forget(self, session_id: str) -> None:
        """The session's runtime is gone from this agent."""
        self._bounds.pop(session_id, None)
        self._stopped_at.pop(session_id, None)

    def limit_of(self, session_id: str) -> int:
        """The session's limit, in bytes."""
        return self._bounds.get(session_id, self.limit_bytes)

    async def room(self, sandbox: Sandbox) -> int:
        """Bytes the workspace may still take: what its limit leaves, or its file system, the lesser."""
        used = await self._usage.used_bytes(sandbox.workspace)
        return max(0, min(self.limit_of(sandbox.session_id) - used, _free_bytes(sandbox.workspace)))

    async def over(self, session_id: str, sandbox: Sandbox) -> OverLimit | None:
        """The session's workspace is over its limit and has grown since it was last stopped for it:
        why, in words for its user (None: it is not)."""
        used = await self._usage.used_bytes(sandbox.workspace)
        limit = self.limit_of(session_id)
        if used <= limit:
            self._stopped_at.pop(session_id, None)
            return None
        if used <= self._stopped_at.get(session_id, -1):
            return None  # started again to delete files: it may, but not write more
        return OverLimit(
            session_id,
            f"the workspace uses {used / MIB:.0f} MiB, over its disk limit of "
            f"{limit // MIB} MiB: the runtime was stopped (files kept); "
            "delete files to go on",
        )

    async def stopped(self, session_id: str, sandbox: Sandbox) -> None:
        """The session was stopped over its limit: what it holds now (its writes have ended) is what
        it may hold when started again."""
        self._stopped_at[session_id] = await self._usage.used_bytes(sandbox.workspace)

    async def watch(
        self,
        running: Callable[[], list[tuple[str, Sandbox]]],
        stop: Callable[[OverLimit], Awaitable[None]],
    ) -> None:
        """Check the workspaces of the `running` sessions every interval; `stop` those over the limit."""
        while True:
            await asyncio.sleep(self.interval)
            for session_id, sandbox in running():
                try:
                    found = await self.over(session_id, sandbox)
                    if found is not None:
                        log.warning("workspace_over_disk_limit", session_id=session_id, reason=found.reason)
                        await stop(found)
                        await self.stopped(session_id, sandbox)
                except (SandboxError, OSError) as error:
                    log.warning("workspace_disk_check_failed", session_id=session_id, error=describe(error))
                except Exception:  # one session's failure must not end the others' checks
                    log.exception("workspace_disk_check_failed", session_id=session_id)


def _free_bytes(workspace: Path) -> int:
    info = os.statvfs(workspace)
    return info.f_bavail * info.f_frsize
