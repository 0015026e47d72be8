"""SIGKILL the data-plane agent four times while a turn's tool runs (a Bash `sleep`), restarting it
each time, then run one more turn: the session's sandbox runs exactly one Claude Code CLI and none
of the killed agents' tools, and every turn settled exactly once (the crashed ones failed with a
reason, the last one completed).

Only the agent's own process is killed, as a crash kills it (not its process group): what it started
must end by itself or be ended by the next agent, and nothing of it may stay on the host (the
processes below the agent just before the kill, looked for again before the next agent starts). With docker the CLI runs under `docker exec`, whose client dies
with its agent (parent-death signal) while what it runs in the container is ended by the next
agent; with the local driver bubblewrap dies with its parent."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from astrabox.client import AstraBoxClient
from tests.support.containers import Containers
from tests.support.processes import sandbox_processes
from tests.support.stack import Stack, StartDockerStack

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="seeing a sandbox's processes from the host needs root"),
]

CRASHES = 4
TOOL = "sleep 600"
# The command line of every process in the session's sandbox.
Processes = Callable[[], Awaitable[list[str]]]


def clis(processes: list[str]) -> int:
    """How many Claude Code CLIs are among `processes`: started with stream-json by the SDK, and not
    one of the programs that start it (bubblewrap, seen from the host; the model relay's shell)."""
    return sum("--output-format stream-json" in p and Path(p.split()[0]).name not in ("bwrap", "sh") for p in processes)


def tools(processes: list[str]) -> int:
    """How many of the turns' `sleep` tools are among `processes`."""
    return sum(p.strip() == TOOL for p in processes)


async def crash_during_tools(client: AstraBoxClient, stack: Stack, processes: Callable[[str], Processes]) -> None:
    sid = (await client.create_session(request_id="crash-during-tools")).session_id
    await client.wait_for_state(sid, ["READY"], timeout=120)
    in_sandbox = processes(sid)
    turns = []
    crashed = []
    try:
        for crash in range(CRASHES):
            before = tools(await in_sandbox())
            accepted = await client.send_message(sid, "sleep: 600", client_message_id=f"crash-{crash}")
            turns.append(accepted.turn_id)
            async with asyncio.timeout(120):
                while tools(await in_sandbox()) <= before:  # the turn's tool runs
                    await asyncio.sleep(0.2)
            agent = stack.agent
            started = descendants(agent.proc.pid)
            assert started, "the agent had started nothing: the count below would prove nothing"
            os.kill(agent.proc.pid, signal.SIGKILL)
            crashed.append(agent)
            agent.proc.wait(10)
            # Before another agent starts (which ends what the container still runs): nothing the
            # killed agent started goes on on the host.
            assert await still_running(started) == [], "the killed agent left processes on the host"
            stack.start_agent()
            await settled(client, sid, accepted.turn_id)
        last = await client.send_message(sid, "run: echo after the crashes", client_message_id="last")
        turns.append(last.turn_id)
        await settled(client, sid, last.turn_id)

        running = await in_sandbox()
        assert clis(running) == 1, running
        assert tools(running) == 0, running
    finally:
        for agent in crashed:
            agent.kill()  # what a killed agent left on the host (its process group), if anything

    ends: dict[str, list[str]] = {turn: [] for turn in turns}
    async for event in client.iter_events(sid):
        kind = event.WhichOneof("payload")
        if kind in ("turn_completed", "turn_failed", "turn_interrupted"):
            ends.setdefault(event.turn_id, []).append(kind)
            if kind == "turn_failed":
                assert event.turn_failed.reason, event
    assert ends == {**{turn: ["turn_failed"] for turn in turns[:-1]}, turns[-1]: ["turn_completed"]}


def descendants(pid: int) -> dict[int, str]:
    """The command lines of every process below `pid`, by pid (root sees them all)."""
    children: dict[int, list[int]] = {}
    lines: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            lines[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = {}, list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found[child] = lines.get(child, "")
        todo += children.get(child, [])
    return found


async def still_running(processes: dict[int, str]) -> list[str]:
    """Which of `processes` still run (not zombies), after the few seconds their parent-death
    signal may take."""
    left: list[str] = []
    for _ in range(50):
        left = []
        for pid, line in processes.items():
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if (
                state != "Z"
                and line
                and (Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace") == line)
            ):
                left.append(f"{pid} {line}")
        if not left:
            return []
        await asyncio.sleep(0.2)
    return left


async def settled(client: AstraBoxClient, sid: str, turn_id: str) -> None:
    async with asyncio.timeout(180):
        async for event in client.watch(sid):
            if event.turn_id == turn_id and event.WhichOneof("payload") in ("turn_completed", "turn_failed"):
                return


async def test_one_cli_per_container_after_agent_crashes_during_tools(
    docker_stacks: StartDockerStack, containers: Containers
) -> None:
    stack = docker_stacks()

    def processes(sid: str) -> Processes:
        async def listed() -> list[str]:
            name = f"astrabox-{containers.installation}-{sid}"
            top = await asyncio.to_thread(
                subprocess.run, ["docker", "top", name, "-eo", "pid,args"], capture_output=True, text=True, timeout=30
            )
            assert top.returncode == 0, top.stderr
            return [line.split(None, 1)[1] for line in top.stdout.splitlines()[1:]]

        return listed

    async with AstraBoxClient.connect(stack.address) as client:
        await crash_during_tools(client, stack, processes)


async def test_one_cli_per_local_sandbox_after_agent_crashes_during_tools(client: AstraBoxClient, stack: Stack) -> None:
    def processes(sid: str) -> Processes:
        workspace = stack.agent_state / "sandboxes" / f"local-{sid}" / "workspace"

        async def listed() -> list[str]:
            return await asyncio.to_thread(sandbox_processes, workspace)

        return listed

    await crash_during_tools(client, stack, processes)
