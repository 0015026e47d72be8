"""A sandbox's CPU and memory as the agent's metrics see them, read from a real sandbox of each driver
(local: its cgroups; docker: the container's stats) while a program in it holds memory and spins, and
after it ends: no sandbox named, only the totals and the largest."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from dataplane_agent.sandboxes.base import AGENT_LABEL, SESSION_LABEL, DestroyVerdict, Sandbox, SandboxSpec
from dataplane_agent.sandboxes.docker import ContainerLimits, DockerSandboxDriver
from dataplane_agent.sandboxes.limits import LocalLimits, SandboxCgroups
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from dataplane_agent.sandboxes.usage import UsageSampler, UsageSnapshot
from tests.support.containers import Containers

MB = 1_000_000
# Holds 50 MB in a shell variable, says so, then spins until `stop` appears in the workspace ($1).
HOG = 'x=$(head -c 50000000 /dev/zero | tr "\\0" a); echo ready; while [ ! -e "$1/stop" ]; do :; done; echo ${#x}'


async def until(sampler: UsageSampler, check: Callable[[UsageSnapshot], bool], what: str) -> UsageSnapshot:
    try:
        async with asyncio.timeout(60):
            while not check(snapshot := await sampler.sample()):
                await asyncio.sleep(0.5)
    except TimeoutError:
        raise AssertionError(f"never seen: {what} (last: {sampler.snapshot})") from None
    return snapshot


async def measure_a_hog(driver: LocalSandboxDriver | DockerSandboxDriver, sandbox: Sandbox) -> None:
    sampler = UsageSampler(driver, lambda: [sandbox], interval=1)
    assert sampler.available
    launcher = await driver.launcher(sandbox, ["/bin/sh", "-c", HOG, "hog", sandbox.inner_workspace], {})
    process = subprocess.Popen([str(launcher)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        assert await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 60) == "ready\n"
        first = await sampler.sample()
        assert first.measured == 1
        assert first.memory_bytes >= 50 * MB and first.memory_bytes_max == first.memory_bytes
        # From its second sample on, the spinning sandbox has a rate, and the CPU it used keeps growing.
        busy = await until(
            sampler,
            lambda s: s.cpu_cores > 0 and s.cpu_seconds_total > first.cpu_seconds_total,
            "the sandbox's CPU in use",
        )
        assert busy.cpu_cores_max == busy.cpu_cores and busy.measured == 1
        (sandbox.workspace / "stop").touch()
        stdout, stderr = await asyncio.wait_for(asyncio.to_thread(process.communicate), 60)
        assert stdout.strip() == "50000000", stderr
        # Its memory is let go with the program; the CPU it used stays counted.
        idle = await until(sampler, lambda s: s.memory_bytes < 40 * MB, "the memory let go")
        assert idle.cpu_seconds_total >= busy.cpu_seconds_total
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert await driver.destroy(sandbox) is DestroyVerdict.CONFIRMED
    gone = await sampler.sample()
    assert (gone.measured, gone.memory_bytes, gone.cpu_cores) == (0, 0, 0)
    assert gone.cpu_seconds_total == idle.cpu_seconds_total


async def test_a_local_sandbox_is_measured_from_its_cgroups(sandbox_root: Path, bwrap: str) -> None:
    cgroups, missing = SandboxCgroups.find(sandbox_root, LocalLimits())
    if cgroups is None or "memory" not in cgroups.controllers:
        pytest.skip(f"no memory cgroup here, so local sandboxes are not measured: {missing.get('memory')}")
    driver = LocalSandboxDriver(sandbox_root, bwrap=bwrap)
    await measure_a_hog(driver, await driver.create(SandboxSpec(session_id="measured", agent_id="agent-1")))


async def test_a_docker_sandbox_is_measured_from_its_container_stats(
    containers: Containers, sandbox_root: Path
) -> None:
    driver = DockerSandboxDriver(
        sandbox_root,
        installation=containers.installation,
        agent_id="agent-1",
        limits=ContainerLimits(cpus=1, memory_mb=512, pids=128),
    )
    labels = {SESSION_LABEL: "measured", AGENT_LABEL: "agent-1"}
    await measure_a_hog(
        driver, await driver.create(SandboxSpec(session_id="measured", agent_id="agent-1", labels=labels))
    )


async def test_a_driver_that_cannot_measure_says_so_and_reads_zero(sandbox_root: Path) -> None:
    class Unmeasured:
        name = "elsewhere"

    sampler = UsageSampler(Unmeasured(), list, interval=1)
    assert not sampler.available
    await sampler.run()  # returns at once: nothing to sample
    assert await sampler.sample() == UsageSnapshot()
