"""The local driver's memory, CPU and pids limits: a sandbox that exceeds them suffers, its neighbours
and the host do not."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from dataplane_agent.sandboxes.base import DestroyVerdict, Sandbox, SandboxLimits, SandboxSpec
from dataplane_agent.sandboxes.limits import CGROUP_ROOT, LocalLimits, SandboxCgroups, cgroup_tag
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from dataplane_agent.settings import AgentSettings

MIB = 1024 * 1024

# Holds 16 MiB, says so, waits for `go` in its workspace, then reaches for three times a 64 MiB limit.
_MEMORY_HOG = """
import os, time
held = [bytes([1]) * (1 << 20) for _ in range(16)]
print("holding", flush=True)
while not os.path.exists("go"):
    time.sleep(0.01)
for _ in range(3 * 64):
    held.append(bytes([1]) * (1 << 20))
print("allocated", len(held), flush=True)
"""

# Two processes spin for two seconds of wall time; the CPU time they got, in seconds.
_CPU_HOG = """
import os, time
for _ in range(2):
    if os.fork() == 0:
        end = time.monotonic() + 2
        while time.monotonic() < end:
            pass
        os._exit(0)
for _ in range(2):
    os.wait()
times = os.times()
print(times.children_user + times.children_system)
"""


@pytest.fixture
def python3() -> None:
    if not Path("/usr/bin/python3").exists():
        pytest.skip("the hogs need /usr/bin/python3 inside the sandbox")


def _require(controller: str, limits: LocalLimits, sandbox_root: Path) -> None:
    """Skip, with the host's reason, where it has no usable `controller` hierarchy."""
    cgroups, missing = SandboxCgroups.find(sandbox_root, limits)
    if cgroups is None or controller not in cgroups.controllers:
        pytest.skip(f"no {controller} cgroup here: {missing.get(controller)}")


async def _sh(driver: LocalSandboxDriver, sandbox: Sandbox, script: str) -> subprocess.CompletedProcess[str]:
    launcher = await driver.launcher(sandbox, ["/bin/sh", "-c"], {})
    return await asyncio.to_thread(subprocess.run, [str(launcher), script], capture_output=True, text=True, timeout=30)


def _groups(sandbox: Sandbox) -> list[Path]:
    """The sandbox's groups: its driver's (the tag of its sandbox root), not those another test's
    driver left for a sandbox of the same id."""
    tag = cgroup_tag(sandbox.workspace.parent.parent)
    return [path for path in CGROUP_ROOT.glob(f"**/astrabox/{tag}-{sandbox.sandbox_id}") if path.is_dir()]


def _files(groups: list[Path]) -> Iterator[tuple[str, str]]:
    """Every file of the sandbox's groups with its content, by name (they differ between v1 and v2)."""
    for group in groups:
        for path in group.iterdir():
            if path.name.startswith(("memory.", "cpu.", "pids.")) and path.is_file():
                try:
                    yield path.name, path.read_text().strip()
                except OSError:  # some are write-only
                    continue


@pytest.mark.usefixtures("python3")
async def test_a_memory_hog_is_killed_while_its_neighbour_keeps_running(sandbox_root: Path, bwrap: str) -> None:
    limits = LocalLimits(memory_mb=64, cpus=0.5, pids=64)
    _require("memory", limits, sandbox_root)
    driver = LocalSandboxDriver(sandbox_root, bwrap=bwrap, limits=limits)
    hog = await driver.create(SandboxSpec(session_id="hog", agent_id="agent-1"))
    neighbour = await driver.create(SandboxSpec(session_id="neighbour", agent_id="agent-1"))
    launcher = await driver.launcher(hog, ["/usr/bin/python3", "-c"], {})
    process = subprocess.Popen([str(launcher), _MEMORY_HOG], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        assert await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 30) == "holding\n"

        groups = _groups(hog)
        files = dict(_files(groups))
        assert any(_read(group / "cgroup.procs").split() for group in groups)  # the hog is in them
        memory = files.get("memory.max") or files["memory.limit_in_bytes"]
        assert int(memory) == 64 * MIB
        # Swap is no way out: it is capped with memory, or not used at all.
        assert (
            files.get("memory.swap.max") == "0"
            or int(files.get("memory.memsw.limit_in_bytes", 0)) == 64 * MIB
            or files.get("memory.swappiness") == "0"
        )
        cpu = files.get("cpu.max") or f"{files['cpu.cfs_quota_us']} {files['cpu.cfs_period_us']}"
        assert cpu == "50000 100000"
        assert files["pids.max"] == "64"

        while_holding = await _sh(driver, neighbour, "echo responsive")
        assert (while_holding.returncode, while_holding.stdout) == (0, "responsive\n"), while_holding.stderr

        (hog.workspace / "go").touch()
        stdout, stderr = await asyncio.wait_for(asyncio.to_thread(process.communicate), 60)

        assert "allocated" not in stdout, stderr
        assert process.returncode != 0
        memory_events = _read_any(groups, "memory.events", "memory.oom_control")
        assert _count(memory_events, "oom_kill") >= 1, memory_events  # the kernel's OOM killer did it
        after = await _sh(driver, neighbour, "echo still here")
        assert (after.returncode, after.stdout) == (0, "still here\n"), after.stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert await driver.destroy(hog) is DestroyVerdict.CONFIRMED
        assert await driver.destroy(neighbour) is DestroyVerdict.CONFIRMED

    assert groups and not [group for group in groups if group.exists()]
    assert not _groups(neighbour)


@pytest.mark.usefixtures("python3")
async def test_a_cpu_hog_gets_its_quota_and_no_more(sandbox_root: Path, bwrap: str) -> None:
    limits = LocalLimits(cpus=0.25)
    _require("cpu", limits, sandbox_root)
    driver = LocalSandboxDriver(sandbox_root, bwrap=bwrap, limits=limits)
    sandbox = await driver.create(SandboxSpec(session_id="spinner", agent_id="agent-1"))

    try:
        result = await _sh(driver, sandbox, f"/usr/bin/python3 -c '{_CPU_HOG}'")

        assert result.returncode == 0, result.stderr
        # Two spinners for 2 s at a quarter of a CPU: 0.5 s between them (unlimited: up to 4 s).
        used = float(result.stdout)
        assert used < 1.0
        # The quota, not the machine, held them back: they were throttled. (On a machine so busy
        # that they never got a quarter of a CPU in a period, nothing was left to throttle.)
        throttled = _count(_read_any(_groups(sandbox), "cpu.stat"), "nr_throttled")
        assert throttled > 0 or used < 0.25 * 2 * 0.5, f"used {used} s of CPU and was never throttled"
    finally:
        assert await driver.destroy(sandbox) is DestroyVerdict.CONFIRMED
    assert not _groups(sandbox)


async def test_a_rebound_sandbox_keeps_its_limits_and_destroy_still_finds_them(sandbox_root: Path, bwrap: str) -> None:
    limits = LocalLimits(memory_mb=96, cpus=0.5)
    _require("memory", limits, sandbox_root)
    driver = LocalSandboxDriver(sandbox_root, bwrap=bwrap, limits=limits)
    warm = await driver.create(SandboxSpec(session_id="warm", agent_id="agent-1"))
    launcher = await driver.launcher(warm, ["/bin/sh", "-c"], {})
    process = subprocess.Popen([str(launcher), "echo started; exec sleep 60"], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        assert await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 30) == "started\n"

        claimed = await driver.rebind(warm, SandboxSpec(session_id="claimed", agent_id="agent-1"))

        groups = _groups(claimed)
        assert not _groups(warm)
        assert all(_read(group / "cgroup.procs").split() for group in groups)  # the program came along
        files = dict(_files(groups))
        assert int(files.get("memory.max") or files["memory.limit_in_bytes"]) == 96 * MIB
        assert await driver.destroy(claimed) is DestroyVerdict.CONFIRMED
        assert await asyncio.wait_for(asyncio.to_thread(process.wait), 10) != 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert groups and not [group for group in groups if group.exists()]


async def test_without_cgroups_the_driver_warns_once_and_sandboxes_still_run(
    sandbox_root: Path, bwrap: str, tmp_path: Path
) -> None:
    empty = tmp_path / "no-cgroups"
    empty.mkdir()
    driver = LocalSandboxDriver(
        sandbox_root, bwrap=bwrap, limits=LocalLimits(memory_mb=64, cpus=0.5, address_space_mb=512), cgroup_root=empty
    )

    with structlog.testing.capture_logs() as logs:
        await driver.probe()
        sandbox = await driver.create(SandboxSpec(session_id="uncontained", agent_id="agent-1"))
        results = [await _sh(driver, sandbox, "ulimit -v") for _ in range(2)]

    assert [(result.returncode, result.stdout) for result in results] == [(0, f"{512 * 1024}\n")] * 2
    warnings = [
        entry for entry in logs if entry["log_level"] == "warning" and entry["event"] == "sandbox_limits_unavailable"
    ]
    assert len(warnings) == 1, logs
    missing = warnings[0]["missing"]
    assert set(missing) == {"pids", "memory", "cpu"}
    assert str(empty) in missing["memory"] and "RLIMIT_AS, 512 MiB" in missing["memory"]
    assert not (await driver.isolation()).pids_limited
    assert not _groups(sandbox) and not list(empty.iterdir())
    assert await driver.destroy(sandbox) is DestroyVerdict.CONFIRMED


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _read_any(groups: list[Path], *names: str) -> str:
    return "".join(_read(group / name) for group in groups for name in names)


def _count(text: str, key: str) -> int:
    """The value of `key` in a flat-keyed cgroup file (`key value` lines)."""
    return sum(int(value) for name, _, value in (line.partition(" ") for line in text.splitlines()) if name == key)


def test_one_set_of_flags_limits_either_driver_and_the_docker_names_still_work() -> None:
    given = AgentSettings.from_args(
        ["--sandbox-cpus", "0.5", "--sandbox-memory-mb", "64", "--sandbox-pids", "32"], environ={}
    )
    old_flags = AgentSettings.from_args(
        ["--docker-cpus", "1.5", "--docker-memory-mb", "96", "--docker-pids", "48"], environ={}
    )
    new_env = AgentSettings.from_args(
        [], environ={"ASTRABOX_SANDBOX_MEMORY_MB": "128", "ASTRABOX_DOCKER_MEMORY_MB": "1"}
    )
    old_env = AgentSettings.from_args([], environ={"ASTRABOX_DOCKER_CPUS": "0", "ASTRABOX_DOCKER_PIDS": "0"})

    assert (given.sandbox_cpus, given.sandbox_memory_mb, given.sandbox_pids) == (0.5, 64, 32)
    assert (old_flags.sandbox_cpus, old_flags.sandbox_memory_mb, old_flags.sandbox_pids) == (1.5, 96, 48)
    assert new_env.sandbox_memory_mb == 128
    assert (old_env.sandbox_cpus, old_env.sandbox_pids) == (0, 0)


async def test_groups_it_can_make_but_not_join_are_left_out_and_sandboxes_still_run(
    sandbox_root: Path, bwrap: str, tmp_path: Path
) -> None:
    """A host where the agent may make and configure groups but its processes cannot join them (cgroup
    v2 under a user's own delegated group; here, a tree of plain files that looks like cgroup v2)."""
    lookalike = tmp_path / "cgroup"
    lookalike.mkdir()
    (lookalike / "cgroup.controllers").write_text("cpu memory pids\n")
    (lookalike / "cgroup.subtree_control").write_text("cpu memory pids\n")
    driver = LocalSandboxDriver(sandbox_root, bwrap=bwrap, limits=LocalLimits(pids=64), cgroup_root=lookalike)

    with structlog.testing.capture_logs() as logs:
        await driver.probe()
        sandbox = await driver.create(SandboxSpec(session_id="unjoined", agent_id="agent-1"))
        result = await _sh(driver, sandbox, "echo ran")

    assert (result.returncode, result.stdout) == (0, "ran\n"), result.stderr
    [warning] = [entry for entry in logs if entry["event"] == "sandbox_limits_unavailable"]
    assert set(warning["missing"]) == {"pids", "memory", "cpu"}
    assert "cannot move a process into a cgroup" in warning["missing"]["pids"]
    assert "tasks are not limited" in warning["missing"]["pids"]
    assert not (await driver.isolation()).pids_limited
    assert await driver.destroy(sandbox) is DestroyVerdict.CONFIRMED


async def test_an_environments_limits_replace_the_drivers_for_its_sandbox_only(sandbox_root: Path, bwrap: str) -> None:
    _require("pids", LocalLimits(), sandbox_root)
    driver = LocalSandboxDriver(sandbox_root, bwrap=bwrap, limits=LocalLimits(pids=1024, memory_mb=2048))
    tight = await driver.create(
        SandboxSpec(session_id="tight", agent_id="agent-1", limits=SandboxLimits(pids=24, memory_mb=300))
    )
    roomy = await driver.create(SandboxSpec(session_id="roomy", agent_id="agent-1"))
    forks = "i=0; while [ $i -lt 60 ]; do sleep 5 & i=$((i+1)); done 2>&1; kill $(jobs -p) 2>/dev/null; echo done"
    tight_run, roomy_run = await _sh(driver, tight, forks), await _sh(driver, roomy, forks)
    assert "fork" in (tight_run.stdout + tight_run.stderr).lower()  # sh: Cannot fork
    assert roomy_run.stdout.strip() == "done" and "fork" not in roomy_run.stderr.lower()
    tight_files, roomy_files = dict(_files(_groups(tight))), dict(_files(_groups(roomy)))
    assert (tight_files["pids.max"], roomy_files["pids.max"]) == ("24", "1024")
    memory = tight_files.get("memory.max") or tight_files.get("memory.limit_in_bytes")
    if memory is not None:
        assert int(memory) == 300 * 1024 * 1024


async def test_a_driver_sweeps_only_the_groups_its_own_sandboxes_left(sandbox_root: Path, bwrap: str) -> None:
    """Two agents on one host (two sandbox roots): a driver starting sweeps the empty groups its own
    sandboxes left, and leaves the other's alone — one of them may be a group being made right now."""
    limits = LocalLimits(pids=64)
    _require("pids", limits, sandbox_root)
    ours, _ = SandboxCgroups.find(sandbox_root, limits)
    theirs, _ = SandboxCgroups.find(sandbox_root / "another-agent", limits)
    assert ours is not None and theirs is not None
    leftover = ours._group(ours._hierarchies[0], "left-by-a-crash")
    being_made = theirs._group(theirs._hierarchies[0], "being-made")
    for group in (leftover, being_made):
        group.mkdir(parents=True)
    try:
        await LocalSandboxDriver(sandbox_root, bwrap=bwrap, limits=limits).probe()
        assert (leftover.exists(), being_made.exists()) == (False, True)
    finally:
        for group in (leftover, being_made):
            if group.exists():
                group.rmdir()
