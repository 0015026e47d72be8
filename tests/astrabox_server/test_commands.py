"""The server's subcommands of `astrabox`: contributed by astrabox-server through entry points,
listed by the client's CLI, and the all-in-one stack behind `astrabox demo` running a real session."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.astrabox_server.test_up_settings import unreadable_lines
from tests.support.processes import Process

ASTRABOX = str(Path(sys.executable).with_name("astrabox"))
SERVER_COMMANDS = ("up", "demo", "controlplane", "agent", "image", "db")


def test_help_lists_the_server_commands_beside_the_clients() -> None:
    result = subprocess.run([ASTRABOX, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    listed = [m.group(1) for line in result.stdout.splitlines() if (m := re.match(r" {4}(\w+)", line))]
    assert sorted(listed) == sorted(
        [
            *SERVER_COMMANDS,
            "run",
            "session",
            "agents",
            "credentials",
            "environments",
            "schedules",
            "memory",
            "whoami",
            "projects",
            "keys",
            "audit",
            "hosts",
            "quotas",
            "status",
            "top",
            "webhooks",
        ]
    )
    assert "astrabox-server distribution" not in result.stdout  # the hint for a client-only install


def test_listing_the_commands_imports_neither_server_half() -> None:
    """`astrabox --help` loads every contributed command; loading them must stay cheap."""
    probe = (
        "import sys\n"
        "from astrabox.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'controlplane', 'dataplane_agent', 'claude_agent_sdk', 'asyncpg'}))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[]"


def test_a_server_command_gets_its_own_arguments() -> None:
    result = subprocess.run([ASTRABOX, "image", "build", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: astrabox image build") and "--mirror" in result.stdout
    result = subprocess.run([ASTRABOX, "demo", "--no-such-flag"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "usage: astrabox demo" in result.stderr


@pytest.mark.e2e
def test_demo_runs_one_real_session_on_the_all_in_one_stack(tmp_path: Path) -> None:
    """What ./scripts/quickstart runs: embedded PostgreSQL, control plane and agent in one process,
    the real CLI in a local sandbox against the offline model. A control plane's config file in
    ASTRABOX_CONFIG (an operator's shell) is not read by the stack's agent, which would refuse it."""
    # No model key or route from the environment: the offline model answers.
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_") and k != "ASTRABOX_MODEL_BASE_URL"}
    (tmp_path / "controlplane.toml").write_text("lease_ttl = 30\n")
    env["ASTRABOX_CONFIG"] = str(tmp_path / "controlplane.toml")
    result = subprocess.run(
        [ASTRABOX, "demo", "--timeout", "240"], capture_output=True, text=True, timeout=300, env=env
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "hello.txt: Hello from AstraBox" in result.stdout
    assert "✓ turn completed" in result.stdout
    assert result.stdout.rstrip().endswith("is READY")
    # The terminal shows the demo and readable lines only: its logs went to the file it named.
    assert unreadable_lines(result.stdout + result.stderr) == [], result.stdout + result.stderr
    log_file = Path(re.search(r"logs: (\S+)", result.stdout).group(1))  # type: ignore[union-attr]
    try:
        assert '"event": "agent_stopped"' in log_file.read_text()
    finally:
        log_file.unlink()


@pytest.mark.e2e
def test_up_as_root_with_a_private_home_comes_up_and_runs_a_session(tmp_path: Path) -> None:
    """Root's home is 0700 and root runs the embedded PostgreSQL as `postgres`, which could not reach
    ~/.astrabox there: root's state goes to /var/lib/astrabox. In a mount namespace of its own with
    a tmpfs over /var/lib, so that this machine's own /var/lib/astrabox is left alone."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("runs `astrabox up` as root in a mount namespace of its own (unshare, util-linux)")
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "ASTRABOX_"))}
    env["HOME"] = str(home)
    script = f"mount -t tmpfs -o mode=0755 astrabox-test /var/lib && exec {ASTRABOX} up --listen 127.0.0.1:0 --web-listen 127.0.0.1:0"
    up = Process("up", ["unshare", "--mount", "--propagation", "private", "sh", "-c", script], tmp_path / "up.log", env)
    try:
        address, data_dir = up.wait_for_line(r"AstraBox is up on (\S+) \(state in (\S+)\)", timeout=180).groups()
        assert data_dir == "/var/lib/astrabox"
        console = up.wait_for_line(r"console: (http://\S+)").group(1)
        with urllib.request.urlopen(console, timeout=30) as page:  # the console's page, on its own port
            assert page.status == 200 and "Content-Security-Policy" in page.headers

        run = subprocess.run(
            [ASTRABOX, "run", "--target", address, "Create hello.txt"],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,  # finds the key `up` saved in $HOME/.config/astrabox
        )
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        assert "✓ turn completed" in run.stdout
    finally:
        up.stop(timeout=60)
    assert up.proc.returncode == 0, up.tail()


@pytest.mark.e2e
@pytest.mark.parametrize("command", ["demo", "agent", "up"])
def test_a_server_command_that_fails_ends_in_one_line_saying_what_to_do(command: str, tmp_path: Path) -> None:
    cli = tmp_path / "claude"
    cli.write_text("#!/bin/sh\necho '2.1.0 (Claude Code)'\n")
    cli.chmod(0o600)  # nobody may run it
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "ASTRABOX_"))}
    env |= {"HOME": str(tmp_path), "ASTRABOX_CLAUDE_CLI": str(cli)}
    if command == "up":
        if os.geteuid() != 0:
            pytest.skip("as root, PostgreSQL runs as `postgres`, which cannot reach a private directory")
        private = tmp_path / "private"
        private.mkdir(mode=0o700)
        args, advice = (
            ["up", "--listen", "127.0.0.1:0", "--web-listen", "127.0.0.1:0", "--data-dir", str(private / "astrabox")],
            f"chmod o+x {private}",
        )
    else:
        state = ["--controlplane", "127.0.0.1:1", "--state-dir", str(tmp_path / "agent")] if command == "agent" else []
        args, advice = [command, *state], f"chmod a+rx {cli}"

    result = subprocess.run([ASTRABOX, *args], capture_output=True, text=True, timeout=300, env=env)

    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Traceback" not in result.stdout + result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"astrabox {command}: ") and advice in last
