"""The Compose stack from the README, for real: `scripts/compose up` builds the server image (kept
when its sources did not change), starts PostgreSQL, two control-plane replicas and two
docker-driver agents from deploy/compose/docker-compose.yml, and waits for both agents; the
`astrabox` CLI then runs a session through it (a turn against the offline model in a docker
sandbox) and sees it from the other replica. The stack creates no Docker network, and
`scripts/compose down --volumes` leaves no container or volume behind.

Skips, saying why, without a Docker daemon, the sandbox image, docker-compose or root (the image
build runs debootstrap); under CI those fail instead, since .ci/run installs them and runs as root.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dataplane_agent.sandboxes.base import INSTALLATION_LABEL
from tests.support.containers import require_docker

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "scripts" / "compose"
PROMPT = "Create a file hello.txt in the workspace with a greeting, then show it."


def _missing(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI must provide it: {reason}")
    pytest.skip(reason)


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True, timeout=60).stdout


@dataclass(frozen=True)
class ComposeStack:
    env: dict[str, str]
    project: str
    ports: tuple[int, int]

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(COMPOSE), *args], env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
        )

    def cli(self, *args: str, port: int | None = None) -> subprocess.CompletedProcess[str]:
        env = {name: value for name, value in self.env.items() if name != "ASTRABOX_API_KEY"}
        for line in self.compose("env").stdout.splitlines():  # what the README has the user eval
            name, _, value = line.removeprefix("export ").partition("=")
            env[name] = value
        if port is not None:
            env["ASTRABOX_TARGET"] = f"127.0.0.1:{port}"
        astrabox = str(Path(sys.executable).with_name("astrabox"))
        return subprocess.run([astrabox, *args], env=env, capture_output=True, text=True, timeout=180, check=False)


@pytest.fixture
async def compose_prerequisites() -> None:
    await require_docker()
    if shutil.which("docker-compose") is None:
        _missing("docker-compose is not installed (apt-get install docker-compose; ./scripts/test installs it as root)")
    if os.geteuid() != 0:
        _missing("scripts/compose up needs root (debootstrap builds the server image): run the tests as root")


@pytest.fixture
def compose_stack(compose_prerequisites: None, tmp_path: Path) -> Iterator[ComposeStack]:
    project = f"abxtest{uuid.uuid4().hex[:8]}"
    ports = _free_ports(3)
    env = {
        **{name: value for name, value in os.environ.items() if not name.startswith(("ASTRABOX_", "ANTHROPIC_"))},
        "ASTRABOX_VENV": sys.prefix,
        "ASTRABOX_COMPOSE_DIR": str(tmp_path / "compose"),
        "ASTRABOX_COMPOSE_PROJECT": project,
        "ASTRABOX_COMPOSE_PORT_1": str(ports[0]),
        "ASTRABOX_COMPOSE_PORT_2": str(ports[1]),
        "ASTRABOX_COMPOSE_POSTGRES_PORT": str(ports[2]),
    }
    stack = ComposeStack(env, project, (ports[0], ports[1]))
    try:
        yield stack
    finally:
        down = stack.compose("down", "--volumes", "--timeout", "20")
        for agent in (1, 2):  # the sandboxes the agents made
            ids = _docker("ps", "-aq", "--filter", f"label={INSTALLATION_LABEL}={project}-{agent}").split()
            if ids:
                _docker("rm", "--force", *ids)
        assert down.returncode == 0, down.stderr
        assert not _docker("ps", "-aq", "--filter", f"label=com.docker.compose.project={project}").split()
        assert not _docker("volume", "ls", "-q", "--filter", f"label=com.docker.compose.project={project}").split()


def _networks() -> set[str]:
    return set(_docker("network", "ls", "-q", "--no-trunc").split())


def test_the_compose_stack_starts_with_one_command_and_runs_a_session(compose_stack: ComposeStack) -> None:
    networks = _networks()
    up = compose_stack.compose("up", timeout=1200)
    assert up.returncode == 0, f"scripts/compose up failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}"
    assert "ready after" in up.stderr

    ps = compose_stack.compose("ps", "--services", "--filter", "status=running")
    assert sorted(ps.stdout.split()) == ["agent-1", "agent-2", "controlplane-1", "controlplane-2", "postgres"]
    assert _networks() == networks, "the Compose stack created a Docker network"

    run = compose_stack.cli("run", PROMPT)
    assert run.returncode == 0, run.stderr
    assert "sandbox ready: docker" in run.stdout
    assert "Hello from AstraBox" in run.stdout
    assert "✓ turn completed" in run.stdout
    session_id = run.stdout.split()[1]

    # The other replica serves the same session and its journal.
    events = compose_stack.cli("session", "events", session_id, port=compose_stack.ports[1])
    assert events.returncode == 0, events.stderr
    assert "Hello from AstraBox" in events.stdout
    listed = compose_stack.cli("session", "list", port=compose_stack.ports[0])
    assert listed.returncode == 0, listed.stderr
    assert session_id in listed.stdout

    # No secret is a value in the containers' configuration.
    secrets_dir = Path(compose_stack.env["ASTRABOX_COMPOSE_DIR"]) / "secrets"
    inspected = _docker(
        "inspect", *_docker("ps", "-q", "--filter", f"label=com.docker.compose.project={compose_stack.project}").split()
    )
    for secret in secrets_dir.iterdir():
        assert secret.read_text().strip() not in inspected, f"{secret.name} appears in docker inspect"
