"""The local (bubblewrap) sandbox driver: what runs inside sees its own workspace and nothing else."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import pytest

from dataplane_agent.sandboxes.base import DestroyVerdict, Sandbox, SandboxError, SandboxSpec
from dataplane_agent.sandboxes.local import LocalSandboxDriver

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def driver(sandbox_root: Path, bwrap: str) -> LocalSandboxDriver:
    return LocalSandboxDriver(sandbox_root, bwrap=bwrap)


async def _sh(driver: LocalSandboxDriver, sandbox: Sandbox, script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    launcher = await driver.launcher(sandbox, ["/bin/sh", "-c"], env or {})
    return await asyncio.to_thread(subprocess.run, [str(launcher), script], capture_output=True, text=True, timeout=30)


async def test_probe_accepts_a_working_bubblewrap(driver: LocalSandboxDriver) -> None:
    await driver.probe()


async def test_probe_explains_a_missing_bubblewrap(sandbox_root: Path) -> None:
    with pytest.raises(SandboxError, match="bubblewrap .* was not found: install it"):
        await LocalSandboxDriver(sandbox_root, bwrap="/nonexistent/bwrap").probe()


async def test_a_command_writes_into_the_host_workspace(driver: LocalSandboxDriver) -> None:
    sandbox = await driver.create(SandboxSpec(session_id="s1", agent_id="agent-1"))
    assert sandbox.sandbox_id == "local-s1" and sandbox.driver == "local"

    result = await _sh(driver, sandbox, 'pwd; echo "made inside" > made.txt')

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == sandbox.inner_workspace == "/workspace"
    assert (sandbox.workspace / "made.txt").read_text() == "made inside\n"


async def test_create_reopens_an_existing_sandbox(driver: LocalSandboxDriver) -> None:
    spec = SandboxSpec(session_id="s1", agent_id="agent-1")
    first = await driver.create(spec)
    (first.workspace / "keep.txt").write_text("kept")
    (first.home / ".state").write_text("home kept")

    again = await driver.create(spec)

    assert again == first
    result = await _sh(driver, again, "cat keep.txt; echo; cat $HOME/.state")
    assert result.stdout.split("\n")[:2] == ["kept", "home kept"]


async def test_other_sessions_and_the_agent_are_invisible(driver: LocalSandboxDriver, sandbox_root: Path) -> None:
    mine = await driver.create(SandboxSpec(session_id="mine", agent_id="agent-1"))
    other = await driver.create(SandboxSpec(session_id="other", agent_id="agent-1"))
    (other.workspace / "private.txt").write_text("not for you")

    hidden = [other.workspace, sandbox_root, REPO, REPO / "pyproject.toml", Path("/etc/shadow")]
    checks = "; ".join(f"test -e '{path}' && echo 'VISIBLE {path}'" for path in hidden)
    result = await _sh(driver, mine, f"{checks}; ls -A /workspace; ls /proc | grep -c '^[0-9]'; true")

    assert result.returncode == 0, result.stderr
    assert "VISIBLE" not in result.stdout
    *listing, process_count = result.stdout.split()
    assert listing == []  # an empty workspace: the other session's file is not there
    assert int(process_count) < 10  # its own pid namespace, not the host's processes


async def test_only_the_given_environment_reaches_inside(
    driver: LocalSandboxDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASTRABOX_AGENT_SECRET", "agent-secret-value")
    sandbox = await driver.create(SandboxSpec(session_id="env", agent_id="agent-1"))
    launcher = await driver.launcher(sandbox, ["/usr/bin/env"], {"GIVEN": "yes", "API_KEY": "key-value-1234"})

    result = await asyncio.to_thread(subprocess.run, [str(launcher)], capture_output=True, text=True, timeout=30)

    env = dict(line.split("=", 1) for line in result.stdout.splitlines())
    assert set(env) == {"GIVEN", "API_KEY", "PATH", "HOME", "PWD"}  # bubblewrap's --chdir sets PWD
    assert env["GIVEN"] == "yes" and env["HOME"] == "/home/agent" and env["PWD"] == "/workspace"
    assert "agent-secret-value" not in result.stdout


async def test_credentials_stay_out_of_process_listings(driver: LocalSandboxDriver) -> None:
    sandbox = await driver.create(SandboxSpec(session_id="ps", agent_id="agent-1"))

    result = await _sh(driver, sandbox, "cat /proc/1/cmdline /proc/2/cmdline | tr '\\0' ' '", {"API_KEY": "key-value-1234"})

    assert result.returncode == 0 and "/bin/sh" in result.stdout
    assert "key-value-1234" not in result.stdout
    launcher = sandbox.workspace.parent / "run" / "sh.launcher"
    assert "key-value-1234" not in launcher.read_text()


async def test_destroy_stops_what_runs_and_removes_everything(driver: LocalSandboxDriver) -> None:
    sandbox = await driver.create(SandboxSpec(session_id="gone", agent_id="agent-1"))
    launcher = await driver.launcher(sandbox, ["/bin/sh", "-c"], {})
    running = subprocess.Popen([str(launcher), "echo started > started.txt; sleep 60"])
    try:
        deadline = time.monotonic() + 10
        while not (sandbox.workspace / "started.txt").exists():
            assert time.monotonic() < deadline and running.poll() is None
            await asyncio.sleep(0.05)

        assert await driver.destroy(sandbox) is DestroyVerdict.CONFIRMED

        assert not sandbox.workspace.parent.exists()
        assert await asyncio.to_thread(running.wait, 10) != 0  # killed, not finished
        assert await driver.destroy(sandbox) is DestroyVerdict.CONFIRMED  # already gone is gone
    finally:
        running.kill()
        running.wait()


async def test_unsafe_session_ids_are_refused(driver: LocalSandboxDriver) -> None:
    with pytest.raises(SandboxError):
        await driver.create(SandboxSpec(session_id="../escape", agent_id="agent-1"))
