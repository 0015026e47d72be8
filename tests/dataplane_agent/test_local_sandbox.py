"""The local (bubblewrap) sandbox driver: what runs inside sees its own workspace and nothing else."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest

from dataplane_agent.routes.model import ModelRoute
from dataplane_agent.runtimes.reconcile import LocalDirectoryInventory
from dataplane_agent.sandboxes.base import MODEL_PORT, DestroyVerdict, Sandbox, SandboxError, SandboxSpec
from dataplane_agent.sandboxes.limits import LocalLimits
from dataplane_agent.sandboxes.local import LocalSandboxDriver

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def driver(sandbox_root: Path, bwrap: str) -> LocalSandboxDriver:
    return LocalSandboxDriver(sandbox_root, bwrap=bwrap)


async def _sh(
    driver: LocalSandboxDriver, sandbox: Sandbox, script: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    launcher = await driver.launcher(sandbox, ["/bin/sh", "-c"], env or {})
    return await asyncio.to_thread(subprocess.run, [str(launcher), script], capture_output=True, text=True, timeout=30)


async def test_probe_accepts_a_working_bubblewrap(driver: LocalSandboxDriver) -> None:
    await driver.probe()


async def test_probe_explains_a_missing_bubblewrap(sandbox_root: Path) -> None:
    with pytest.raises(SandboxError, match=r"bubblewrap .* was not found: install it"):
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

    result = await _sh(
        driver, sandbox, "cat /proc/1/cmdline /proc/2/cmdline | tr '\\0' ' '", {"API_KEY": "key-value-1234"}
    )

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


async def test_stop_ends_what_runs_keeps_the_files_and_create_opens_it_again(
    driver: LocalSandboxDriver, sandbox_root: Path
) -> None:
    spec = SandboxSpec(session_id="hibernated", agent_id="agent-1")
    sandbox = await driver.create(spec)
    launcher = await driver.launcher(sandbox, ["/bin/sh", "-c"], {})
    # A background program of its own, as a CLI leaves behind, besides the launched one.
    running = subprocess.Popen([str(launcher), "sleep 7171 & echo written > kept.txt; wait"])
    try:
        deadline = time.monotonic() + 10
        while not (sandbox.workspace / "kept.txt").exists():
            assert time.monotonic() < deadline and running.poll() is None
            await asyncio.sleep(0.05)
        assert _host_processes("sleep 7171")

        await driver.stop(sandbox)

        assert await asyncio.to_thread(running.wait, 10) != 0  # killed, not finished
        assert not _host_processes("sleep 7171")
    finally:
        running.kill()
        running.wait()
    assert (sandbox.workspace / "kept.txt").read_text() == "written\n"
    listed = await LocalDirectoryInventory(sandbox_root, "agent-1").sandboxes()
    assert [item.sandbox for item in listed] == [sandbox]  # neither missing nor an orphan
    await driver.stop(sandbox)  # stopped already: nothing to do

    again = await driver.create(spec)

    assert again == sandbox
    result = await _sh(driver, again, "cat kept.txt")
    assert result.returncode == 0 and result.stdout == "written\n", result.stderr
    assert await driver.destroy(again) is DestroyVerdict.CONFIRMED
    assert not sandbox.workspace.parent.exists()


async def test_stop_of_a_missing_sandbox_does_nothing(driver: LocalSandboxDriver, sandbox_root: Path) -> None:
    destroyed = await driver.create(SandboxSpec(session_id="destroyed", agent_id="agent-1"))
    assert await driver.destroy(destroyed) is DestroyVerdict.CONFIRMED
    never = Sandbox(
        sandbox_id="local-never",
        driver="local",
        session_id="never",
        workspace=sandbox_root / "local-never" / "workspace",
        inner_workspace="/workspace",
        home=sandbox_root / "local-never" / "home",
    )

    await driver.stop(destroyed)
    await driver.stop(never)

    assert list(sandbox_root.iterdir()) == []


async def test_unsafe_session_ids_are_refused(driver: LocalSandboxDriver) -> None:
    with pytest.raises(SandboxError):
        await driver.create(SandboxSpec(session_id="../escape", agent_id="agent-1"))


# -- hardening -------------------------------------------------------------------


async def test_programs_run_unprivileged_in_their_own_user_namespace(driver: LocalSandboxDriver) -> None:
    isolation = await driver.isolation()
    if not isolation.user_namespace:
        pytest.skip("this kernel refuses user namespaces to bubblewrap")
    sandbox = await driver.create(SandboxSpec(session_id="uid", agent_id="agent-1"))

    result = await _sh(
        driver, sandbox, "id -un; id -u; grep CapEff /proc/self/status; unshare --user true && echo NESTED"
    )

    assert result.stdout.split()[:2] == ["agent", "1000"]
    assert "CapEff:\t0000000000000000" in result.stdout and "NESTED" not in result.stdout


async def test_the_system_is_read_only_and_the_private_directories_writable(driver: LocalSandboxDriver) -> None:
    sandbox = await driver.create(SandboxSpec(session_id="ro", agent_id="agent-1"))
    probes = "/ /usr /etc /run /workspace /tmp /home/agent"
    result = await _sh(
        driver, sandbox, f"for d in {probes}; do touch $d/probe 2>/dev/null && echo writable $d; done; true"
    )

    assert result.stdout.split("\n")[:-1] == ["writable /workspace", "writable /tmp", "writable /home/agent"]
    assert (sandbox.workspace / "probe").exists() and (sandbox.home / "probe").exists()


async def test_the_network_is_a_loopback_of_its_own(driver: LocalSandboxDriver) -> None:
    connected = asyncio.Event()
    server = await asyncio.start_server(lambda reader, writer: (connected.set(), writer.close()), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    sandbox = await driver.create(SandboxSpec(session_id="net", agent_id="agent-1"))
    try:
        script = f"cat /proc/net/dev | tail -n +3 | cut -d: -f1; bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' 2>/dev/null && echo REACHED"
        result = await _sh(driver, sandbox, script)
    finally:
        server.close()

    assert result.stdout.split() == ["lo"]  # no other interface, and the host's listener is not reachable
    assert not connected.is_set()


async def test_the_model_route_is_the_way_out(driver: LocalSandboxDriver, model_route: ModelRoute) -> None:
    sandbox = await driver.create(SandboxSpec(session_id="routed", agent_id="agent-1", model_socket=model_route.socket))
    request = "GET /v1/models HTTP/1.1\\r\\nhost: model\\r\\nx-api-key: %s\\r\\nconnection: close\\r\\n\\r\\n"
    ask = f"""bash -c 'exec 3<>/dev/tcp/127.0.0.1/{MODEL_PORT}; printf "{request}" "$ANTHROPIC_API_KEY" >&3; head -n 1 <&3'"""

    allowed = await _sh(driver, sandbox, ask, model_route.env("routed"))
    refused = await _sh(driver, sandbox, ask, {**model_route.env("routed"), "ANTHROPIC_API_KEY": "guessed"})

    assert allowed.stdout.strip() == "HTTP/1.1 200 OK", allowed.stderr
    assert refused.stdout.strip() == "HTTP/1.1 401 Unauthorized"


async def test_no_process_inside_sees_the_agents_environment(
    driver: LocalSandboxDriver, model_route: ModelRoute, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-agent-real-key-0123456789")
    sandbox = await driver.create(
        SandboxSpec(session_id="environ", agent_id="agent-1", model_socket=model_route.socket)
    )
    launcher = await driver.launcher(sandbox, ["/bin/sh", "-c"], model_route.env("environ"))
    script = "sleep 1 & cat /proc/[0-9]*/environ | tr '\\0' '\\n'; ps -eo pid,args; grep -rl sk-ant-agent /workspace /home /tmp /etc /run"

    # The SDK starts launchers with the agent's whole environment; nothing of it may reach inside.
    result = await asyncio.to_thread(
        subprocess.run, [str(launcher), script], capture_output=True, text=True, timeout=30
    )

    assert f"ANTHROPIC_API_KEY={model_route.token('environ')}" in result.stdout  # the processes' environments were read
    assert "socat" in result.stdout and "sleep 1" in result.stdout
    assert "sk-ant-agent-real-key-0123456789" not in result.stdout + result.stderr


_FORK_LOOP = """
import os, signal, time
children = []
for _ in range(80):
    try:
        child = os.fork()
    except OSError:
        break
    if child == 0:
        time.sleep(10)
        os._exit(0)
    children.append(child)
for child in children:
    os.kill(child, signal.SIGKILL)
print(len(children))
"""


async def test_limits_apply_to_everything_inside(sandbox_root: Path, bwrap: str) -> None:
    if not Path("/usr/bin/python3").exists():
        pytest.skip("the fork loop needs /usr/bin/python3 inside the sandbox")
    driver = LocalSandboxDriver(sandbox_root, bwrap=bwrap, limits=LocalLimits(pids=40, open_files=256, file_size_mb=1))
    sandbox = await driver.create(SandboxSpec(session_id="limits", agent_id="agent-1"))
    script = f"ulimit -n; ulimit -c; head -c 2000000 /dev/zero > big 2>/dev/null; wc -c < big; /usr/bin/python3 -c '{_FORK_LOOP}'"

    result = await _sh(driver, sandbox, script)

    open_files, core, written, forked = result.stdout.split()
    assert (open_files, core, written) == ("256", "0", str(1024 * 1024))
    if (await driver.isolation()).pids_limited:
        assert int(forked) < 40  # the fork loop hit the sandbox's pids cgroup
    else:
        assert int(forked) == 80


async def test_destroy_removes_the_pids_cgroup(driver: LocalSandboxDriver) -> None:
    if not (await driver.isolation()).pids_limited:
        pytest.skip("no writable pids cgroup hierarchy here")
    sandbox = await driver.create(SandboxSpec(session_id="cgroup", agent_id="agent-1"))
    result = await _sh(driver, sandbox, "cat /proc/self/cgroup")
    assert result.returncode == 0, result.stderr
    # The sandbox's group under each hierarchy (v1: <controller>/astrabox/, v2: astrabox/), found
    # without walking into other groups, which come and go while this runs.
    root = Path("/sys/fs/cgroup")
    named = f"*-{sandbox.sandbox_id}"
    groups = [path for path in [*root.glob(f"*/astrabox/{named}"), *root.glob(f"astrabox/{named}")] if path.is_dir()]
    assert any((group / "pids.max").exists() for group in groups)

    assert await driver.destroy(sandbox) is DestroyVerdict.CONFIRMED

    assert not [group for group in groups if group.exists()]


async def test_the_pids_limit_holds_again_after_a_stop(sandbox_root: Path, bwrap: str) -> None:
    if not Path("/usr/bin/python3").exists():
        pytest.skip("the fork loop needs /usr/bin/python3 inside the sandbox")
    driver = LocalSandboxDriver(sandbox_root, bwrap=bwrap, limits=LocalLimits(pids=40))
    if not (await driver.isolation()).pids_limited:
        pytest.skip("no writable pids cgroup hierarchy here")
    spec = SandboxSpec(session_id="cgroup-stop", agent_id="agent-1")
    sandbox = await driver.create(spec)
    assert (await _sh(driver, sandbox, "true")).returncode == 0

    await driver.stop(sandbox)
    again = await driver.create(spec)
    result = await _sh(driver, again, f"/usr/bin/python3 -c '{_FORK_LOOP}'")

    assert int(result.stdout) < 40, result.stderr  # the fork loop hit the sandbox's pids cgroup
    assert await driver.destroy(again) is DestroyVerdict.CONFIRMED
    assert not [path for path in Path("/sys/fs/cgroup").glob(f"**/astrabox/*-{sandbox.sandbox_id}") if path.is_dir()]


def _host_processes(command: str) -> list[str]:
    """Pids of the host's processes whose command line is `command`."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            if (
                pid.isdigit()
                and Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").strip() == command.encode()
            ):
                found.append(pid)
        except OSError:
            continue
    return found


class _StoppedAsRemoved(LocalSandboxDriver):
    """Cancels the task destroying a sandbox `hops` event-loop callbacks after its removal's thread is done,
    noting whether that task was still running then."""

    def __init__(self, root: Path, bwrap: str, hops: int) -> None:
        super().__init__(root, bwrap=bwrap)
        self.hops = hops
        self.loop = asyncio.get_running_loop()
        self.task: asyncio.Task[DestroyVerdict] | None = None
        self.cancelled_while_running = False

    def _remove(self, sandbox_id: str, directory: Path) -> None:
        super()._remove(sandbox_id, directory)
        self.loop.call_soon_threadsafe(self._cancel_after, self.hops)

    def _cancel_after(self, hops: int) -> None:
        if hops:
            self.loop.call_soon(self._cancel_after, hops - 1)
            return
        assert self.task is not None
        self.cancelled_while_running = not self.task.done()
        self.task.cancel()


async def test_a_destroy_stopped_as_its_removal_ends_is_stopped(sandbox_root: Path, bwrap: str) -> None:
    # The agent stops by cancelling its loops (the warm pool's among them, while it retires a sandbox):
    # a cancellation arriving in the few loop iterations between the removal's end and destroy's return
    # was lost (asyncio.wait_for on Python 3.11), and the loop it was meant to stop ran on.
    for hops in range(8):
        driver = _StoppedAsRemoved(sandbox_root, bwrap, hops)
        sandbox = await driver.create(SandboxSpec(session_id=f"stopped-{hops}", agent_id="agent-1"))
        driver.task = asyncio.create_task(driver.destroy(sandbox))
        await asyncio.gather(driver.task, return_exceptions=True)
        assert not sandbox.workspace.parent.exists()
        assert driver.task.cancelled() == driver.cancelled_while_running, f"cancelled {hops} callbacks after removal"
