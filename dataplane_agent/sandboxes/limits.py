"""Resource limits for sandboxes that run directly on the host (the local driver).

What applies depends on the host, and each part degrades on its own:

- rlimits, set by the launcher before it enters the sandbox and inherited by
  everything inside (hard and soft): open files, size of a written file,
  address space of one process, no core dumps. RLIMIT_NPROC is not used: the
  kernel counts it per host uid (every process of the agent's user) and does
  not enforce it at all for root.
- a pids cgroup per sandbox caps its tasks (processes and threads), so a fork
  bomb stays inside. It needs a writable pids hierarchy: cgroup v1's `pids`,
  or cgroup v2 with the pids controller enabled at its root (typically: the
  agent runs as root). Without one, the driver logs why and runs without.
- memory and CPU are not limited here: a memory cgroup would have to nest
  under the agent's own cgroup, which belongs to whoever runs the agent. The
  docker driver limits both.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
_PARENT = "astrabox"
_REMOVE_WAIT = 5.0


@dataclass(frozen=True, slots=True)
class LocalLimits:
    """Per-sandbox limits of the local driver; 0 leaves that one unlimited."""

    # Tasks (processes and threads) in the sandbox's pids cgroup, where there is one.
    pids: int = 1024
    # RLIMIT_NOFILE of every process.
    open_files: int = 4096
    # RLIMIT_FSIZE: the largest file a process may write.
    file_size_mb: int = 16384
    # RLIMIT_AS of every process (not of the sandbox as a whole).
    address_space_mb: int = 16384

    def shell(self) -> list[str]:
        """Launcher lines setting the rlimits (sh units: 512-byte blocks for -f, KiB for -v). A limit
        the launcher may not raise stays at the stricter value it inherited."""
        lines = ["ulimit -c 0"]
        if self.open_files:
            lines.append(f"ulimit -n {self.open_files} 2>/dev/null || :")
        if self.file_size_mb:
            lines.append(f"ulimit -f {self.file_size_mb * 2048} 2>/dev/null || :")
        if self.address_space_mb:
            lines.append(f"ulimit -v {self.address_space_mb * 1024} 2>/dev/null || :")
        return lines


class PidsCgroups:
    """One pids cgroup per sandbox, `<hierarchy>/astrabox/<tag>-<sandbox_id>`; `tag` tells this
    driver's sandboxes from another's on the same host."""

    def __init__(self, parent: Path, tag: str) -> None:
        self._parent = parent
        self._tag = tag

    @classmethod
    def find(cls, sandbox_root: Path, root: Path = CGROUP_ROOT) -> tuple[PidsCgroups | None, str]:
        """The cgroups this host lets the driver make, or None and why not."""
        tag = hashlib.sha256(str(sandbox_root).encode()).hexdigest()[:10]
        if (root / "pids" / "cgroup.procs").exists():  # v1: a hierarchy of its own
            parent, v2 = root / "pids" / _PARENT, False
        elif "pids" in _read(root / "cgroup.subtree_control").split():
            parent, v2 = root / _PARENT, True
        else:
            return None, f"no pids cgroup controller is available under {root}"
        try:
            parent.mkdir(exist_ok=True)
            if v2:
                (parent / "cgroup.subtree_control").write_text("+pids")
        except OSError as error:
            return None, f"cannot create {parent}: {error.strerror}"
        return cls(parent, tag), ""

    def shell(self, sandbox_id: str, pids: int) -> list[str]:
        """Launcher lines that put the launcher (and so the whole sandbox) in the sandbox's cgroup,
        creating it with its limit if need be; a launcher that cannot join refuses to run."""
        group = shlex.quote(str(self._group(sandbox_id)))
        limit = str(pids) if pids else "max"
        return [
            "joined=",
            "for attempt in 1 2 3; do",
            f"  mkdir -p {group} && echo {limit} > {group}/pids.max && echo $$ > {group}/cgroup.procs && joined=1 && break",
            "done 2>/dev/null",
            f'[ -n "$joined" ] || {{ echo "astrabox: cannot join the sandbox\'s pids cgroup {group}" >&2; exit 126; }}',
        ]

    def remove(self, sandbox_id: str) -> bool:
        """Kill whatever is left in the sandbox's cgroup and remove it; whether it is gone."""
        group = self._group(sandbox_id)
        deadline = time.monotonic() + _REMOVE_WAIT
        while group.exists():
            for pid in _read(group / "cgroup.procs").split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            try:
                group.rmdir()
            except FileNotFoundError:
                break
            except OSError:  # still busy: its processes are dying
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.01)
        return True

    def rename(self, sandbox_id: str, new_id: str) -> None:
        """The sandbox is now `new_id` (a warm-pool sandbox rebound to a session): its cgroup, with
        whatever already runs in it, follows, so its limit still holds and `remove` finds it."""
        with contextlib.suppress(FileNotFoundError):  # nothing was launched in it yet
            os.rename(self._group(sandbox_id), self._group(new_id))

    def _group(self, sandbox_id: str) -> Path:
        return self._parent / f"{self._tag}-{sandbox_id}"

    def sweep(self) -> None:
        """Remove the empty cgroups sandboxes left (a run that never destroyed them); busy ones stay."""
        with contextlib.suppress(OSError):
            for group in self._parent.iterdir():
                if group.is_dir() and not _read(group / "cgroup.procs").strip():
                    with contextlib.suppress(OSError):
                        group.rmdir()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
