"""The docker sandbox driver against a real Docker Engine and the sandbox image.

These skip only when no Docker daemon answers; a missing image fails them
(`astrabox image build` makes it).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from dataplane_agent.engines.claude_code import BUNDLED_CLI
from dataplane_agent.runtimes.reconcile import inventory_for
from dataplane_agent.sandboxes.base import (
    AGENT_LABEL,
    INSTALLATION_LABEL,
    MODEL_PORT,
    POOL_LABEL,
    SESSION_LABEL,
    DestroyVerdict,
    Sandbox,
    SandboxError,
    SandboxSpec,
)
from dataplane_agent.sandboxes.docker import ContainerLimits, DockerSandboxDriver
from dataplane_agent.sandboxes.host_user import DEFAULT_HOST_UID
from tests.support.containers import Containers, memory_mb, pids

REPO = Path(__file__).resolve().parents[2]
SECRET = "sk-test-secret-value-0123456789"


@pytest.fixture
def driver(containers: Containers, sandbox_root: Path, sandbox_runtime: str) -> DockerSandboxDriver:
    """The driver under each runtime in turn: every test here runs under runc and under gVisor."""
    return DockerSandboxDriver(
        sandbox_root,
        installation=containers.installation,
        agent_id="agent-1",
        limits=ContainerLimits(cpus=0.5, memory_mb=memory_mb(sandbox_runtime), pids=pids(sandbox_runtime)),
        programs=[BUNDLED_CLI],
        runtime=sandbox_runtime,
    )


def spec(session_id: str, **kwargs: object) -> SandboxSpec:
    labels = {SESSION_LABEL: session_id, AGENT_LABEL: "agent-1", **kwargs.pop("labels", {})}  # type: ignore[dict-item]
    return SandboxSpec(session_id=session_id, agent_id="agent-1", labels=labels, **kwargs)  # type: ignore[arg-type]


async def sh(
    driver: DockerSandboxDriver, sandbox: Sandbox, script: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    launcher = await driver.launcher(sandbox, ["/bin/sh", "-c"], env or {})
    return await asyncio.to_thread(subprocess.run, [str(launcher), script], capture_output=True, text=True, timeout=60)


async def test_probe_accepts_the_image_and_names_the_fix_for_a_missing_one(
    driver: DockerSandboxDriver, containers: Containers, sandbox_root: Path
) -> None:
    await driver.probe()
    missing = DockerSandboxDriver(sandbox_root, image="astrabox/absent:none", installation=containers.installation)
    with pytest.raises(SandboxError, match=r"image astrabox/absent:none is missing: run `astrabox image build`"):
        await missing.probe()


async def test_probe_explains_an_unreachable_daemon(sandbox_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sandbox_root}/no-docker.sock")
    with pytest.raises(SandboxError, match=r"Docker daemon is not reachable.*start dockerd or set DOCKER_HOST"):
        await DockerSandboxDriver(sandbox_root).probe()


async def test_a_command_writes_into_the_host_workspace_as_an_unprivileged_user(driver: DockerSandboxDriver) -> None:
    sandbox = await driver.create(spec("s1"))
    assert sandbox.driver == "docker" and sandbox.inner_workspace == "/workspace"

    result = await sh(driver, sandbox, 'pwd; id -u; id -un; echo "made inside" > made.txt')

    assert result.returncode == 0, result.stderr
    # As root the agent runs containers as a uid of their own (not the image's 1000, often a person's).
    uid = DEFAULT_HOST_UID if os.geteuid() == 0 else os.getuid()
    assert result.stdout.split() == ["/workspace", str(uid), "agent" if os.geteuid() == 0 else result.stdout.split()[2]]
    assert (sandbox.workspace / "made.txt").read_text() == "made inside\n"
    assert (sandbox.workspace / "made.txt").stat().st_uid == uid


async def test_the_bundled_cli_runs_inside(driver: DockerSandboxDriver) -> None:
    sandbox = await driver.create(spec("cli"))
    launcher = await driver.launcher(sandbox, [str(BUNDLED_CLI)], {})

    result = await asyncio.to_thread(
        subprocess.run, [str(launcher), "--version"], capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 0, result.stderr
    assert "Claude Code" in result.stdout


async def test_create_reopens_and_restarts_a_stopped_sandbox(
    driver: DockerSandboxDriver, containers: Containers
) -> None:
    first = await driver.create(spec("again"))
    (first.workspace / "keep.txt").write_text("kept")
    subprocess.run(["docker", "stop", "-t", "0", first.sandbox_id], check=True, capture_output=True, timeout=60)

    again = await driver.create(spec("again"))

    assert again == first
    assert (await containers.inspect(first.sandbox_id) or {})["State"]["Running"]
    assert (await sh(driver, again, "cat keep.txt")).stdout == "kept"


async def test_stop_ends_what_runs_keeps_the_files_and_create_starts_it_again(
    driver: DockerSandboxDriver, containers: Containers, sandbox_root: Path
) -> None:
    sandbox = await driver.create(spec("hibernated"))
    launcher = await driver.launcher(sandbox, ["/bin/sh", "-c"], {})
    running = subprocess.Popen([str(launcher), "echo written > kept.txt; sleep 60"])
    try:
        deadline = time.monotonic() + 30
        while not (sandbox.workspace / "kept.txt").exists():
            assert time.monotonic() < deadline and running.poll() is None
            await asyncio.sleep(0.05)
        before = await containers.inspect(sandbox.sandbox_id)

        await driver.stop(sandbox)

        stopped = await containers.inspect(sandbox.sandbox_id)
        assert stopped is not None and not stopped["State"]["Running"]
        assert await asyncio.to_thread(running.wait, 30) != 0  # its program ended with the container
    finally:
        running.kill()
        running.wait()
    assert (sandbox.workspace / "kept.txt").read_text() == "written\n"
    [listed] = await driver.list_sandboxes({SESSION_LABEL: "hibernated"})
    assert listed.sandbox == sandbox and not listed.running
    inventory = inventory_for(driver, "agent-1", sandbox_root)
    assert sandbox in {item.sandbox for item in await inventory.sandboxes()}  # neither missing nor an orphan
    with pytest.raises(SandboxError, match="is not running"):
        await driver.launcher(sandbox, ["/bin/sh", "-c"], {})
    await driver.stop(sandbox)  # stopped already: nothing to do

    again = await driver.create(spec("hibernated"))

    after = await containers.inspect(again.sandbox_id)
    assert again == sandbox
    assert before is not None and after is not None and after["Id"] == before["Id"] and after["State"]["Running"]
    assert (await sh(driver, again, "cat kept.txt")).stdout == "written\n"


async def test_stop_of_a_missing_sandbox_does_nothing(driver: DockerSandboxDriver) -> None:
    removed = await driver.create(spec("removed"))
    subprocess.run(["docker", "rm", "-f", removed.sandbox_id], check=True, capture_output=True, timeout=60)
    destroyed = await driver.create(spec("destroyed"))
    assert await driver.destroy(destroyed) is DestroyVerdict.CONFIRMED

    await driver.stop(removed)
    await driver.stop(destroyed)

    assert not await driver.list_sandboxes({SESSION_LABEL: "destroyed"})


async def test_stop_refuses_a_container_of_another_session(driver: DockerSandboxDriver, containers: Containers) -> None:
    sandbox = await driver.create(spec("not-yours"))
    impostor = Sandbox(
        sandbox_id=sandbox.sandbox_id,
        driver="docker",
        session_id="someone-else",
        workspace=sandbox.workspace,
        inner_workspace="/workspace",
        home=sandbox.home,
    )

    with pytest.raises(SandboxError, match="is not the sandbox to stop: it is the sandbox of session 'not-yours'"):
        await driver.stop(impostor)

    assert (await containers.inspect(sandbox.sandbox_id) or {})["State"]["Running"]


async def test_create_makes_the_sandbox_again_when_its_workspace_was_removed(
    driver: DockerSandboxDriver, containers: Containers
) -> None:
    first = await driver.create(spec("lost"))
    before = await containers.inspect(first.sandbox_id)
    shutil.rmtree(first.workspace.parent)

    again = await driver.create(spec("lost"))

    after = await containers.inspect(again.sandbox_id)
    assert before is not None and after is not None and after["Id"] != before["Id"]
    result = await sh(driver, again, "ls -A; echo new > new.txt")
    assert result.returncode == 0 and result.stdout == ""
    assert (again.workspace / "new.txt").read_text() == "new\n"


async def test_only_the_given_environment_reaches_inside_and_never_a_command_line(driver: DockerSandboxDriver) -> None:
    sandbox = await driver.create(spec("env", env={"FROM_SPEC": "spec"}))
    launcher = await driver.launcher(sandbox, ["/bin/sh", "-c"], {"GIVEN": "yes", "API_KEY": SECRET})
    running = subprocess.Popen([str(launcher), "env; sleep 30"], stdout=subprocess.PIPE, text=True)
    try:
        assert running.stdout is not None
        env = {}
        while len(env) < 7 and (line := await asyncio.to_thread(running.stdout.readline)):
            name, _, value = line.rstrip("\n").partition("=")
            env[name] = value
        host_commands = [_cmdline(pid) for pid in os.listdir("/proc") if pid.isdigit()]
        inside = await sh(driver, sandbox, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
    finally:
        running.kill()
        running.wait()

    assert set(env) == {"GIVEN", "API_KEY", "FROM_SPEC", "PATH", "HOME", "HOSTNAME", "PWD"}  # docker adds HOSTNAME
    assert env["API_KEY"] == SECRET and env["HOME"] == "/home/agent" and env["FROM_SPEC"] == "spec"
    assert not any(SECRET in command for command in host_commands)
    assert "sleep 30" in inside.stdout and SECRET not in inside.stdout
    assert SECRET not in launcher.read_text()


async def test_the_container_is_hardened_and_its_configuration_holds_no_secret(
    driver: DockerSandboxDriver, containers: Containers, tmp_path: Path
) -> None:
    route = tmp_path / "route"
    route.mkdir(mode=0o755)
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(route / "model.sock"))
        sandbox = await driver.create(spec("hard", env={"TOKEN": SECRET}, model_socket=route / "model.sock"))
    await sh(driver, sandbox, "true", {"ANTHROPIC_API_KEY": SECRET})

    info = await containers.inspect(sandbox.sandbox_id)

    assert info is not None
    host, config = info["HostConfig"], info["Config"]
    assert (
        host["NanoCpus"] == 500_000_000
        and host["Memory"] == memory_mb(driver.runtime) << 20
        and host["PidsLimit"] == pids(driver.runtime)
    )
    assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd") and not host["Privileged"]
    assert host["ReadonlyRootfs"] is True and "no-new-privileges" in host["SecurityOpt"]
    assert host["NetworkMode"] == "none" and host["Init"] is True and host["Runtime"] == driver.runtime
    assert config["User"] not in ("", "0", "root") and not config["User"].startswith("0:")
    assert config["Labels"][SESSION_LABEL] == "hard" and config["Labels"][AGENT_LABEL] == "agent-1"
    assert config["Labels"][INSTALLATION_LABEL] == containers.installation
    mounts = {m["Destination"]: m for m in info["Mounts"]}
    read_only = {"/etc/hosts", "/etc/passwd", "/etc/group", "/run/astrabox", "/opt/astrabox/bin/claude"}
    assert set(mounts) == {"/workspace", "/home/agent", *read_only}
    assert not any(mounts[target]["RW"] for target in read_only)
    assert SECRET not in json.dumps(info)


async def test_inside_nothing_is_writable_but_the_workspace_home_and_tmp_and_no_network_but_the_loopback(
    driver: DockerSandboxDriver, tmp_path: Path
) -> None:
    mine = await driver.create(spec("mine"))
    other = await driver.create(spec("other"))
    (other.workspace / "private.txt").write_text("not for you")
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    hidden = [other.workspace, other.workspace.parent.parent, REPO / "pyproject.toml", Path("/etc/shadow")]
    checks = "; ".join(f"test -r '{path}' && echo 'VISIBLE {path}'" for path in hidden)
    script = (
        f"{checks}; for d in / /usr /etc /workspace /home/agent /tmp; do touch $d/w 2>/dev/null && echo WRITABLE $d; done; "
        f"socat -T2 /dev/null TCP:127.0.0.1:{port} 2>/dev/null && echo REACHED host; "
        "grep -c : /proc/net/dev; for n in localhost astrabox; do echo RESOLVED $n $(getent hosts $n | awk '{print $1}'); done; "
        # Not `ls`: Debian 12's runsc rejects the AT_NO_AUTOMOUNT its coreutils pass (README: Isolation tiers).
        "find /workspace -mindepth 1 -maxdepth 1"
    )
    try:
        result = await sh(driver, mine, script)
    finally:
        server.close()

    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")
    assert "VISIBLE" not in result.stdout and "REACHED" not in result.stdout
    assert [line for line in lines if line.startswith("WRITABLE")] == [
        "WRITABLE /workspace",
        "WRITABLE /home/agent",
        "WRITABLE /tmp",
    ]
    assert "1" in lines  # one interface: the loopback
    assert [line for line in lines if line.startswith("RESOLVED")] == [
        "RESOLVED localhost ::1",
        "RESOLVED astrabox 127.0.0.1",
    ]
    assert "private.txt" not in result.stdout


async def test_the_model_route_reaches_the_socket_from_the_sandbox_loopback(
    driver: DockerSandboxDriver, tmp_path: Path
) -> None:
    route = tmp_path / "route"
    route.mkdir(mode=0o755)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"route: " + await reader.readline())
        await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(answer, str(route / "model.sock"))
    (route / "model.sock").chmod(0o666)
    try:
        sandbox = await driver.create(spec("routed", model_socket=route / "model.sock"))
        launcher = await driver.launcher(sandbox, ["/bin/sh", "-c"], {})
        result = await asyncio.create_subprocess_exec(
            str(launcher), f"echo hello | socat -t5 - TCP:127.0.0.1:{MODEL_PORT}", stdout=asyncio.subprocess.PIPE
        )
        out, _ = await asyncio.wait_for(result.communicate(), 60)
    finally:
        server.close()

    assert out == b"route: hello\n"


async def test_destroy_removes_the_container_and_its_directory(
    driver: DockerSandboxDriver, containers: Containers
) -> None:
    sandbox = await driver.create(spec("gone"))
    launcher = await driver.launcher(sandbox, ["/bin/sh", "-c"], {})
    running = subprocess.Popen([str(launcher), "sleep 60"])
    try:
        assert await driver.destroy(sandbox) is DestroyVerdict.CONFIRMED

        assert await containers.inspect(sandbox.sandbox_id) is None
        assert not sandbox.workspace.parent.exists()
        assert await asyncio.to_thread(running.wait, 30) != 0  # its program ended with the container
        assert await driver.destroy(sandbox) is DestroyVerdict.CONFIRMED  # already gone is gone
    finally:
        running.kill()
        running.wait()


async def test_destroy_refuses_a_container_of_another_session_or_agent(
    driver: DockerSandboxDriver, containers: Containers, sandbox_root: Path
) -> None:
    sandbox = await driver.create(spec("owned"))
    impostor = Sandbox(
        sandbox_id=sandbox.sandbox_id,
        driver="docker",
        session_id="someone-else",
        workspace=sandbox.workspace,
        inner_workspace="/workspace",
        home=sandbox.home,
    )
    other_agent = DockerSandboxDriver(sandbox_root, installation=containers.installation, agent_id="agent-2")

    assert await driver.destroy(impostor) is DestroyVerdict.REFUSED
    assert await other_agent.destroy(sandbox) is DestroyVerdict.REFUSED
    assert await containers.inspect(sandbox.sandbox_id) is not None and sandbox.workspace.exists()


async def test_destroy_is_unconfirmed_when_docker_cannot_answer(
    driver: DockerSandboxDriver, sandbox_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox = await driver.create(spec("unanswered"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sandbox_root}/no-docker.sock")

    assert await driver.destroy(sandbox) is DestroyVerdict.UNCONFIRMED

    assert sandbox.workspace.exists()


async def test_list_by_labels(driver: DockerSandboxDriver, containers: Containers, sandbox_root: Path) -> None:
    started = time.time()
    one = await driver.create(spec("one"))
    two = await driver.create(spec("two", labels={"team": "blue"}))
    elsewhere = DockerSandboxDriver(sandbox_root, installation=containers.installation, agent_id="agent-2")
    theirs = await elsewhere.create(SandboxSpec(session_id="three", agent_id="agent-2"))

    mine = await driver.list_sandboxes({AGENT_LABEL: "agent-1"})
    blue = await driver.list_sandboxes({"team": "blue"})
    everything = await driver.list_sandboxes()

    assert {item.sandbox for item in mine} == {one, two} and all(item.running for item in mine)
    assert [item.sandbox for item in blue] == [two] and blue[0].labels[SESSION_LABEL] == "two"
    assert blue[0].created_at >= int(started) - 1
    assert {item.sandbox.session_id for item in everything} == {"one", "two", "three"}
    assert await elsewhere.destroy(theirs) is DestroyVerdict.CONFIRMED
    assert await driver.destroy(one) is DestroyVerdict.CONFIRMED
    assert [item.sandbox for item in await driver.list_sandboxes()] == [two]


async def test_a_pool_sandbox_rebound_to_a_session_is_that_sessions(
    driver: DockerSandboxDriver, containers: Containers
) -> None:
    warm = await driver.create(SandboxSpec(session_id="pool-1", agent_id="agent-1", labels={POOL_LABEL: "key"}))
    (warm.home / ".cache").mkdir()

    bound = await driver.rebind(warm, spec("claimer", env={"BOUND": "yes"}))

    assert bound.session_id == "claimer" and bound.sandbox_id != warm.sandbox_id
    assert await containers.inspect(warm.sandbox_id) is None
    [listed] = await driver.list_sandboxes({SESSION_LABEL: "claimer"})
    assert listed.sandbox == bound and POOL_LABEL not in listed.labels
    assert not await driver.list_sandboxes({POOL_LABEL: "key"})
    assert (await sh(driver, bound, "echo $BOUND > bound.txt; cat bound.txt")).stdout == "yes\n"
    assert await driver.create(spec("claimer")) == bound  # re-opened, not made again
    with pytest.raises(SandboxError, match="has a sandbox already"):
        other = await driver.create(SandboxSpec(session_id="pool-2", agent_id="agent-1", labels={POOL_LABEL: "key"}))
        await driver.rebind(other, spec("claimer"))
    assert await driver.destroy(warm) is DestroyVerdict.REFUSED  # the pool's stale record
    assert await driver.destroy(bound) is DestroyVerdict.CONFIRMED
    assert not bound.workspace.exists()


def pool_spec(pool_id: str) -> SandboxSpec:
    return SandboxSpec(session_id=pool_id, agent_id="agent-1", labels={POOL_LABEL: "key"})


async def test_a_claim_for_a_session_that_has_a_sandbox_fails_and_leaves_both_as_they_were(
    driver: DockerSandboxDriver, containers: Containers
) -> None:
    taken = await driver.create(spec("taken", env={"WHOSE": "taken"}))
    warm = await driver.create(pool_spec("pool-3"))

    with pytest.raises(SandboxError, match=r"session taken has a sandbox already"):
        await driver.rebind(warm, spec("taken", env={"WHOSE": "claimer"}))

    [pooled] = await driver.list_sandboxes({POOL_LABEL: "key"})
    assert pooled.sandbox == warm and pooled.labels[SESSION_LABEL] == "pool-3"
    [session] = await driver.list_sandboxes({SESSION_LABEL: "taken"})
    assert session.sandbox == taken
    assert (await sh(driver, taken, "echo $WHOSE")).stdout == "taken\n"
    assert await driver.destroy(warm) is DestroyVerdict.CONFIRMED  # the pool can retire it
    assert await containers.inspect(taken.sandbox_id) is not None


async def test_a_claim_of_a_pool_sandbox_removed_behind_our_back_fails_and_its_directory_can_be_retired(
    driver: DockerSandboxDriver,
) -> None:
    warm = await driver.create(pool_spec("pool-4"))
    subprocess.run(["docker", "rm", "-f", warm.sandbox_id], check=True, capture_output=True, timeout=60)

    with pytest.raises(SandboxError, match=rf"sandbox {warm.sandbox_id} does not exist"):
        await driver.rebind(warm, spec("late"))

    assert not await driver.list_sandboxes({SESSION_LABEL: "late"})
    assert await driver.destroy(warm) is DestroyVerdict.CONFIRMED
    assert not warm.workspace.parent.exists()


async def test_a_pool_sandbox_claimed_twice_stays_with_its_first_session(driver: DockerSandboxDriver) -> None:
    warm = await driver.create(pool_spec("pool-5"))
    first = await driver.rebind(warm, spec("first", env={"WHOSE": "first"}))

    with pytest.raises(SandboxError, match=r"went to session 'first' already"):
        await driver.rebind(warm, spec("second", env={"WHOSE": "second"}))

    [listed] = await driver.list_sandboxes({SESSION_LABEL: "first"})
    assert listed.sandbox == first
    assert not await driver.list_sandboxes({SESSION_LABEL: "second"})
    assert (await sh(driver, first, "echo $WHOSE")).stdout == "first\n"


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


async def test_a_launchers_docker_exec_client_dies_with_the_process_that_started_it(
    driver: DockerSandboxDriver,
) -> None:
    """What runs under `docker exec` outlives the client's parent (it may ignore its input: a CLI
    busy with a tool), and without a parent-death signal the client lingered on the host after an
    agent was killed. Here a parent (standing for the agent) starts a launcher and is SIGKILLed."""
    sandbox = await driver.create(spec("orphan"))
    launcher = await driver.launcher(sandbox, ["/bin/sh", "-c"], {})
    # The parent starts the launcher with stdin held open by nobody else, prints its pid, then waits.
    parent = subprocess.Popen(
        ["python3", "-c", "import subprocess, sys, time\n"
         f"child = subprocess.Popen([{str(launcher)!r}, 'trap \"\" HUP PIPE; sleep 600'], stdin=subprocess.PIPE)\n"
         "print(child.pid, flush=True)\ntime.sleep(600)"],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert parent.stdout is not None
        client = int(parent.stdout.readline())
        await asyncio.sleep(2)  # the exec runs
        assert Path(f"/proc/{client}").exists()
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{client}").exists() and _state(client) != "Z":
            assert time.monotonic() < deadline, f"the docker exec client {client} outlived its parent"
            await asyncio.sleep(0.1)
    finally:
        parent.kill()
        await driver.stop(sandbox)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


async def test_python3_and_node_run_in_the_sandbox(driver: DockerSandboxDriver) -> None:
    """What agents commonly bring (scripts, tools, stdio MCP servers) has its interpreters."""
    sandbox = await driver.create(spec("interpreters"))
    result = await sh(driver, sandbox, "python3 -c 'print(6 * 7)' && node -e 'console.log(6 * 7)'")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["42", "42"]
