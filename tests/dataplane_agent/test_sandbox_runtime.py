"""The docker driver's OCI runtime (`--sandbox-runtime`): what an agent refuses to start with, what a
sandbox under gVisor looks like from inside (Docker tests; runsc runs skip without it registered, and
fail under CI), and a start an agent refuses for the isolation it lacks."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from astrabox.environments.v1 import environment_pb2 as epb
from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.errors import AgentError
from dataplane_agent.main import _make_driver
from dataplane_agent.sandboxes.base import AGENT_LABEL, SESSION_LABEL, DestroyVerdict, SandboxError, SandboxSpec
from dataplane_agent.sandboxes.docker import ContainerLimits, DockerSandboxDriver
from dataplane_agent.sandboxes.isolation import RUNC, RUNSC, check_registered
from dataplane_agent.settings import AgentSettings
from tests.dataplane_agent.fakes import DirectorySandboxDriver, ScriptedEngine, result_turn, running_agent, start
from tests.support.containers import Containers, memory_mb, pids


def test_runsc_needs_the_docker_driver_and_names_it(tmp_path: Path) -> None:
    settings = AgentSettings.from_args(["--state-dir", str(tmp_path), "--sandbox-runtime", "runsc"], environ={})

    with pytest.raises(AgentError, match=r"--sandbox-runtime runsc needs the docker driver \(--driver docker\)"):
        _make_driver(settings, "agent-1", None)


def test_the_runtime_is_a_setting_with_runc_the_default(tmp_path: Path) -> None:
    assert AgentSettings.from_args([], environ={}).sandbox_runtime == RUNC
    assert AgentSettings.from_args([], environ={"ASTRABOX_SANDBOX_RUNTIME": "runsc"}).sandbox_runtime == RUNSC
    with pytest.raises(SystemExit):
        AgentSettings.from_args(["--sandbox-runtime", "kata"], environ={})


def test_a_daemon_without_runsc_is_refused_with_how_to_register_it() -> None:
    with pytest.raises(SandboxError) as refused:
        check_registered(RUNSC, {"Runtimes": {"runc": {"path": "runc"}}})

    message = str(refused.value)
    assert "has no runtime 'runsc' (it has: runc)" in message
    assert "apt-get install runsc" in message and "--platform=ptrace" in message and "kill -HUP" in message
    check_registered(RUNSC, {"Runtimes": {"runc": {}, "runsc": {}}})  # registered: nothing to say


async def test_programs_of_a_sandbox_meet_gvisors_kernel_only_under_runsc(
    containers: Containers, sandbox_root: Path, sandbox_runtime: str
) -> None:
    driver = DockerSandboxDriver(
        sandbox_root,
        installation=containers.installation,
        agent_id="agent-1",
        limits=ContainerLimits(cpus=0.5, memory_mb=memory_mb(sandbox_runtime), pids=pids(sandbox_runtime)),
        runtime=sandbox_runtime,
    )
    await driver.probe()
    spec = SandboxSpec(
        session_id="kernel", agent_id="agent-1", labels={SESSION_LABEL: "kernel", AGENT_LABEL: "agent-1"}
    )
    sandbox = await driver.create(spec)
    launcher = await driver.launcher(sandbox, ["/bin/sh", "-c"], {})
    # dmesg: gVisor's own boot log; a runc container's unprivileged user may not read the host's.
    script = "dmesg 2>&1 | head -n 2; cat /proc/version"
    result = await asyncio.to_thread(
        subprocess.run, [str(launcher), script], capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 0, result.stderr
    host_kernel = Path("/proc/version").read_text().strip()
    if sandbox_runtime == RUNSC:
        assert "Starting gVisor" in result.stdout and host_kernel not in result.stdout
    else:
        assert "gVisor" not in result.stdout and host_kernel in result.stdout
    assert await driver.destroy(sandbox) == DestroyVerdict.CONFIRMED


async def test_a_start_asking_for_gvisor_on_an_agent_without_it_fails_and_makes_nothing(tmp_path: Path) -> None:
    """The control plane places such a session only on a gVisor agent; an agent restarted with another
    runtime meanwhile refuses it rather than run it with less isolation."""
    engine, driver = ScriptedEngine(result_turn()), DirectorySandboxDriver(tmp_path / "sandboxes")
    sealed = pb.RuntimeEnvironment(
        environment_id="env-1", name="sealed", version=1, spec=epb.EnvironmentSpec(isolation="gvisor")
    )
    async with running_agent(tmp_path / "agent", engine, driver) as agent:
        ack = await agent.command("s-1", **start(environment=sealed))

        assert not ack.HasField("error")
        [failed] = await agent.outputs("s-1")
        reason = failed.runtime_start_failed.reason
        assert "asks for isolation 'gvisor'" in reason and "--sandbox-runtime runsc" in reason
        assert driver.created == [] and engine.sessions == []
        assert await agent.state.sessions() == []
