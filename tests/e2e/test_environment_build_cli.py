"""`astrabox environments build` and `apply` as a user runs them against a real stack (a real agent on
the local driver building with the host's pip): each agent's progress shown as it streams, then READY
and exit 0 for a tiny environment (pip `six`), or FAILED with pip's own error and exit 1 for a package
that does not exist. Also `client.environments.build` yielding the steps as dataclasses, a setup
script reaching the network through the egress proxy only where its environment's policy allows (on
both drivers), `--timeout` ending the wait (not the build), and an environment with nothing to
build building nothing."""

from __future__ import annotations

import functools
import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from astrabox.client import AstraBoxClient
from tests.support.stack import Stack, StartStack

pytestmark = pytest.mark.e2e

ASTRABOX = [sys.executable, "-m", "astrabox"]
MISSING = "astrabox-no-such-package-4f1c"


def astrabox(stack: Stack, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ASTRABOX, args[0], "--target", stack.address, *args[1:]], capture_output=True, text=True, timeout=600, cwd=cwd
    )


async def test_build_shows_progress_then_ready_or_the_pip_error(
    stack: Stack, client: AstraBoxClient, tmp_path: Path
) -> None:
    (tmp_path / "tiny.yaml").write_text("name: tiny\npackages:\n  pip: [six]\n")
    applied = astrabox(stack, "environments", "apply", "--no-build", "tiny.yaml", cwd=tmp_path)
    assert (applied.returncode, applied.stdout) == (0, "created tiny v1\n"), applied.stderr

    built = astrabox(stack, "environments", "build", "tiny", "--wait")
    assert built.returncode == 0, built.stdout + built.stderr
    lines = built.stdout.splitlines()
    agent_id = lines[-1].split()[0]
    # Not a terminal: one line per step, the steps before the end, READY last.
    assert any(line.startswith(f"{agent_id}  [") and "pip" in line for line in lines[:-1]), built.stdout
    assert "READY" in lines[-1] and "100%" in lines[-1], built.stdout
    assert "FAILED" not in built.stdout

    # Built once: asked again, the agent answers READY at once.
    again = [step async for step in client.environments.build("tiny", 1)]
    assert [(s.agent_id, s.state) for s in again][-1] == (agent_id, "ready")
    assert again[-1].build_digest == (await client.environments.get("tiny"))[1].build_digest

    (tmp_path / "broken.yaml").write_text(f"name: broken\npackages:\n  pip: [{MISSING}]\n")
    failed = astrabox(stack, "environments", "apply", "broken.yaml", cwd=tmp_path)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    out = failed.stdout.splitlines()
    assert out[0] == "created broken v1"
    failure = next(i for i, line in enumerate(out) if "FAILED" in line)
    assert out[failure].startswith(f"{agent_id}  FAILED (pip)"), failed.stdout
    # pip's own words, below the line, indented.
    error = "\n".join(out[failure + 1 :])
    assert error.startswith("    ") and "No matching distribution found" in error and MISSING in error, failed.stdout


async def test_build_without_wait_returns_at_the_first_step_and_the_build_goes_on(
    stack: Stack, client: AstraBoxClient, tmp_path: Path
) -> None:
    (tmp_path / "tiny.yaml").write_text("name: tiny\npackages:\n  pip: [six]\n")
    assert astrabox(stack, "environments", "apply", "--no-build", "tiny.yaml", cwd=tmp_path).returncode == 0
    started = astrabox(stack, "environments", "build", "tiny")
    assert started.returncode == 0, started.stderr
    assert started.stdout.splitlines()[-1] == "the build goes on on the agents; `--wait` follows it to its end"
    # The build went on without the caller: its end is READY.
    steps = [step async for step in client.environments.build("tiny")]
    assert steps[-1].state == "ready" and steps[-1].done

    unknown = astrabox(stack, "environments", "build", "tiny", "--agent", "agent-nobody", "--wait")
    assert unknown.returncode == 1 and "AGENT_NOT_CONNECTED" in unknown.stderr, unknown.stderr


async def test_a_build_past_its_timeout_exits_1_naming_the_agent_and_goes_on(
    stack: Stack, client: AstraBoxClient, tmp_path: Path
) -> None:
    # The setup script alone takes 8 s: the build cannot be over when a 1 s timeout runs out.
    (tmp_path / "slow.yaml").write_text(
        'name: slow\nsetup: |\n  sleep 8\n  echo done > "$ASTRABOX_LAYER/usr/slow.txt"\n'
    )
    applied = astrabox(stack, "environments", "apply", "slow.yaml", "--timeout", "1s", cwd=tmp_path)
    assert applied.returncode == 1, applied.stdout + applied.stderr
    assert applied.stdout.splitlines()[0] == "created slow v1"
    [agent] = await client.admin.list_agents()
    agent_id = agent.agent_id
    assert "--timeout ran out waiting for the build of slow: still building on" in applied.stderr, applied.stderr
    assert agent_id in applied.stderr and "The build goes on on the agents" in applied.stderr
    assert "READY" not in applied.stdout

    # It went on: followed again, it ends READY, and the layer holds what the script wrote.
    steps = [step async for step in client.environments.build("slow")]
    assert steps[-1].state == "ready", steps
    _, version = await client.environments.get("slow")
    assert (stack.agent_state / "layers" / version.build_digest / "usr" / "slow.txt").read_text() == "done\n"

    bad = astrabox(stack, "environments", "build", "slow", "--wait", "--timeout", "soon")
    assert bad.returncode == 2 and "is not a duration" in bad.stderr, bad.stderr


async def test_an_environment_with_nothing_to_build_builds_nothing(stack: Stack, tmp_path: Path) -> None:
    (tmp_path / "plain.yaml").write_text("name: plain\nvariables: {SHIP: Argo}\n")
    applied = astrabox(stack, "environments", "apply", "plain.yaml", cwd=tmp_path)
    assert (applied.returncode, applied.stdout) == (0, "created plain v1\n"), applied.stderr
    built = astrabox(stack, "environments", "build", "plain", "--wait")
    assert built.returncode == 0, built.stderr
    assert built.stdout == (
        "plain has no package and no setup script: no layer to build (its sessions start on the plain sandbox)\n"
    )
    assert not (stack.agent_state / "layers").exists() or not any(
        entry.name != ".staging" for entry in (stack.agent_state / "layers").iterdir()
    )


@pytest.fixture
def served(tmp_path: Path) -> Iterator[int]:
    """A file served over HTTP on the host's loopback at 127.0.0.2 (127.0.0.1 inside a sandbox is
    the sandbox's own, never proxied); its port."""
    root = tmp_path / "served"
    root.mkdir()
    (root / "tool.txt").write_text("fetched by the setup script\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.2", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    thread.join()


def _setup_env(name: str, port: int, allowed: str) -> str:
    return (
        f"name: {name}\n"
        "setup: |\n"
        f'  curl -fsS http://127.0.0.2:{port}/tool.txt -o "$ASTRABOX_LAYER/usr/tool.txt"\n'
        "network:\n"
        "  mode: limited\n"
        f'  allowed_hosts: ["{allowed}"]\n'
    )


async def test_a_setup_script_fetches_what_its_network_policy_allows(
    stacks: StartStack, served: int, tmp_path: Path
) -> None:
    # The agent may connect to loopback for sandboxes (a test server stands for the internet here).
    stack = stacks(args=("--egress-allowed-networks", "127.0.0.0/8"))
    (tmp_path / "allowed.yaml").write_text(_setup_env("allowed", served, f"127.0.0.2:{served}"))
    built = astrabox(stack, "environments", "apply", "allowed.yaml", cwd=tmp_path)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "READY" in built.stdout.splitlines()[-1], built.stdout
    async with AstraBoxClient.connect(stack.address) as client:
        _, version = await client.environments.get("allowed")
    layer = stack.agent_state / "layers" / version.build_digest
    assert (layer / "usr" / "tool.txt").read_text() == "fetched by the setup script\n"

    # The same script under a policy that does not name the host: the proxy refuses, curl says so.
    (tmp_path / "refused.yaml").write_text(_setup_env("refused", served, "example.com"))
    refused = astrabox(stack, "environments", "apply", "refused.yaml", cwd=tmp_path)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "FAILED (setup)" in refused.stdout, refused.stdout
    assert "curl: (22)" in refused.stdout and "403" in refused.stdout, refused.stdout


async def test_a_docker_agents_setup_script_fetches_what_its_network_policy_allows(
    docker_stacks: StartStack, served: int, tmp_path: Path
) -> None:
    """The same on the docker driver: the build container reaches the proxy over the relayed socket
    (the image has no curl: Perl's HTTP::Tiny, which honours http_proxy, fetches)."""
    stack = docker_stacks(args=("--egress-allowed-networks", "127.0.0.0/8"))
    fetch = (
        'perl -MHTTP::Tiny -e \'$r = HTTP::Tiny->new->get($ARGV[0]); $r->{success} or die "$r->{status}\\n";'
        f' print $r->{{content}}\' http://127.0.0.2:{served}/tool.txt > "$ASTRABOX_LAYER/tool.txt"'
    )
    (tmp_path / "fetching.yaml").write_text(
        f'name: fetching\nsetup: |\n  {fetch}\nnetwork:\n  mode: limited\n  allowed_hosts: ["127.0.0.2:{served}"]\n'
    )
    built = astrabox(stack, "environments", "apply", "fetching.yaml", cwd=tmp_path)
    assert built.returncode == 0, built.stdout + built.stderr
    async with AstraBoxClient.connect(stack.address) as client:
        _, version = await client.environments.get("fetching")
    image = f"astrabox/env:{version.build_digest[:20]}"
    try:
        shown = subprocess.run(
            ["docker", "run", "--rm", "--network", "none", image, "cat", "/opt/astrabox/env/tool.txt"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert shown.stdout == "fetched by the setup script\n", shown.stderr
    finally:
        subprocess.run(["docker", "rmi", "--force", image], capture_output=True, timeout=120)
