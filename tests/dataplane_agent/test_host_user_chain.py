"""A root agent's launch chain (unshare, the staging shell, setpriv's drop to the sandbox's host
user, then bubblewrap) dies with the agent at every step: bubblewrap's own --die-with-parent
holds only once it runs, and an agent killed before that left the rest running on the host."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from dataplane_agent.sandboxes.host_user import HostUser

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="dropping to a sandbox's host user needs root")


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_what_the_chain_runs_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    if HostUser.missing_tools():
        pytest.skip(f"util-linux tools missing: {HostUser.missing_tools()}")
    opens, argv = HostUser().command({}, ["/bin/sleep", "600"])  # in place of bubblewrap, no die-with-parent
    launcher = tmp_path / "launcher"
    launcher.write_text(f"#!/bin/sh\n{opens}\nexec {shlex.join(argv)}\n")
    launcher.chmod(0o700)
    parent = subprocess.Popen(
        ["python3", "-c", "import subprocess, sys, time\n"
         f"child = subprocess.Popen([{str(launcher)!r}])\nprint(child.pid, flush=True)\ntime.sleep(600)"],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert parent.stdout is not None
        chain = int(parent.stdout.readline())
        deadline = time.monotonic() + 10
        while _comm(chain) != "sleep":  # setpriv has exec'd the program
            assert time.monotonic() < deadline, "the chain never reached its program"
            time.sleep(0.05)
        assert Path(f"/proc/{chain}/status").read_text().count(f"\t{HostUser().uid}\t") >= 1  # dropped
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 10
        while _state(chain) not in ("Z", "gone"):
            assert time.monotonic() < deadline, "the launch chain outlived the process that started it"
            time.sleep(0.05)
    finally:
        parent.kill()
