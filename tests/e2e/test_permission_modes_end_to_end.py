"""A message's own permission mode lasts for its turn only, across engine restarts: real processes,
the real bundled CLI in the local sandbox, the offline model's `run:` script.

A session in one mode gets a message in the other (bypassPermissions runs Bash without asking,
default asks first); then its engine goes away — the CLI SIGKILLed, the agent restarted, or the
runtime idle-stopped — and the next ordinary message must run, in the session's mode: it asks
exactly when the session's mode asks."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from astrabox.client import AstraBoxClient
from astrabox.sessionkernel.v1 import events_pb2
from tests.e2e.test_idle_stop_local import cli_pids
from tests.support.stack import Stack, StartStack

pytestmark = pytest.mark.e2e

TIMEOUT = 120
ASKS = {"default": True, "bypassPermissions": False}
_TURN_END = ("turn_completed", "turn_failed", "turn_interrupted")


async def run_turn(
    client: AstraBoxClient, sid: str, command: str, permission_mode: str = ""
) -> tuple[list[events_pb2.SessionEvent], int]:
    """Send `run: <command>`, allow every tool it asks for, and return the turn's events and how
    many approvals it asked for."""
    sent = await client.send_message(sid, f"run: {command}", permission_mode=permission_mode)
    events: list[events_pb2.SessionEvent] = []
    asked = 0
    async with asyncio.timeout(TIMEOUT):
        async for event in client.watch(sid, after_seq=sent.seq):
            events.append(event)
            kind = event.WhichOneof("payload")
            if kind == "interaction_requested":
                asked += 1
                interaction = event.interaction_requested.interaction
                await client.respond_to_interaction(sid, interaction.interaction_id, allow=True)
            if event.turn_id == sent.turn_id and kind in _TURN_END:
                return events, asked
    raise AssertionError("watch ended")


def engine_cli_pids(run: Path) -> list[int]:
    """The Claude Code CLI processes under the sandbox's launchers (inside their bubblewrap)."""
    launchers = set(cli_pids(run))
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "exe").resolve().name != "claude":
                continue
            pid = int(entry.name)
            ancestor = pid
            while ancestor > 1 and ancestor not in launchers:
                stat = (Path("/proc") / str(ancestor) / "stat").read_text()
                ancestor = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        if ancestor in launchers:
            found.append(pid)
    return found


async def kill_the_cli(stack: Stack, client: AstraBoxClient, sid: str, run: Path) -> None:
    [pid] = engine_cli_pids(run)
    os.kill(pid, signal.SIGKILL)
    async with asyncio.timeout(30):
        while cli_pids(run):
            await asyncio.sleep(0.1)


async def restart_the_agent(stack: Stack, client: AstraBoxClient, sid: str, run: Path) -> None:
    stack.agent.stop()
    # Its sandboxes' launchers die with it (--die-with-parent), a moment after its own exit.
    async with asyncio.timeout(30):
        while cli_pids(run):
            await asyncio.sleep(0.1)
    stack.start_agent()


async def wait_for_idle_stop(stack: Stack, client: AstraBoxClient, sid: str, run: Path) -> None:
    async with asyncio.timeout(60):
        async for event in client.watch(sid):
            if event.WhichOneof("payload") == "runtime_stopped":
                break
    assert cli_pids(run) == []


Restart = Callable[[Stack, AstraBoxClient, str, Path], Awaitable[None]]
RESTARTS: dict[str, tuple[Restart, tuple[str, ...]]] = {
    "cli-sigkill": (kill_the_cli, ()),
    "agent-restart": (restart_the_agent, ()),
    "idle-stop": (wait_for_idle_stop, ("--idle-stop-after", "2")),
}


@pytest.mark.parametrize("restart", list(RESTARTS))
@pytest.mark.parametrize(
    ("session_mode", "message_mode"), [("bypassPermissions", "default"), ("default", "bypassPermissions")]
)
async def test_after_an_engine_restart_the_next_message_runs_in_the_sessions_mode(
    stacks: StartStack, restart: str, session_mode: str, message_mode: str
) -> None:
    restart_engine, controlplane_args = RESTARTS[restart]
    stack = stacks(controlplane_args=controlplane_args)
    async with AstraBoxClient.connect(stack.address) as client:
        session = await client.create_session(permission_mode=session_mode)
        sid = session.session_id
        await client.wait_for_state(sid, ["READY"], timeout=TIMEOUT)

        events, asked = await run_turn(client, sid, "touch own-mode.txt", permission_mode=message_mode)
        assert events[-1].WhichOneof("payload") == "turn_completed", events[-1]
        assert asked == ASKS[message_mode]  # the message ran in its own mode
        workspace = stack.host_workspace([e async for e in client.iter_events(sid)])
        assert (workspace / "own-mode.txt").exists()

        await restart_engine(stack, client, sid, workspace.parent / "run")

        events, asked = await run_turn(client, sid, "touch sessions-mode.txt")
        assert events[-1].WhichOneof("payload") == "turn_completed", events[-1]
        assert asked == ASKS[session_mode]  # the session's mode again, not the last message's
        assert (workspace / "sessions-mode.txt").exists()
        assert (await client.get_session(sid)).permission_mode == session_mode
