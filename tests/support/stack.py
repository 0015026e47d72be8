"""A real stack for end-to-end and fault tests: PostgreSQL, control plane and agent as separate processes."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from astrabox.client import AstraBoxClient
from tests.support.containers import Containers
from tests.support.processes import Process, start_agent, start_controlplane


@dataclass
class Stack:
    address: str
    controlplane: Process
    agent_state: Path
    log_dir: Path
    database_url: str
    agents: list[Process] = field(default_factory=list)
    # Extra agent flags (e.g. `--driver docker`), for every agent this stack starts.
    agent_args: tuple[str, ...] = ()
    agent_env: dict[str, str] = field(default_factory=dict)

    @property
    def agent(self) -> Process:
        return self.agents[-1]

    def restart_controlplane(self) -> None:
        """SIGKILL the control plane and start it again on the same address."""
        self.controlplane.kill()
        self.controlplane, address = start_controlplane(self.database_url, self.log_dir, listen=self.address)
        assert address == self.address

    def start_agent(self) -> Process:
        self.agents.append(
            start_agent(self.address, self.agent_state, self.log_dir, args=self.agent_args, env=self.agent_env)
        )
        return self.agent

    def stop(self) -> None:
        for process in [*self.agents, self.controlplane]:
            process.stop()

    def host_workspace(self, events: Iterable[Any]) -> Path:
        """Where the session's workspace is on this test's host (clients only see /workspace):
        both drivers keep it in `<agent state>/sandboxes/<sandbox id>/workspace`."""
        event = next(e for e in events if e.WhichOneof("payload") == "runtime_ready")
        assert event.runtime_ready.workspace == "/workspace", event.runtime_ready.workspace
        sandboxes = self.agent_state / "sandboxes"
        if (sandboxes / event.runtime_ready.sandbox_id).is_dir():
            return sandboxes / event.runtime_ready.sandbox_id / "workspace"
        # A docker warm-pool sandbox keeps the directory it was made with; its binding names the session.
        [bound] = [b.parent.parent for b in sandboxes.glob("*/run/binding.json") if event.session_id in b.read_text()]
        return bound / "workspace"


# Starts one of the test's stacks: `(args=(), controlplane_args=(), env=None) -> Stack`.
StartStack = Callable[..., Stack]
StartDockerStack = StartStack


@pytest.fixture
def stacks(database_url: str, tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    """Starts the test's stacks: a control plane (with `controlplane_args`) and an agent (with extra
    flags `args` and environment `env`; `containers` puts it on the docker driver in that test
    installation); whatever was started is stopped afterwards."""
    started: list[Stack] = []

    def start(
        *,
        args: tuple[str, ...] = (),
        controlplane_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        containers: Containers | None = None,
    ) -> Stack:
        log_dir = tmp_path / "logs" if not started else tmp_path / f"logs-{len(started)}"
        log_dir.mkdir()
        controlplane, address = start_controlplane(database_url, log_dir, args=controlplane_args)
        driver = ("--driver", "docker", "--installation", containers.installation) if containers else ()
        stack = Stack(
            address,
            controlplane,
            tmp_path / "agent-state",
            log_dir,
            database_url,
            agent_args=(*driver, *args),
            agent_env=env or {},
        )
        started.append(stack)
        stack.start_agent()
        return stack

    try:
        yield start
    finally:
        for stack in started:
            stack.stop()


@pytest.fixture
def stack(stacks: StartStack) -> Stack:
    """The default stack: the local driver, the offline model."""
    return stacks()


@pytest.fixture
def docker_stacks(containers: Containers, stacks: StartStack) -> StartStack:
    """`stacks` with the agent on the docker driver, in the test's own installation (removed after
    the stacks are stopped)."""
    return functools.partial(stacks, containers=containers)


@pytest_asyncio.fixture
async def client(stack: Stack) -> AsyncIterator[AstraBoxClient]:
    async with AstraBoxClient.connect(stack.address) as client:
        yield client
