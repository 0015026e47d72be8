"""What a sandbox writes carries no host privilege: a setuid binary it plants is owned by an
unprivileged host uid (never root) and sits in directories private to the agent, on both drivers."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
from pathlib import Path

import pytest

from dataplane_agent.sandboxes.base import Sandbox, SandboxDriver
from tests.dataplane_agent.test_hostile_archives import box  # noqa: F401 - fixture: a sandbox of each driver

PLANT = "for d in /workspace /home/agent /tmp; do cp /usr/bin/id $d/suid-id && chmod 6755 $d/suid-id || exit 1; done"
NOBODY = 65534


async def run_inside(driver: SandboxDriver, sandbox: Sandbox, script: str) -> subprocess.CompletedProcess[str]:
    launcher = await driver.launcher(sandbox, ["/bin/sh", "-c"], {})
    return await asyncio.to_thread(subprocess.run, [str(launcher), script], capture_output=True, text=True, timeout=60)


def planted(sandbox: Sandbox) -> list[Path]:
    found = [sandbox.workspace / "suid-id", sandbox.home / "suid-id"]
    tmp = sandbox.workspace.parent / "tmp" / "suid-id"
    return found + ([tmp] if tmp.exists() else [])  # docker's /tmp is a tmpfs in the container


def as_nobody(path: Path) -> subprocess.CompletedProcess[str]:
    """Run `path` as an unprivileged host user; returncode 126 (and stderr) if it cannot."""
    try:
        return subprocess.run(
            [str(path)], capture_output=True, text=True, timeout=30, user=NOBODY, group=NOBODY, extra_groups=[], cwd="/"
        )
    except PermissionError as error:
        return subprocess.CompletedProcess([str(path)], 126, "", str(error))


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to an unprivileged host user (nobody) needs root")
async def test_a_planted_setuid_binary_gives_a_host_user_nothing(box, request) -> None:
    driver, sandbox = box
    driver_id = request.node.callspec.id
    result = await run_inside(driver, sandbox, PLANT)
    assert result.returncode == 0, result.stderr
    for path in planted(sandbox):
        info = os.lstat(path)
        assert info.st_mode & stat.S_ISUID, f"{path}: the sandbox could set the bit (it is its own file)"
        assert info.st_uid != 0 and info.st_gid != 0, f"{path} is root's on the host"
        # The agent's directories keep host users away from it altogether...
        assert as_nobody(path).returncode != 0, f"{path} is reachable by an unprivileged host user"
    # ...and opened up (as a careless operator might), it runs as the sandbox's unprivileged uid.
    parents = [p for p in sandbox.workspace.parents if p != Path("/")][:6]
    modes = {p: stat.S_IMODE(os.stat(p).st_mode) for p in parents}
    try:
        for p in parents:
            os.chmod(p, modes[p] | 0o755)
        os.chmod(sandbox.workspace, stat.S_IMODE(os.stat(sandbox.workspace).st_mode) | 0o755)
        if "runsc" in driver_id:
            # gVisor's file server keeps a file the sandbox wrote open for writing while the
            # sandbox runs (the host would answer "Text file busy"): stopped, it lets go.
            await driver.stop(sandbox)
        result = as_nobody(sandbox.workspace / "suid-id")
    finally:
        for p, mode in modes.items():
            os.chmod(p, mode)
    assert result.returncode == 0, result.stderr
    assert "uid=65534" in result.stdout
    assert "euid=0" not in result.stdout and "egid=0" not in result.stdout, result.stdout
    owner = os.lstat(sandbox.workspace / "suid-id").st_uid
    assert f"euid={owner}" in result.stdout, result.stdout
