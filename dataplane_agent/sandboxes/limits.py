"""Resource limits for sandboxes that run directly on the host (the local driver).

What applies depends on the host, and each part degrades on its own:

- rlimits, set by the launcher before it enters the sandbox and inherited by
  everything inside (hard and soft): open files, size of a written file,
  address space of one process, no core dumps. RLIMIT_NPROC is not used: the
  kernel counts it per host uid (every process of the agent's user) and does
  not enforce it at all for root.
- a cgroup per sandbox and controller (`SandboxCgroups`) caps the sandbox as a
  whole: its tasks (pids, so a fork bomb stays inside), its memory (the kernel's
  OOM killer ends what exceeds it; swap is capped with it, so it is no way
  out) and its CPU time (a CFS quota of `cpus` CPUs). cgroup v1 (each
  controller a hierarchy of its own) and v2 (one unified hierarchy, the
  controllers enabled in its root's cgroup.subtree_control) both serve. The
  groups live in `astrabox/` at each hierarchy's root, not under the agent's
  own cgroup, which belongs to whoever runs the agent: so it needs writable
  hierarchies, typically an agent running as root. A controller the host does
  not offer, or whose groups the agent cannot make or join (found at start by
  making one and moving a process into it), is left out: the driver says once
  at start which and why, and sandboxes run without that limit (memory then
  stays capped per process only, by RLIMIT_AS; tasks and CPU time not at all).
  An ordinary user's agent is usually in that case: its sandboxes keep every
  namespace and the rlimits, but a fork bomb or a memory hog in one can starve
  the whole machine. Run the agent as root (or use the docker driver) where
  sandboxes run code that must not be able to do that.
- the same groups measure the sandbox (`usage`: its CPU time and memory, for
  the agent's metrics); on cgroup v1 a sandbox also joins a group of the
  cpuacct hierarchy where that is one of its own (it limits nothing). Without
  a group, a local sandbox's CPU and memory are not measured.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
_PARENT = "astrabox"
_REMOVE_WAIT = 5.0
_JOIN_TIMEOUT = 10.0
_CPU_PERIOD_US = 100_000
_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class LocalLimits:
    """Per-sandbox limits of the local driver; 0 leaves that one unlimited."""

    # Tasks (processes and threads) in the sandbox's pids cgroup, where there is one.
    pids: int = 1024
    # Memory of the whole sandbox (swap included) in its memory cgroup, where there is one.
    memory_mb: int = 2048
    # CPUs' worth of time the whole sandbox may use, in its cpu cgroup, where there is one.
    cpus: float = 1.0
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


@dataclass(frozen=True, slots=True)
class _Write:
    """One value written into a sandbox's cgroup before the launcher joins it."""

    file: str
    value: str
    # Allowed to fail: a first try the kernel may refuse (repeated later), or a setting this host
    # can do without.
    may_fail: bool = False


@dataclass(frozen=True, slots=True)
class _Hierarchy:
    """Where the sandbox groups of some controllers live, and what each group is given."""

    parent: Path
    controllers: tuple[str, ...]
    writes: tuple[_Write, ...]


class SandboxCgroups:
    """The cgroups of each sandbox, `<hierarchy>/astrabox/<tag>-<sandbox_id>` in every hierarchy
    that holds one of its controllers (one on cgroup v2, one per controller on v1); `tag` tells
    this driver's sandboxes from another's on the same host."""

    def __init__(self, hierarchies: tuple[_Hierarchy, ...], tag: str) -> None:
        self._hierarchies = hierarchies
        self._tag = tag

    @property
    def controllers(self) -> frozenset[str]:
        """The controllers that limit each sandbox (of pids, memory, cpu)."""
        return frozenset(name for hierarchy in self._hierarchies for name in hierarchy.controllers)

    @classmethod
    def find(
        cls, sandbox_root: Path, limits: LocalLimits, root: Path = CGROUP_ROOT
    ) -> tuple[SandboxCgroups | None, dict[str, str]]:
        """The cgroups this host lets the driver make for `limits` (None: none at all), and each
        limit it cannot hold with a cgroup here: why, and what holds instead."""
        tag = cgroup_tag(sandbox_root)
        found: dict[Path, tuple[list[str], list[_Write]]] = {}
        missing: dict[str, str] = {}
        for controller, limit in (("pids", limits.pids), ("memory", limits.memory_mb), ("cpu", limits.cpus)):
            if not limit:
                continue
            located = _locate(root, controller)
            if isinstance(located, str):
                missing[controller] = f"{located}; {_fallback(controller, limits)}"
                continue
            parent, v1 = located
            writes, why, swap = _prepare(parent, v1, f"{tag}-probe", controller, limits)
            if why:
                missing[controller] = f"{why}; {_fallback(controller, limits)}"
                continue
            if swap:
                missing["swap"] = swap
            names, all_writes = found.setdefault(parent, ([], []))
            names.append(controller)
            all_writes.extend(writes)
        if found:  # cgroup v1 may count CPU time in a hierarchy of its own: the sandbox joins it too
            accounting = _locate(root, "cpuacct")
            if not isinstance(accounting, str) and accounting[1] and accounting[0] not in found:
                writes, why, _ = _prepare(accounting[0], True, f"{tag}-probe", "cpuacct", limits)
                if not why:
                    found[accounting[0]] = (["cpuacct"], writes)
        hierarchies = tuple(
            _Hierarchy(parent, tuple(names), tuple(writes)) for parent, (names, writes) in found.items()
        )
        return (cls(hierarchies, tag) if hierarchies else None), missing

    def shell(self, sandbox_id: str, limits: LocalLimits | None = None) -> list[str]:
        """Launcher lines that put the launcher (and so the whole sandbox) in each of the sandbox's
        cgroups, creating them with their limits if need be; a launcher that cannot join refuses
        to run. `limits`: the sandbox's own (an environment's) instead of the driver's, for the
        controllers the driver found."""
        lines = []
        for hierarchy in self._hierarchies:
            steps = ['mkdir -p "$group"']
            for write in hierarchy.writes:
                value = _value(write, limits) if limits is not None else write.value
                echo = f'echo {value} > "$group/{write.file}"'
                steps.append(f"{{ {echo} || :; }}" if write.may_fail else echo)
            steps += ['echo $$ > "$group/cgroup.procs"', "joined=1", "break"]
            what = "/".join(hierarchy.controllers)
            lines += [
                f"group={shlex.quote(str(self._group(hierarchy, sandbox_id)))}",
                "joined=",
                "for attempt in 1 2 3; do",
                f"  {' && '.join(steps)}",
                "done 2>/dev/null",
                f'[ -n "$joined" ] || {{ echo "astrabox: cannot join the sandbox\'s {what} cgroup $group" >&2; exit 126; }}',
            ]
        return lines

    def usage(self, sandbox_id: str) -> tuple[float | None, int | None]:
        """The CPU seconds the sandbox has used so far and the memory it holds now (bytes, page
        cache that can be dropped left out, as `docker stats` does), from its groups; None where no
        group of it counts that."""
        cpu: float | None = None
        memory: int | None = None
        for hierarchy in self._hierarchies:
            group = self._group(hierarchy, sandbox_id)
            if cpu is None:
                if (usec := _field(_read(group / "cpu.stat"), "usage_usec")) is not None:  # v2
                    cpu = usec / 1e6
                elif (ns := _read(group / "cpuacct.usage").strip()).isdigit():  # v1
                    cpu = int(ns) / 1e9
            if memory is None and "memory" in hierarchy.controllers:
                stat = _read(group / "memory.stat")
                for current, inactive in (
                    ("memory.current", "inactive_file"),
                    ("memory.usage_in_bytes", "total_inactive_file"),
                ):
                    if (used := _read(group / current).strip()).isdigit():
                        memory = max(0, int(used) - (_field(stat, inactive) or 0))
                        break
        return cpu, memory

    def remove(self, sandbox_id: str) -> bool:
        """Kill whatever is left in the sandbox's cgroups and remove them; whether they are gone."""
        removed = [_remove(self._group(hierarchy, sandbox_id)) for hierarchy in self._hierarchies]  # each, always
        return all(removed)

    def rename(self, sandbox_id: str, new_id: str) -> None:
        """The sandbox is now `new_id` (a warm-pool sandbox rebound to a session): its cgroups, with
        whatever already runs in them, follow, so its limits still hold and `remove` finds them."""
        renamed = []
        try:
            for hierarchy in self._hierarchies:
                with contextlib.suppress(FileNotFoundError):  # nothing was launched in it yet
                    os.rename(self._group(hierarchy, sandbox_id), self._group(hierarchy, new_id))
                    renamed.append(hierarchy)
        except OSError:
            for hierarchy in renamed:  # all or nothing: the caller may try again under the old id
                with contextlib.suppress(OSError):
                    os.rename(self._group(hierarchy, new_id), self._group(hierarchy, sandbox_id))
            raise

    def sweep(self) -> None:
        """Remove the empty cgroups this driver's sandboxes left (a run that never destroyed them);
        busy ones stay, and so do those of another driver on the host (another tag): they may be
        its sandboxes' groups being made right now."""
        for hierarchy in self._hierarchies:
            with contextlib.suppress(OSError):
                for group in hierarchy.parent.glob(f"{self._tag}-*"):
                    if group.is_dir() and not _read(group / "cgroup.procs").strip():
                        with contextlib.suppress(OSError):
                            group.rmdir()

    def _group(self, hierarchy: _Hierarchy, sandbox_id: str) -> Path:
        return hierarchy.parent / f"{self._tag}-{sandbox_id}"


def cgroup_tag(sandbox_root: Path) -> str:
    """What tells the groups of the driver of `sandbox_root` from another driver's on the host."""
    return hashlib.sha256(str(sandbox_root).encode()).hexdigest()[:10]


def _locate(root: Path, controller: str) -> tuple[Path, bool] | str:
    """The directory holding the sandboxes' groups of `controller`, and whether it is cgroup v1;
    or why there is none."""
    if (root / "cgroup.controllers").exists():  # v2: one hierarchy, the controllers enabled at its root
        if controller in _read(root / "cgroup.subtree_control").split():
            return root / _PARENT, False
        return f"cgroup v2 at {root} does not enable the {controller} controller for its children"
    if (root / controller / "cgroup.procs").exists():  # v1: a hierarchy of its own (maybe shared)
        return (root / controller).resolve() / _PARENT, True
    return f"no {controller} cgroup controller is available under {root}"


def _prepare(
    parent: Path, v1: bool, trial_name: str, controller: str, limits: LocalLimits
) -> tuple[list[_Write], str, str]:
    """Make `parent` serve `controller`, and find what a sandbox's group there is given by making
    one: those writes, why it cannot be done (empty: it can), and a gap left in the swap limit."""
    try:
        parent.mkdir(exist_ok=True)
        if not v1:
            (parent / "cgroup.subtree_control").write_text(f"+{controller}")
    except OSError as error:
        return [], f"cannot create {parent}: {error.strerror}", ""
    trial = parent / trial_name
    try:
        trial.mkdir(exist_ok=True)
    except OSError as error:
        return [], f"cannot create a cgroup in {parent}: {error.strerror}", ""
    try:
        writes, swap = _writes(controller, limits, v1, trial)
        for write in writes:
            try:
                (trial / write.file).write_text(write.value)
            except OSError as error:
                if not write.may_fail:
                    return [], f"cannot set {write.file} to {write.value} in {parent}: {error.strerror}", ""
        if why := _join(trial):
            return [], f"cannot move a process into a cgroup in {parent}: {why}", ""
        return writes, "", swap
    finally:
        with contextlib.suppress(OSError):
            trial.rmdir()


def _join(group: Path) -> str:
    """Why a process of this agent cannot join `group` as a sandbox's launcher does (empty: it can).
    Making a group can be allowed where joining one is not (cgroup v2 also wants write access to the
    groups' common ancestor, which a user's own delegated groups do not share with these), so a
    shell joins it here, and must then show up in it."""
    script = 'echo $$ > "$1/cgroup.procs" && cat "/proc/$$/cgroup"'
    try:
        joined = subprocess.run(
            ["/bin/sh", "-c", script, "astrabox-cgroup-probe", str(group)],
            capture_output=True,
            text=True,
            timeout=_JOIN_TIMEOUT,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return str(error)
    if joined.returncode != 0:
        return " ".join(joined.stderr.split()) or f"exit status {joined.returncode}"
    if f"/{_PARENT}/{group.name}" not in joined.stdout:
        return "a process that joins it does not show up in it (not a cgroup file system)"
    return ""


def _writes(controller: str, limits: LocalLimits, v1: bool, group: Path) -> tuple[list[_Write], str]:
    """What a sandbox's group of `controller` is given, judged by the files of `group` (a fresh
    group in the same place), and a gap left in the swap limit."""
    if controller == "pids":
        return [_Write("pids.max", str(limits.pids))], ""
    if controller == "cpuacct":  # counts, limits nothing
        return [], ""
    if controller == "cpu":
        quota = max(1000, round(limits.cpus * _CPU_PERIOD_US))
        if v1:
            return [_Write("cpu.cfs_period_us", str(_CPU_PERIOD_US)), _Write("cpu.cfs_quota_us", str(quota))], ""
        return [_Write("cpu.max", f"{quota} {_CPU_PERIOD_US}")], ""
    size = str(limits.memory_mb * _MIB)
    if not v1:
        if (group / "memory.swap.max").exists():
            return [_Write("memory.max", size), _Write("memory.swap.max", "0")], ""
        return [_Write("memory.max", size)], _swap_gap(
            "the kernel does not account swap per cgroup (no memory.swap.max)"
        )
    if (group / "memory.memsw.limit_in_bytes").exists():
        # Memory plus swap may never be below memory alone: raising both takes memsw first,
        # lowering both takes it last; trying it first and again last serves either way.
        memsw = "memory.memsw.limit_in_bytes"
        return [_Write(memsw, size, may_fail=True), _Write("memory.limit_in_bytes", size), _Write(memsw, size)], ""
    # Without swap accounting, swappiness 0 keeps the group's pages out of swap altogether.
    if (group / "memory.swappiness").exists():
        return [_Write("memory.limit_in_bytes", size), _Write("memory.swappiness", "0", may_fail=not _host_swaps())], ""
    return [_Write("memory.limit_in_bytes", size)], _swap_gap("the kernel does not account swap per cgroup")


def _value(write: _Write, limits: LocalLimits) -> str:
    """What `write` (made for the driver's limits) writes for `limits`."""
    quota = max(1000, round(limits.cpus * _CPU_PERIOD_US))
    size = str(limits.memory_mb * _MIB)
    values = {
        "pids.max": str(limits.pids),
        "cpu.max": f"{quota} {_CPU_PERIOD_US}",
        "cpu.cfs_quota_us": str(quota),
        "memory.max": size,
        "memory.limit_in_bytes": size,
        "memory.memsw.limit_in_bytes": size,
    }
    return values.get(write.file, write.value)


def _swap_gap(why: str) -> str:
    return f"{why}: a sandbox may swap beyond its memory limit" if _host_swaps() else ""


def _host_swaps() -> bool:
    return len(_read(Path("/proc/swaps")).strip().splitlines()) > 1


def _fallback(controller: str, limits: LocalLimits) -> str:
    if controller == "memory" and limits.address_space_mb:
        return f"only each process's address space is limited (RLIMIT_AS, {limits.address_space_mb} MiB)"
    return {"pids": "tasks are not limited", "memory": "memory is not limited", "cpu": "CPU time is not limited"}[
        controller
    ]


def _remove(group: Path) -> bool:
    """Kill whatever is left in `group` and remove it; whether it is gone."""
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


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _field(stat: str, name: str) -> int | None:
    """The value of `name` in a cgroup's `key value` lines (cpu.stat, memory.stat)."""
    for line in stat.splitlines():
        key, _, value = line.partition(" ")
        if key == name and value.strip().isdigit():
            return int(value)
    return None
