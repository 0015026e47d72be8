"""`astrabox session …`: a project's sessions from the command line (SessionKernelService).

astrabox session list [--state S] [--label SEL] [--agent NAME] [--since WHEN]
astrabox session create [--agent …] [--environment …] [--permission-mode M] [--model M] [--label K=V]
astrabox session show ID [--json]        readable, or the proto3 JSON form
astrabox session events ID [--follow]
astrabox session send ID TEXT [--permission-mode M]
astrabox session respond ID [--deny WHY | --answer Q=A | --tool-result TEXT | --grant [PATTERN]]
astrabox session grants ID               the session's tool grants
astrabox session revoke-grant ID GRANT_ID
astrabox session mode ID MODE
astrabox session fork ID [--at SEQ] [--label K=V]   a new session from ID's conversation and files
astrabox session shell ID [--command CMD]          a terminal in the session's sandbox
astrabox session interrupt | archive | delete ID
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf import json_format

from astrabox.client import AstraBoxClient
from astrabox.events import Delta
from astrabox.interaction_prompts import answer_commands
from astrabox.render import LiveText, grant_scope, render
from astrabox.run_command import add_session_options, label, session_options
from astrabox.session_view import describe, grant_line, list_line, pins, state_label
from astrabox.sessionkernel.v1 import session_pb2
from astrabox.shell_command import shell

__all__ = ["add_parser", "run"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def _moment(text: str, sign: int) -> datetime:
    """A duration (`30m`, `2h`, `7d`, `45s`) `sign`ed from now, or an ISO 8601 time (local unless it says)."""
    if duration := _DURATION.fullmatch(text.strip()):
        return datetime.now(UTC) + sign * timedelta(seconds=float(duration[1]) * _UNITS[duration[2]])
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a duration (30m, 2h, 7d) nor a time (2026-01-31T09:00)"
        ) from None
    return moment if moment.tzinfo is not None else moment.astimezone()


def _since(text: str) -> datetime:
    """--since: a time ago (`30m`, `2h`, `7d`, `45s`) or an ISO 8601 time."""
    return _moment(text, -1)


def _until(text: str) -> datetime:
    """--grant-until: a time ahead (`30m`, `2h`, `7d`) or an ISO 8601 time."""
    return _moment(text, +1)


def _states(text: str) -> list[str]:
    """--state: session states by name, comma-separated (ready, running, archived, …)."""
    known = [name.removeprefix("SESSION_STATE_").lower() for name in session_pb2.SessionState.keys()[1:]]
    states = [state.strip().lower() for state in text.split(",") if state.strip()]
    for state in states:
        if state not in known:
            raise argparse.ArgumentTypeError(f"{state!r} is no session state; one of {', '.join(known)}")
    return states


def _answer(text: str) -> tuple[str, str]:
    """--answer: QUESTION=ANSWER (the question as asked; the answer may hold '=')."""
    question, equals, answer = text.partition("=")
    if not question or not equals:
        raise argparse.ArgumentTypeError(f"{text!r} is not QUESTION=ANSWER")
    return question, answer


def connection_flags(args: argparse.Namespace, default_target: str) -> list[str]:
    """The flags that reach the control plane `args` reached, for a command printed to be run:
    --target when it is not the default, --tls-ca and --api-key-file when given (never a key)."""
    flags = ["--target", args.target] if args.target != default_target else []
    if args.tls_ca:
        flags += ["--tls-ca", args.tls_ca]
    if getattr(args, "api_key_file", None):
        flags += ["--api-key-file", args.api_key_file]
    return flags


def add_parser(sub: Any, connection: argparse.ArgumentParser, func: Callable[[argparse.Namespace], int]) -> None:
    """Adds `astrabox session` to `sub` (the subparsers of `astrabox`), taking the `connection` options."""
    session = sub.add_parser(
        "session",
        help="list, create, show, message, answer, interrupt, archive and delete sessions; their tool grants",
        description="Drive the project's sessions. The connection options go before the action:"
        " astrabox session --target HOST:PORT list",
        parents=[connection],
    )
    actions = session.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="the project's sessions, newest first, with what they used")
    listing.add_argument(
        "--state", action="append", type=_states, metavar="STATE[,STATE]", help="only sessions in these states"
    )
    listing.add_argument(
        "--label",
        action="append",
        metavar="SELECTOR",
        help="only sessions whose labels match: key=value, key!=value, key or !key (repeat for all of them)",
    )
    listing.add_argument("--agent", default="", metavar="NAME", help="only sessions started from this agent")
    listing.add_argument(
        "--since", type=_since, metavar="WHEN", help="only sessions created since: 30m, 2h, 7d, or an ISO 8601 time"
    )
    create = actions.add_parser("create", help="create a session and print its id")
    add_session_options(create)
    show = _with_session(actions.add_parser("show", help="the session: state, pins, labels, usage, what it waits on"))
    show.add_argument("--json", action="store_true", help="print the Session message in its proto3 JSON form")
    events = _with_session(actions.add_parser("events", help="print the session's events (its journal)"))
    events.add_argument("--follow", "-f", action="store_true", help="keep following live events")
    send = _with_session(actions.add_parser("send", help="send a message (queued while a turn runs)"))
    send.add_argument("text", help="the message")
    send.add_argument(
        "--permission-mode", default="", metavar="MODE", help="the permission mode of this message's turn only"
    )
    _add_respond(actions)
    _with_session(actions.add_parser("grants", help="the session's tool grants: what runs without asking"))
    revoke = _with_session(
        actions.add_parser("revoke-grant", help="revoke a tool grant: its tool asks again from the next call")
    )
    revoke.add_argument("grant_id", metavar="GRANT_ID", help="the grant, as `session grants` lists it")
    mode = _with_session(actions.add_parser("mode", help="set the engine's permission mode (at once)"))
    mode.add_argument("permission_mode", metavar="MODE", help="one of the engine's modes, e.g. default")
    fork = _with_session(
        actions.add_parser(
            "fork", help="a new session with the conversation through a completed turn and the files as they are"
        )
    )
    fork.add_argument(
        "--at",
        type=int,
        default=0,
        metavar="SEQ",
        help="the seq of a turn_completed event (see `session events`); default: the last completed turn",
    )
    fork.add_argument(
        "--label", action="append", type=label, metavar="KEY=VALUE", help="the new session's labels (default: ID's)"
    )
    shell = _with_session(
        actions.add_parser("shell", help="an interactive terminal in the session's sandbox (a login shell)")
    )
    shell.add_argument("--command", default="", metavar="CMD", help="run CMD (with bash -lc) instead of a shell")
    _with_session(actions.add_parser("interrupt", help="interrupt the running turn (what it did is kept)"))
    _with_session(actions.add_parser("archive", help="release the sandbox and keep the history readable"))
    _with_session(actions.add_parser("delete", help="destroy the sandbox and hide the session"))
    session.set_defaults(func=func)


def _with_session(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("session_id", metavar="SESSION_ID", help="the session's id")
    return parser


def _add_respond(actions: Any) -> None:
    respond = _with_session(
        actions.add_parser(
            "respond",
            help="answer what the session waits on: allow a tool (the default), --grant, --deny, --answer,"
            " or a custom tool's --tool-result",
        )
    )
    answer = respond.add_mutually_exclusive_group()
    answer.add_argument("--deny", metavar="WHY", help="deny the tool call (or custom tool call); the model reads WHY")
    answer.add_argument(
        "--answer",
        action="append",
        type=_answer,
        metavar="QUESTION=ANSWER",
        help="answer a question: its text as asked, then an option or your own words (repeat for each question)",
    )
    answer.add_argument("--tool-result", metavar="TEXT", help="a custom tool's result, which the model reads")
    answer.add_argument(
        "--grant",
        nargs="?",
        const="",
        metavar="PATTERN",
        help="allow the tool call and later calls of the tool without asking (a tool grant): those whose main"
        " input (Bash's command, a file's path, a URL) matches PATTERN (* any run of characters, ? one),"
        " or every call without one",
    )
    respond.add_argument("--tool-error", action="store_true", help="with --tool-result: the tool failed")
    respond.add_argument(
        "--grant-until", type=_until, metavar="WHEN", help="with --grant: until then (2h, 7d, or an ISO 8601 time)"
    )


async def run(args: argparse.Namespace, client: AstraBoxClient, default_target: str) -> int:
    """Runs the `astrabox session` action `args` names; returns the exit status."""
    if args.action == "create":
        created = await client.create_session(**session_options(args))
        print(f"{created.session_id}{pins(created)}")
    elif args.action == "list":
        filters = {
            "states": [state for states in args.state or () for state in states],
            "label_selector": ",".join(args.label or ()),
            "created_after": args.since,
            "agent": args.agent,
        }
        async for session in client.iter_sessions(**filters):
            print(list_line(session))
    elif args.action == "show":
        session = await client.get_session(args.session_id)
        if args.json:
            print(json_format.MessageToJson(session))
        else:
            hint = []
            if session.HasField("pending_interaction"):
                commands = answer_commands(
                    session.session_id, session.pending_interaction, connection_flags(args, default_target)
                )
                hint = ["answer it with one of:", *(f"  {command}" for command in commands)]
            print("\n".join(describe(session, hint)))
    elif args.action == "events":
        await _events(client, args.session_id, follow=args.follow)
    elif args.action == "grants":
        session = await client.get_session(args.session_id)
        if not session.tool_grants:
            print(f"session {session.session_id} has no tool grants: every approval is asked for")
        for grant in session.tool_grants:
            print(grant_line(grant))
    elif args.action == "revoke-grant":
        return await _revoke(client, args.session_id, args.grant_id)
    elif args.action == "delete":
        print(f"deleted {(await client.delete_session(args.session_id)).session_id}")
    elif args.action == "fork":
        forked = await client.fork_session(args.session_id, args.at, labels=dict(args.label or ()))
        origin = forked.forked_from
        print(
            f"{forked.session_id} (forked from {origin.session_id} at seq {origin.through_seq}; {state_label(forked)})"
        )
    elif args.action == "shell":
        return await shell(client, args.session_id, args.command)
    elif args.action == "archive":
        print(f"archived {(await client.archive_session(args.session_id)).session_id}")
    elif args.action == "send":
        accepted = await client.send_message(args.session_id, args.text, permission_mode=args.permission_mode)
        print(f"accepted as turn {accepted.turn_id} (seq {accepted.seq})")
    elif args.action == "interrupt":
        session = await client.interrupt_turn(args.session_id)
        print(f"session {session.session_id} is {state_label(session)}")
    elif args.action == "mode":
        session = await client.set_permission_mode(args.session_id, args.permission_mode)
        print(f"permission mode is {session.permission_mode}")
    elif args.action == "respond":
        return await _respond(client, args)
    return 0


async def _events(client: AstraBoxClient, session_id: str, *, follow: bool) -> None:
    if follow:
        live = LiveText(sys.stdout)  # text as it is written, then the events
        async for item in client.session(session_id).watch(deltas=True):
            if isinstance(item, Delta):
                live.delta(item)
            else:
                live.event(item)
    else:
        async for event in client.iter_events(session_id):
            for line in render(event):
                print(line, flush=True)


async def _revoke(client: AstraBoxClient, session_id: str, grant_id: str) -> int:
    before = await client.get_session(session_id)
    revoked = next((grant for grant in before.tool_grants if grant.grant_id == grant_id), None)
    session = await client.revoke_tool_grant(session_id, grant_id)
    what = f"{revoked.tool_name}: {grant_scope(revoked)}" if revoked else "already revoked or expired"
    left = len(session.tool_grants)
    print(f"revoked {grant_id} ({what}); {left} grant{'' if left == 1 else 's'} left")
    return 0


async def _respond(client: AstraBoxClient, args: argparse.Namespace) -> int:
    if args.tool_error and args.tool_result is None:
        raise SystemExit("astrabox session respond: --tool-error goes with --tool-result")
    if args.grant_until is not None and args.grant is None:
        raise SystemExit("astrabox session respond: --grant-until goes with --grant")
    session = await client.get_session(args.session_id)
    if not session.HasField("pending_interaction"):
        print(f"session {args.session_id} has no pending interaction", file=sys.stderr)
        return 1
    interaction_id = session.pending_interaction.interaction_id
    answer: dict[str, Any]
    if args.deny is not None:
        answer = {"deny": args.deny}
    elif args.answer:
        answer = {"answers": dict(args.answer)}
    elif args.tool_result is not None:
        answer = {"tool_result": args.tool_result, "is_error": args.tool_error}
    elif args.grant is not None:
        answer = {"allow": True, "grant": True, "grant_pattern": args.grant, "grant_until": args.grant_until}
    else:
        answer = {"allow": True}
    session = await client.respond_to_interaction(args.session_id, interaction_id, **answer)
    granted = [grant for grant in session.tool_grants if grant.interaction_id == interaction_id]
    also = "".join(f"; granted {g.tool_name} ({grant_scope(g)}) as {g.grant_id}" for g in granted)
    print(f"answered {interaction_id}{also}; session is {state_label(session)}")
    return 0
