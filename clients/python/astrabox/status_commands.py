"""`astrabox status` and `astrabox top`: the operator's view of an installation (AdminService.GetStatus).

    astrabox status                      one snapshot, plain text (color only on a terminal)
    astrabox top [--interval S] [--once] the same, refreshed like `top`; q or Ctrl-C quits

Both show each agent (its version, whether it is connected, cordoned or draining, its live sessions
against its capacity, sessions placed on it, commands waiting for it, output lag, last heartbeat),
sessions by state, and what is stuck with why. Lines that need a look start with a word a script can
match: STUCK for a stuck item, and an agent's state column says LAGGING, DISCONNECTED, CORDONED or
DRAINING. The text is the same on a terminal and off it; a terminal only adds color (rich).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from astrabox.admin.v1 import admin_service_pb2 as admin
from astrabox.client import AstraBoxClient

__all__ = ["COMMANDS", "add_parsers", "render", "run"]

COMMANDS = ("status", "top")
"""The subcommands this module adds to `astrabox`."""

# Agents fetched for one view: pages of 500 up to this many.
_MAX_AGENTS = 2000
_COLUMNS = (
    f"{'AGENT':<24} {'VERSION':<10} {'STATE':<13} {'LIVE/CAP':>9} {'PLACED':>6} {'PENDING':>7} {'LAG':>7}  HEARTBEAT"
)


def add_parsers(sub: Any, connection: argparse.ArgumentParser, func: Callable[[argparse.Namespace], int]) -> None:
    """Adds `status` and `top` to `sub` (the subparsers of `astrabox`), each taking the `connection` options."""
    sub.add_parser(
        "status", help="agents, sessions by state and what is stuck, once (operator admins)", parents=[connection]
    )
    top = sub.add_parser("top", help="the status, refreshed like top; q or Ctrl-C quits", parents=[connection])
    top.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes (default %(default)s)")
    top.add_argument("--once", action="store_true", help="show one snapshot and exit (for a non-terminal)")
    for name in COMMANDS:
        sub.choices[name].set_defaults(func=func)


def _ago(now: datetime, when: Any, has: bool) -> str:
    if not has:
        return "-"
    seconds = (now - when.ToDatetime(tzinfo=UTC)).total_seconds()
    return f"{seconds:.0f}s ago" if seconds < 120 else f"{seconds / 60:.0f}m ago"


def _state(agent: admin.AgentStatus, lagging: bool) -> tuple[str, str]:
    """The agent's state word and its style."""
    if not agent.connected:
        return "DISCONNECTED", "bold red"
    if agent.HasField("drain_deadline"):
        return "DRAINING", "bold yellow"
    if agent.HasField("cordon_time"):
        return "CORDONED", "yellow"
    if lagging:
        return "LAGGING", "bold red"
    return "connected", "green"


def _agent_line(agent: admin.AgentStatus, now: datetime, lagging: bool) -> Text:
    word, style = _state(agent, lagging)
    lag = f"{agent.output_lag.ToTimedelta().total_seconds():.1f}s" if agent.HasField("output_lag") else "-"
    line = Text(f"{agent.agent_id:<24} {agent.version or '-':<10} ")
    line.append(f"{word:<13}", style=style)
    line.append(
        f" {f'{agent.live_sessions}/{agent.capacity}':>9} {agent.placed_sessions:>6} {agent.pending_commands:>7}"
        f" {lag:>7}  {_ago(now, agent.last_heartbeat_time, agent.HasField('last_heartbeat_time'))}"
    )
    if agent.HasField("drain_deadline"):
        left = (agent.drain_deadline.ToDatetime(tzinfo=UTC) - now).total_seconds()
        line.append(f"  drain deadline in {max(left, 0):.0f}s" if left > 0 else "  drain deadline passed")
    return line


def render(status: admin.GetStatusResponse) -> Group:
    """The view of one snapshot: the same lines for `status` and each refresh of `top`."""
    now = status.time.ToDatetime(tzinfo=UTC) if status.HasField("time") else datetime.now(UTC)
    lagging = {i.agent_id for i in status.stuck if i.kind == admin.STUCK_KIND_RELAY_LAGGING}
    by_state = ", ".join(f"{state} {count}" for state, count in sorted(status.sessions_by_state.items()))
    lines = [
        Text(f"AstraBox status at {now.isoformat(timespec='seconds')}", style="bold"),
        Text(f"sessions: {by_state or 'none'}"),
        Text(f"agents: {len(status.agents)}"),
        Text(_COLUMNS, style="bold"),
        *(_agent_line(agent, now, agent.agent_id in lagging) for agent in status.agents),
    ]
    if status.stuck:
        more = " (more not shown)" if status.stuck_truncated else ""
        lines.append(Text(f"stuck: {len(status.stuck)}{more}", style="bold red"))
        for item in status.stuck:
            kind = admin.StuckKind.Name(item.kind).removeprefix("STUCK_KIND_").lower()
            subject = f"session {item.session_id}" if item.session_id else f"agent {item.agent_id}"
            where = f" on agent {item.agent_id}" if item.session_id and item.agent_id else ""
            line = Text("STUCK ", style="bold red")
            line.append(f"{kind:<26} {subject}{where}: {item.reason} (since {_ago(now, item.since, True)})")
            lines.append(line)
    else:
        lines.append(Text("stuck: none", style="green"))
    return Group(*lines)


async def snapshot(client: AstraBoxClient) -> admin.GetStatusResponse:
    """Every page of agents (up to _MAX_AGENTS) folded into the first snapshot."""
    status = await client.admin.get_status(page_size=500)
    token = status.next_page_token
    while token and len(status.agents) < _MAX_AGENTS:
        page = await client.admin.get_status(page_size=500, page_token=token)
        status.agents.extend(page.agents)
        token = page.next_page_token
    return status


@contextlib.asynccontextmanager
async def _keys() -> AsyncIterator[asyncio.Event]:
    """An event set when q is typed on the terminal (cbreak mode meanwhile, restored after)."""
    quit_typed = asyncio.Event()
    if not sys.stdin.isatty():
        yield quit_typed
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    loop = asyncio.get_running_loop()

    def typed() -> None:
        if os.read(fd, 32).lower().startswith(b"q"):
            quit_typed.set()

    tty.setcbreak(fd)
    loop.add_reader(fd, typed)
    try:
        yield quit_typed
    finally:
        loop.remove_reader(fd)
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


async def _top(client: AstraBoxClient, interval: float, console: Console) -> None:
    async with _keys() as quit_typed:
        with Live(render(await snapshot(client)), console=console, auto_refresh=False, screen=True) as live:
            while not quit_typed.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(interval):
                        await quit_typed.wait()
                if not quit_typed.is_set():
                    live.update(render(await snapshot(client)), refresh=True)


async def run(args: argparse.Namespace, client: AstraBoxClient) -> int:
    """Carry out `status` or `top` with `client`; the exit status."""
    console = Console(highlight=False, soft_wrap=True)
    if args.command == "status" or args.once:
        console.print(render(await snapshot(client)))
        return 0
    if args.interval <= 0:
        raise ValueError("--interval must be more than 0 seconds")
    if not console.is_terminal:
        # Not a terminal: one snapshot after another, each printed whole, until interrupted.
        while True:
            console.print(render(await snapshot(client)))
            console.print()
            await asyncio.sleep(args.interval)
    try:
        await _top(client, args.interval, console)
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass
    return 0
