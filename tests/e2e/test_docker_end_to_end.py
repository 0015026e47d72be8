"""End to end with the docker driver: the foundation's session test and the workspace round trip,
unchanged, with the real CLI inside a container; a warm pool's container taken by a session; and
what a running session's container is made of. The warm pool, the idle stop and the hardened
session run under runc and under runsc (gVisor; `sandbox_runtime`).

The agent is a separate process started with `--driver docker` and a
test-only installation id; every container of that installation is removed
after each test. Skipped only when no Docker daemon answers.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from astrabox.client import AstraBoxClient
from astrabox.environments.v1 import environment_pb2 as epb
from astrabox.errors import AstraBoxError
from astrabox.sessionkernel.v1 import session_pb2
from dataplane_agent.offline_model import OfflineModel
from dataplane_agent.sandboxes.base import AGENT_LABEL, INSTALLATION_LABEL, SESSION_LABEL
from dataplane_agent.sandboxes.host_user import DEFAULT_HOST_UID
from dataplane_agent.sandboxes.isolation import RUNC, RUNSC
from tests.e2e.test_session_end_to_end import (  # noqa: F401 - the foundation's test, run here with docker
    collect_turn,
    test_real_cli_runs_bash_in_the_sandbox_and_the_stream_shows_the_whole_turn,
)
from tests.e2e.test_workspace_end_to_end import test_a_repository_round_trips_through_the_api  # noqa: F401 - with docker
from tests.support.containers import Containers
from tests.support.stack import Stack, StartDockerStack

pytestmark = pytest.mark.e2e

API_KEY = "sk-ant-e2e-real-key-never-in-a-sandbox-0123456789"


@pytest.fixture
def stack(docker_stacks: StartDockerStack) -> Stack:
    """The foundation's stack, its agent on the docker driver (and its built-in offline model)."""
    return docker_stacks()


@pytest.fixture
async def upstream() -> AsyncIterator[OfflineModel]:
    model = OfflineModel()
    await model.start()
    try:
        yield model
    finally:
        await model.stop()


@pytest.fixture
def keyed_stack(docker_stacks: StartDockerStack, upstream: OfflineModel, sandbox_runtime: str) -> Stack:
    """An agent with a real-looking API key and a model upstream of its own (the offline model), its
    sandboxes under each runtime in turn (runc, runsc: gVisor)."""
    return docker_stacks(
        args=("--sandbox-runtime", sandbox_runtime),
        env={"ANTHROPIC_API_KEY": API_KEY, "ASTRABOX_MODEL_BASE_URL": upstream.base_url},
    )


@pytest.fixture
def pooled_stack(docker_stacks: StartDockerStack, sandbox_runtime: str) -> Stack:
    return docker_stacks(args=("--warm-pool", "2", "--sandbox-runtime", sandbox_runtime))


@pytest.fixture
def reconciling_stack(docker_stacks: StartDockerStack) -> Stack:
    return docker_stacks(args=("--reconcile-interval", "1"))


@pytest.fixture
def hibernating_stack(docker_stacks: StartDockerStack, sandbox_runtime: str) -> Stack:
    return docker_stacks(args=("--sandbox-runtime", sandbox_runtime), controlplane_args=("--idle-stop-after", "2"))


async def test_a_session_takes_a_warm_container_and_the_pool_refills(
    pooled_stack: Stack, containers: Containers
) -> None:
    pool_prefix = f"/astrabox-{containers.installation}-pool-"

    async def warm() -> set[str]:
        return {c["Id"] for c in await containers.list() if c["Names"][0].startswith(pool_prefix)}

    async with asyncio.timeout(120):
        while len(prepared := await warm()) < 2:
            await asyncio.sleep(0.2)
    async with AstraBoxClient.connect(pooled_stack.address) as client:
        session = await client.create_session(request_id="docker-pooled")
        await client.wait_for_state(session.session_id, ["READY"], timeout=120)
        accepted = await client.send_message(session.session_id, "Please create hello.txt", client_message_id="m1")
        events = await collect_turn(client, session.session_id, accepted.turn_id)

        kinds = [e.WhichOneof("payload") for e in events]
        assert kinds[-1] == "turn_completed" and not events[-1].turn_completed.is_error
        workspace = pooled_stack.host_workspace(events)
        assert (workspace / "hello.txt").read_text() == "Hello from AstraBox\n"
        mine = await containers.inspect(f"astrabox-{containers.installation}-{session.session_id}")
        assert mine is not None and mine["Id"] in prepared
        async with asyncio.timeout(120):
            while len(await warm()) < 2:
                await asyncio.sleep(0.2)
        assert mine["Id"] not in await warm()


async def test_a_sessions_container_is_hardened_labelled_and_never_holds_the_key(
    keyed_stack: Stack, containers: Containers, sandbox_runtime: str
) -> None:
    async with AstraBoxClient.connect(keyed_stack.address) as client:
        session = await client.create_session(request_id="docker-hardened")
        await client.wait_for_state(session.session_id, ["READY"], timeout=120)
        accepted = await client.send_message(session.session_id, "Please create hello.txt", client_message_id="m1")
        events = await collect_turn(client, session.session_id, accepted.turn_id)
        kinds = [e.WhichOneof("payload") for e in events]
        assert kinds[-1] == "turn_completed" and not events[-1].turn_completed.is_error
        workspace = keyed_stack.host_workspace(events)
        assert (workspace / "hello.txt").read_text() == "Hello from AstraBox\n"

        [listed] = await containers.list()
        info = await containers.inspect(listed["Id"])
        assert info is not None
        host, config = info["HostConfig"], info["Config"]
        assert host["NanoCpus"] == 1_000_000_000 and host["Memory"] == 2048 * 1024 * 1024 and host["PidsLimit"] == 512
        assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd") and not host["Privileged"]
        assert host["ReadonlyRootfs"] is True and "no-new-privileges" in host["SecurityOpt"]
        assert host["NetworkMode"] == "none" and host["Runtime"] == sandbox_runtime
        # Under runsc the session's programs meet gVisor's kernel, not the host's.
        kernel = await docker_exec(listed["Id"], "dmesg 2>&1 | head -n 3; cat /proc/version")
        assert ("Starting gVisor" in kernel.stdout) == (sandbox_runtime == RUNSC), kernel.stdout
        if sandbox_runtime == RUNC:
            assert Path("/proc/version").read_text().strip() in kernel.stdout
        assert config["User"] == f"{DEFAULT_HOST_UID}:{DEFAULT_HOST_UID}"  # a uid of its own, not the image's 1000
        labels = config["Labels"]
        assert labels[SESSION_LABEL] == session.session_id and labels[AGENT_LABEL] == "e2e-agent"
        assert labels[INSTALLATION_LABEL] == containers.installation
        assert API_KEY not in json.dumps(info)
        # Nor in any process (environment or command line) or file the sandbox can see, while the CLI
        # runs. The key goes to grep on stdin, so that it is in no command line here either.
        processes = await docker_exec(
            listed["Id"], "ps -eo args; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline | tr '\\0' '\\n'"
        )
        files = await docker_exec(
            listed["Id"], "grep -rlF -f /dev/stdin /workspace /home/agent /tmp /run/astrabox", API_KEY
        )
        assert "claude" in processes.stdout and "ANTHROPIC_BASE_URL=http://127.0.0.1" in processes.stdout
        assert API_KEY not in processes.stdout
        assert files.returncode == 1 and files.stdout == ""  # grep found nothing (and read every file)
        assert API_KEY not in (keyed_stack.log_dir / "agent.log").read_text()

        await client.delete_session(session.session_id)
        # The container goes first, then its host directory: both are gone in the end.
        async with asyncio.timeout(60):
            while await containers.list() or workspace.exists():
                await asyncio.sleep(0.2)


async def docker_exec(container: str, script: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        ["docker", "exec", "-i", container, "sh", "-c", script],
        input=stdin + "\n" if stdin else "",
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_an_idle_sessions_container_removed_outside_is_rebuilt_before_its_next_message(
    reconciling_stack: Stack, containers: Containers
) -> None:
    async with AstraBoxClient.connect(reconciling_stack.address) as client:
        session = await client.create_session(request_id="docker-vanished")
        sid = session.session_id
        await client.wait_for_state(sid, ["READY"], timeout=120)
        accepted = await client.send_message(sid, "Please create hello.txt", client_message_id="m1")
        await collect_turn(client, sid, accepted.turn_id)
        name = f"astrabox-{containers.installation}-{sid}"
        before = await containers.inspect(name)
        assert before is not None
        last_seq = (await client.get_session(sid)).last_seq

        await asyncio.to_thread(subprocess.run, ["docker", "rm", "-f", name], check=True, capture_output=True)

        # No message is sent: the agent's reconciler notices and rebuilds the runtime by itself.
        seen: list[str] = []
        async with asyncio.timeout(120):
            async for event in client.watch(sid, after_seq=last_seq):
                seen.append(event.WhichOneof("payload"))
                if seen[-1] == "runtime_ready":
                    break
        assert "runtime_lost" in seen
        after = await containers.inspect(name)
        assert after is not None and after["Id"] != before["Id"] and after["State"]["Running"]
        # The workspace survived on the host, and the next message runs at once in the new container.
        again = await client.send_message(sid, "run: ls", client_message_id="m2")
        events = await collect_turn(client, sid, again.turn_id)
        assert events[-1].WhichOneof("payload") == "turn_completed" and "hello.txt" in events[-1].turn_completed.result


async def test_an_idle_sessions_container_is_stopped_and_the_next_message_starts_it_with_its_files(
    hibernating_stack: Stack, containers: Containers
) -> None:
    async with AstraBoxClient.connect(hibernating_stack.address) as client:
        session = await client.create_session(request_id="docker-idle")
        sid = session.session_id
        await client.wait_for_state(sid, ["READY"], timeout=120)
        accepted = await client.send_message(sid, "Please create hello.txt", client_message_id="m1")
        await collect_turn(client, sid, accepted.turn_id)
        name = f"astrabox-{containers.installation}-{sid}"
        running = await containers.inspect(name)
        assert running is not None and running["State"]["Running"]

        # Idle for two seconds: the control plane asks for a stop, the agent stops the container.
        async with asyncio.timeout(60):
            async for event in client.watch(sid, after_seq=accepted.seq):
                if event.WhichOneof("payload") == "runtime_stopped":
                    break
        stopped = await containers.inspect(name)
        assert stopped is not None and not stopped["State"]["Running"] and stopped["Id"] == running["Id"]
        view = await client.get_session(sid)
        assert view.runtime_stopped and view.state == session_pb2.SESSION_STATE_READY

        # The next message starts the same container again; the file and the conversation are there.
        again = await client.send_message(sid, "run: cat hello.txt", client_message_id="m2")
        events = await collect_turn(client, sid, again.turn_id)
        assert events[-1].WhichOneof("payload") == "turn_completed"
        assert "Hello from AstraBox" in events[-1].turn_completed.result
        restarted = await containers.inspect(name)
        assert restarted is not None and restarted["State"]["Running"] and restarted["Id"] == running["Id"]
        assert not (await client.get_session(sid)).runtime_stopped


@pytest.fixture
def gvisor_stack(docker_stacks: StartDockerStack, sandbox_runtime: str) -> Stack:
    return docker_stacks(args=("--sandbox-runtime", sandbox_runtime))


async def test_an_environment_asking_for_gvisor_runs_only_on_an_agent_under_runsc(
    gvisor_stack: Stack, containers: Containers, sandbox_runtime: str
) -> None:
    """`isolation: gvisor`: on an agent under runsc its session runs there (and says gVisor inside);
    on one under runc it is refused, and nothing is made."""
    async with AstraBoxClient.connect(gvisor_stack.address) as client:
        await client.environments.apply("sealed", epb.EnvironmentSpec(isolation="gvisor"))
        if sandbox_runtime == RUNC:
            with pytest.raises(AstraBoxError) as refused:
                await client.create_session(request_id="sealed-1", environment="sealed")
            assert refused.value.reason == "ISOLATION_UNAVAILABLE" and "--sandbox-runtime runsc" in str(refused.value)
            assert await containers.list() == []
            return
        session = await client.create_session(request_id="sealed-1", environment="sealed")
        await client.wait_for_state(session.session_id, ["READY"], timeout=120)
        accepted = await client.send_message(session.session_id, "run: dmesg | head -n 1", client_message_id="m1")
        events = await collect_turn(client, session.session_id, accepted.turn_id)
        assert events[-1].WhichOneof("payload") == "turn_completed"
        assert "Starting gVisor" in events[-1].turn_completed.result
        [listed] = await containers.list()
        info = await containers.inspect(listed["Id"])
        assert info is not None and info["HostConfig"]["Runtime"] == RUNSC
