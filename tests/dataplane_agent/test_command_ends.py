"""A workspace command's timeout, cancellation or end ends every process it started, on both
drivers: a fork bomb is stopped at its timeout, what it left behind does not outlive it, and the
session's next command — and another session's, meanwhile — runs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.sandboxes.base import AGENT_LABEL, SESSION_LABEL, Sandbox, SandboxSpec
from tests.dataplane_agent.test_hostile_archives import box, service  # noqa: F401 - fixture: a sandbox of each driver

FORK_BOMB = "bomb() { bomb | bomb & }; bomb; sleep 600"
# Processes of this sandbox other than the one asking (ps is not in every image: /proc is).
# Processes of the sandbox other than this shell, zombies aside (a killed process the sandbox's init
# has not reaped yet is no longer running; on a loaded machine the reaping can come after the count).
COUNT = (
    'n=0; for p in /proc/[0-9]*; do [ "${p#/proc/}" = $$ ] && continue; '
    'st=$(< "$p/stat") 2>/dev/null || continue; st=${st##*) }; [ "${st%% *}" = Z ] || n=$((n+1)); done; echo $n'
)


def marked_processes() -> list[int]:
    """Processes anywhere on this host (sandboxes included: same kernel) that a workspace command
    started, by the marker in their environment. Root reads every environ; others see their own."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"\0ASTRABOX_RUN=" in b"\0" + (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def output(replies: list[pb.WorkspaceReply]) -> str:
    return b"".join(r.stdout for r in replies).decode()


async def test_a_fork_bomb_ends_at_its_timeout_and_the_next_command_runs(box, sandbox_root: Path, request) -> None:
    if "runsc" in request.node.callspec.id:
        # Known open problem, not a passing case: under gVisor (Debian's runsc, ptrace platform) the
        # command after a fork bomb has ended exits 0 with no output at all. Until that is understood,
        # a fork bomb is contained under runc and bubblewrap only (README, "Isolation").
        pytest.xfail("under gVisor the command after a fork bomb returns no output (open problem)")
    driver, sandbox = box
    client = service(driver, sandbox)
    baseline = int(output(await client.call(exec_command=pb.ExecCommand(command=COUNT))).split()[-1])

    other: Sandbox = await driver.create(
        SandboxSpec(session_id="s2", agent_id="a1", labels={SESSION_LABEL: "s2", AGENT_LABEL: "a1"})
    )
    try:
        other_client = service(driver, other)
        bomb = asyncio.create_task(client.call(exec_command=pb.ExecCommand(command=FORK_BOMB, timeout_ms=3000)))
        await asyncio.sleep(1.0)
        meanwhile = await other_client.call(exec_command=pb.ExecCommand(command="echo alive", timeout_ms=60_000))
        assert meanwhile[-1].exit_code == 0 and output(meanwhile) == "alive\n"
        ended = await bomb
        assert ended[-1].exit_code < 0 and b"killed after 3 s" in b"".join(r.stderr for r in ended)
    finally:
        await driver.destroy(other)

    after = await client.call(exec_command=pb.ExecCommand(command=f"echo next; {COUNT}", timeout_ms=60_000))
    assert after[-1].exit_code == 0, b"".join(r.stderr for r in after)
    lines = output(after).split()
    assert lines[0] == "next" and int(lines[-1]) <= baseline, f"{lines[-1]} processes left, {baseline} before"
    assert marked_processes() == []


async def test_what_a_command_leaves_running_ends_with_it(box) -> None:
    driver, sandbox = box
    client = service(driver, sandbox)
    baseline = int(output(await client.call(exec_command=pb.ExecCommand(command=COUNT))).split()[-1])
    started = await client.call(exec_command=pb.ExecCommand(command="(sleep 600 &); setsid sleep 601 & echo started"))
    assert started[-1].exit_code == 0 and output(started) == "started\n"
    left = int(output(await client.call(exec_command=pb.ExecCommand(command=COUNT))).split()[-1])
    assert left <= baseline
    assert marked_processes() == []
