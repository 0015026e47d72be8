"""`astrabox schedules …`: a project's cron schedules from the command line (ScheduleService).

astrabox schedules create NAME --cron "0 3 * * *" --prompt TEXT [--agent A] [--environment E]
                               [--time-zone Europe/Paris] [--missed-ticks skip|run-once|run-each]
                               [--retry-refusals SECONDS]   retry a tick refused for a quota or capacity
astrabox schedules list | show NAME | delete NAME | pause NAME | resume NAME
astrabox schedules update NAME [--cron …] [--prompt …] …   the options given replace the spec's
astrabox schedules runs NAME [--limit N]                      its history, newest tick first
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from astrabox.client import AstraBoxClient
from astrabox.scheduling import MISSED_TICKS, Schedule, spec

__all__ = ["COMMANDS", "add_parsers", "run"]

COMMANDS = ("schedules",)
"""The subcommands this module adds to `astrabox`."""


def _spec_options(parser: argparse.ArgumentParser, required: bool) -> None:
    parser.add_argument(
        "--cron",
        required=required,
        help="when it ticks: five cron fields (minute hour day month weekday), or six with seconds first",
    )
    parser.add_argument("--prompt", required=required, help="the first message of each tick's session")
    parser.add_argument("--time-zone", help="the IANA time zone the cron expression is read in (default UTC)")
    parser.add_argument("--agent", help="the agent definition (NAME or NAME@VERSION) its sessions start from")
    parser.add_argument("--environment", help="the environment (NAME or NAME@VERSION) its sessions run in")
    parser.add_argument(
        "--missed-ticks",
        choices=sorted(MISSED_TICKS),
        help="ticks missed while down or paused: skip them, run once for all, or run each (default skip)",
    )
    parser.add_argument(
        "--max-catch-up", type=int, help="with run-each: the most missed ticks run at once, 1-100 (default 10)"
    )
    parser.add_argument(
        "--retry-refusals",
        type=int,
        metavar="SECONDS",
        help="retry a tick refused for a quota or capacity for up to SECONDS after it, backing off (0-3600;"
        " default 0: it fails at once)",
    )


def add_parsers(sub: Any, connection: argparse.ArgumentParser, func: Callable[[argparse.Namespace], int]) -> None:
    """Adds `astrabox.scheduling` to `sub`, taking the `connection` options."""
    schedules = sub.add_parser(
        "schedules",
        help="cron schedules that start a session with a prompt: create, list, show, update, delete, pause,"
        " resume, runs",
        parents=[connection],
    )
    actions = schedules.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="create a schedule")
    create.add_argument("name", metavar="NAME", help="the schedule's name (1-64 of [a-z0-9-], a letter first)")
    _spec_options(create, required=True)
    create.add_argument("--paused", action="store_true", help="create it paused")
    actions.add_parser("list", help="the project's schedules by name")
    for name, text in (
        ("show", "a schedule's spec, state and next tick"),
        ("delete", "delete a schedule and its history (its sessions stay)"),
        ("pause", "pause a schedule: it runs no tick until resumed"),
        ("resume", "resume a schedule; ticks missed while paused go by its missed-ticks policy"),
    ):
        actions.add_parser(name, help=text).add_argument("name", metavar="NAME", help="the schedule's name or id")
    update = actions.add_parser("update", help="change a schedule: the options given replace those of its spec")
    update.add_argument("name", metavar="NAME", help="the schedule's name or id")
    _spec_options(update, required=False)
    runs = actions.add_parser("runs", help="a schedule's runs, newest tick first: session or error")
    runs.add_argument("name", metavar="NAME", help="the schedule's name or id")
    runs.add_argument("--limit", type=int, default=20, help="show at most this many runs (default 20)")
    schedules.set_defaults(func=func)


def _pinned(value: str) -> tuple[str, int]:
    name, _, version = value.partition("@")
    return name, int(version) if version else 0


def _describe(schedule: Schedule) -> str:
    s = schedule.spec
    lines = [
        f"{schedule.name}  ({schedule.schedule_id}){'  PAUSED' if schedule.paused else ''}",
        f"  cron          {s.cron}  ({s.time_zone or 'UTC'})",
        f"  next tick     {schedule.next_tick_time.isoformat(timespec='seconds')}",
        f"  missed ticks  {schedule.missed_ticks}" + (f" (up to {s.max_catch_up})" if s.max_catch_up else ""),
        f"  refusals      retried for {s.retry_refusals_seconds} s"
        if s.retry_refusals_seconds
        else "  refusals      fail the tick",
        f"  agent         {s.agent or '-'}{f'@{s.agent_version}' if s.agent_version else ''}",
        f"  environment   {s.environment or '-'}{f'@{s.environment_version}' if s.environment_version else ''}",
        f"  prompt        {s.prompt}",
    ]
    return "\n".join(lines)


def _apply(args: argparse.Namespace, base: Any) -> Any:
    """`base` (a ScheduleSpec) with the options given."""
    made = type(base)()
    made.CopyFrom(base)
    if args.cron is not None:
        made.cron = args.cron
    if args.prompt is not None:
        made.prompt = args.prompt
    if args.time_zone is not None:
        made.time_zone = args.time_zone
    if args.agent is not None:
        made.agent, made.agent_version = _pinned(args.agent)
    if args.environment is not None:
        made.environment, made.environment_version = _pinned(args.environment)
    if args.missed_ticks is not None:
        made.missed_ticks = MISSED_TICKS[args.missed_ticks]
    if args.max_catch_up is not None:
        made.max_catch_up = args.max_catch_up
    if args.retry_refusals is not None:
        made.retry_refusals_seconds = args.retry_refusals
    return made


async def run(args: argparse.Namespace, client: AstraBoxClient) -> int:
    """Carry out the parsed `astrabox.scheduling` command `args` with `client`; the exit status."""
    if args.action == "create":
        made = _apply(args, spec(args.cron, args.prompt, missed_ticks=args.missed_ticks or "skip"))
        print(_describe(await client.schedules.create(args.name, made, paused=args.paused)), flush=True)
    elif args.action == "list":
        async for schedule in client.schedules.list():
            state = "paused" if schedule.paused else f"next {schedule.next_tick_time.isoformat(timespec='seconds')}"
            print(f"{schedule.name:<32} {schedule.spec.cron:<20} {state}")
    elif args.action == "show":
        print(_describe(await client.schedules.get(args.name)))
    elif args.action == "update":
        current = await client.schedules.get(args.name)
        print(_describe(await client.schedules.update(args.name, _apply(args, current.spec))))
    elif args.action == "delete":
        print(f"deleted {(await client.schedules.delete(args.name)).name}")
    elif args.action in ("pause", "resume"):
        changed = await (client.schedules.pause if args.action == "pause" else client.schedules.resume)(args.name)
        print(f"{changed.name} {'paused' if changed.paused else 'resumed'}")
    else:
        if args.limit <= 0:
            print("astrabox: --limit must be a positive number", file=sys.stderr)
            return 2
        shown = 0
        async for item in client.schedules.runs(args.name, page_size=min(args.limit, 500)):
            outcome = item.session_id if item.state != "failed" else f"{item.error_reason}: {item.error_message}"
            missed = f"  (+{item.missed_ticks} missed)" if item.missed_ticks else ""
            print(f"{item.tick_time.isoformat(timespec='seconds')}  {item.state:<9} {outcome}{missed}")
            shown += 1
            if shown >= args.limit:
                break
    return 0
