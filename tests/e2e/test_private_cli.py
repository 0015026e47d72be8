"""An agent whose Claude Code CLI its sandboxes' user cannot reach or run either runs it anyway or
refuses to start, saying how to fix it; it never starts healthy with every engine failing.

A CLI under root's home, as a clone there with its .venv has it: the sandbox image's /root is 0700
too, so a CLI mounted at its host path would be out of the sandbox user's reach; a real turn
completes. A CLI only root may run: the agent refuses to start and says what to do.

Root only: the sandboxes of a root agent run as an unprivileged uid of their own."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from astrabox.client import AstraBoxClient
from dataplane_agent.engines.claude_code import BUNDLED_CLI
from tests.e2e.test_session_end_to_end import collect_turn
from tests.support.containers import Containers
from tests.support.stack import StartDockerStack, StartStack

pytestmark = pytest.mark.e2e


@pytest.fixture
def private_dir() -> Iterator[Path]:
    """A 0700 directory in root's home."""
    if os.geteuid() != 0:
        pytest.skip("the CLI is put under root's home, and only root's agent runs sandboxes as another uid")
    private = Path(tempfile.mkdtemp(prefix="astrabox-test-cli-", dir=pwd.getpwuid(0).pw_dir))
    try:
        yield private
    finally:
        shutil.rmtree(private, ignore_errors=True)


@pytest.fixture
def private_cli(private_dir: Path) -> Path:
    """The bundled CLI in `<root's home>/<0700 directory>/venv/bin/claude`."""
    cli = private_dir / "venv" / "bin" / "claude"
    cli.parent.mkdir(parents=True)
    try:
        os.link(BUNDLED_CLI, cli)  # the same file, without copying 400 MB
    except OSError:
        shutil.copy2(BUNDLED_CLI, cli)
    return cli


@pytest.fixture
def root_only_cli(private_dir: Path) -> Path:
    """A CLI that only its owner, root, may read and run."""
    cli = private_dir / "claude"
    cli.write_text("#!/bin/sh\necho '2.1.0 (Claude Code)'\n")
    cli.chmod(0o700)
    return cli


@pytest.fixture(params=["local", "docker"])
def start_stack(request: pytest.FixtureRequest) -> StartStack:
    """Either driver's stacks."""
    return request.getfixturevalue("docker_stacks" if request.param == "docker" else "stacks")  # type: ignore[no-any-return]


async def test_a_cli_under_a_private_directory_runs_a_real_turn(
    docker_stacks: StartDockerStack, containers: Containers, private_dir: Path, private_cli: Path
) -> None:
    assert private_dir.stat().st_mode & 0o777 == 0o700
    stack = docker_stacks(args=("--claude-cli", str(private_cli)))
    async with AstraBoxClient.connect(stack.address) as client:
        session = await client.create_session(request_id="private-cli")
        ready = await client.wait_for_state(session.session_id, ["READY", "FAILED"], timeout=120)
        assert ready.runtime_available, (stack.log_dir / "agent.log").read_text()[-3000:]
        accepted = await client.send_message(session.session_id, "Please create hello.txt", client_message_id="m1")
        events = await collect_turn(client, session.session_id, accepted.turn_id)

        assert events[-1].WhichOneof("payload") == "turn_completed", events[-1]
        assert not events[-1].turn_completed.is_error
        assert (stack.host_workspace(events) / "hello.txt").read_text() == "Hello from AstraBox\n"


def test_a_cli_the_sandboxes_user_cannot_run_stops_the_agent_saying_how_to_fix_it(
    start_stack: StartStack, root_only_cli: Path
) -> None:
    with pytest.raises(RuntimeError, match="agent exited") as refused:
        start_stack(args=("--claude-cli", str(root_only_cli)))

    log = str(refused.value)
    assert f"astrabox agent: the sandbox's user cannot run the Claude Code CLI {root_only_cli}" in log
    assert f"chmod a+rx {root_only_cli}" in log
    assert "Traceback" not in log
