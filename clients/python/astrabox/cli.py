"""The `astrabox` command.

    astrabox run PROMPT    create a session on a running stack and print its turn live
                           (--agent NAME[@VERSION]: started from that agent;
                           --environment NAME[@VERSION]: run in that environment;
                           --repo URL[@REF] [--repo-dir DIR], --upload DIR: starting files)
    astrabox session …     list, show, print events of, answer, interrupt or delete sessions
    astrabox agents …      apply agent files (YAML), list, show, version and archive agents
    astrabox environments …  apply environment files (YAML), list, show, version, archive and build them
    astrabox whoami        the project, role and key of the credential in use
    astrabox projects …    create and list projects (operator admins); where credentials may run
    astrabox keys …        create, list and revoke a project's API keys (admins)
    astrabox hosts …       list, admit, revoke and dedicate the data-plane agents; mint join tokens (operators)

Every command finds its API key as `astrabox.credentials` says: --api-key-file,
$ASTRABOX_API_KEY, $ASTRABOX_API_KEY_FILE, else the key `astrabox up` saved.

Other distributions add subcommands through the `astrabox.commands` entry-point
group (see `ContributedCommand`): where the server (astrabox-server) is
installed, `astrabox up`, `demo`, `controlplane`, `agent` and `image` come from
it. This module imports no server code, so the client works wherever only the
client distribution is installed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from importlib.metadata import EntryPoint, entry_points
from typing import Protocol, TextIO

# gRPC core's informational chatter (fork handlers) is noise on a terminal; it reads this at import.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import grpc

from astrabox import (
    admin_commands,
    agent_commands,
    credential_commands,
    environment_commands,
    failures,
    starting_files,
    status_commands,
)
from astrabox.client import AstraBoxClient, AstraBoxError
from astrabox.credentials import API_KEY, default_api_key
from astrabox.errors import AgentFileError, LocalStackError
from astrabox.events import Delta
from astrabox.render import LiveText, render
from astrabox.secret_settings import SecretSettingError
from astrabox.sessionkernel.v1 import session_pb2

__all__ = [
    "COMMANDS_GROUP",
    "DEFAULT_TARGET",
    "DEFAULT_TLS_CA",
    "ContributedCommand",
    "build_parser",
    "contributed_commands",
    "main",
    "run_prompt",
]

DEFAULT_TARGET = os.environ.get("ASTRABOX_TARGET", "127.0.0.1:7233")
"""The control plane the commands talk to without `--target`: $ASTRABOX_TARGET, else 127.0.0.1:7233."""
DEFAULT_TLS_CA = os.environ.get("ASTRABOX_TLS_CA", "")
"""The CA bundle verifying the control plane without `--tls-ca`: $ASTRABOX_TLS_CA, else none (plaintext)."""
COMMANDS_GROUP = "astrabox.commands"
"""The entry-point group through which other distributions add subcommands."""
_TLS_CA_HELP = "reach the control plane over TLS, verified with this PEM CA bundle (env ASTRABOX_TLS_CA)"
_CLIENT_COMMANDS = (
    "run",
    "session",
    *agent_commands.COMMANDS,
    *credential_commands.COMMANDS,
    *environment_commands.COMMANDS,
    *admin_commands.COMMANDS,
    *status_commands.COMMANDS,
)


class ContributedCommand(Protocol):
    """A subcommand another distribution adds to `astrabox`: an entry point in the
    `astrabox.commands` group, named after the subcommand, that loads an object like this."""

    help: str
    """One line for `astrabox --help`."""

    def main(self, argv: Sequence[str]) -> int | None:
        """Run the subcommand with the arguments after its name; returns the exit status (None: 0)."""


def contributed_commands() -> dict[str, EntryPoint]:
    """The installed `astrabox.commands` entry points by subcommand name (not loaded yet);
    a name the client itself uses stays the client's."""
    return {ep.name: ep for ep in entry_points(group=COMMANDS_GROUP) if ep.name not in _CLIENT_COMMANDS}


async def run_prompt(
    target: str,
    prompt: str,
    *,
    timeout: float,
    out: TextIO = sys.stdout,
    credentials: grpc.ChannelCredentials | None = None,
    api_key: str | None = None,
    agent: str = "",
    agent_version: int = 0,
    environment: str = "",
    environment_version: int = 0,
    files: starting_files.StartingFiles = starting_files.NONE,
) -> tuple[int, session_pb2.Session]:
    """Create a session (from `agent`, at `agent_version`, in `environment` at `environment_version`,
    when given; with `files` in its workspace), send `prompt`, print its events until the turn ends.

    Returns the exit status (0 when the turn completed) and the session."""
    async with AstraBoxClient.connect(target, credentials=credentials, api_key=api_key) as client:
        created = await client.create_session(
            agent=agent,
            agent_version=agent_version,
            environment=environment,
            environment_version=environment_version,
            git_source=files.git_source,
        )
        print(f"session {created.session_id}{_pins(created)}", file=out, flush=True)
        session = client.session(created.session_id)
        async with asyncio.timeout(timeout):
            await session.wait_for_state(["READY"], timeout=timeout)
            if files.upload:
                await session.upload_directory(files.upload)
            turn = await session.send(prompt)
            live = LiveText(out)  # the answer's text as it is written
            async for event in session.watch(deltas=True):
                if isinstance(event, Delta):
                    live.delta(event)
                    continue
                live.event(event)
                if event.turn_id == turn.turn_id and event.ends_turn:
                    ok = event.kind == "turn_completed" and not event.proto.turn_completed.is_error
                    return (0 if ok else 1), await session.get()
    raise AssertionError("unreachable")


def _pins(session: session_pb2.Session) -> str:
    """What the session pins, as " (agent reviewer v2, environment python-ci v1)"; empty for none."""
    pins = [
        f"{kind} {pin.name} v{pin.version}"
        for kind, pin in (("agent", session.agent), ("environment", session.environment))
        if session.HasField(kind)
    ]
    return f" ({', '.join(pins)})" if pins else ""


def _credentials(tls_ca: str) -> grpc.ChannelCredentials | None:
    """TLS verified with the PEM CA bundle at `tls_ca`; None (plaintext) when it is empty."""
    if not tls_ca:
        return None
    try:
        with open(os.path.expanduser(tls_ca), "rb") as bundle:
            return grpc.ssl_channel_credentials(root_certificates=bundle.read())
    except OSError as error:
        raise SystemExit(f"astrabox: cannot read the CA bundle {tls_ca}: {error.strerror}") from error


def _connect(args: argparse.Namespace) -> AstraBoxClient:
    """A client for the connection options of `args` (`_connection_options`)."""
    api_key = API_KEY.read(args) or default_api_key()
    return AstraBoxClient.connect(args.target, credentials=_credentials(args.tls_ca), api_key=api_key)


async def _session_command(args: argparse.Namespace) -> int:
    async with _connect(args) as client:
        if args.action == "create":
            (agent, agent_version), (environment, environment_version) = args.agent, args.environment
            created = await client.create_session(
                agent=agent,
                agent_version=agent_version,
                environment=environment,
                environment_version=environment_version,
            )
            print(f"{created.session_id}{_pins(created)}")
            return 0
        if args.action == "list":
            filters = {
                "states": [state for states in args.state or () for state in states],
                "label_selector": ",".join(args.label or ()),
                "created_after": args.since,
                "agent": args.agent,
            }
            async for session in client.iter_sessions(**filters):
                definition = "".join(
                    f"  {kind} {pin.name} v{pin.version}"
                    for kind, pin in (("agent", session.agent), ("environment", session.environment))
                    if session.HasField(kind)
                )
                print(
                    f"{session.session_id}  {_state_name(session):<18} seq {session.last_seq:<6} host {session.agent_id}"
                    + definition
                    + _usage_note(session.usage)
                    + _destroy_note(session)
                )
        elif args.action == "show":
            print(await client.get_session(args.session_id))
        elif args.action == "events":
            if args.follow:
                live = LiveText(sys.stdout)  # text as it is written, then the events
                async for item in client.session(args.session_id).watch(deltas=True):
                    if isinstance(item, Delta):
                        live.delta(item)
                    else:
                        live.event(item)
            else:
                async for event in client.iter_events(args.session_id):
                    for line in render(event):
                        print(line, flush=True)
        elif args.action == "delete":
            session = await client.delete_session(args.session_id)
            print(f"deleted {session.session_id}")
        elif args.action == "archive":
            session = await client.archive_session(args.session_id)
            print(f"archived {session.session_id}")
        elif args.action == "send":
            accepted = await client.send_message(args.session_id, args.text)
            print(f"accepted as turn {accepted.turn_id} (seq {accepted.seq})")
        elif args.action == "interrupt":
            session = await client.interrupt_turn(args.session_id)
            print(f"session {session.session_id} is {_state_name(session)}")
        elif args.action == "mode":
            session = await client.set_permission_mode(args.session_id, args.permission_mode)
            print(f"permission mode is {session.permission_mode}")
        elif args.action == "respond":
            session = await client.get_session(args.session_id)
            if not session.HasField("pending_interaction"):
                print(f"session {args.session_id} has no pending interaction", file=sys.stderr)
                return 1
            interaction_id = session.pending_interaction.interaction_id
            if args.deny is not None:
                session = await client.respond_to_interaction(args.session_id, interaction_id, deny=args.deny)
            elif args.answer:
                answers = dict(pair.split("=", 1) for pair in args.answer)
                session = await client.respond_to_interaction(args.session_id, interaction_id, answers=answers)
            elif args.tool_result is not None:
                session = await client.respond_to_interaction(
                    args.session_id, interaction_id, tool_result=args.tool_result, is_error=args.tool_error
                )
            else:
                session = await client.respond_to_interaction(args.session_id, interaction_id, allow=True)
            print(f"answered {interaction_id}; session is {_state_name(session)}")
    return 0


def _usage_note(usage: session_pb2.Usage) -> str:
    """What `session list` says of what a session's turns used: input tokens (cache reads and
    writes included), output tokens and dollars, as the engine reported them."""
    read = usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens
    turns = f"{usage.turns} turn{'' if usage.turns == 1 else 's'}"
    return f"  {turns:<9} {read:>9,} in {usage.output_tokens:>7,} out  ${usage.cost_usd:.4f}"


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def _since(text: str) -> datetime:
    """--since: a time ago (`30m`, `2h`, `7d`, `45s`) or an ISO 8601 time (local time unless it says)."""
    if duration := _DURATION.fullmatch(text.strip()):
        return datetime.now(UTC) - timedelta(seconds=float(duration[1]) * _UNITS[duration[2]])
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a time ago (30m, 2h, 7d) nor a time (2026-01-31T09:00)"
        ) from None
    return moment if moment.tzinfo is not None else moment.astimezone()


def _states(text: str) -> list[str]:
    """--state: session states by name, comma-separated (ready, running, archived, …)."""
    known = [name.removeprefix("SESSION_STATE_").lower() for name in session_pb2.SessionState.keys()[1:]]
    states = [state.strip().lower() for state in text.split(",") if state.strip()]
    for state in states:
        if state not in known:
            raise argparse.ArgumentTypeError(f"{state!r} is no session state; one of {', '.join(known)}")
    return states


def _destroy_note(session: session_pb2.Session) -> str:
    """What `session list` says of a released session whose sandbox could not be destroyed."""
    if not session.HasField("destroy_failure"):
        return ""
    failure = session.destroy_failure
    return f"  sandbox {'NOT DESTROYED (abandoned)' if failure.abandoned else 'destroy retrying'} x{failure.attempts}"


def _state_name(session: session_pb2.Session) -> str:
    return session_pb2.SessionState.Name(session.state).removeprefix("SESSION_STATE_")


def _cmd_run(args: argparse.Namespace) -> int:
    credentials = _credentials(args.tls_ca)
    api_key = API_KEY.read(args) or default_api_key()
    agent, agent_version = args.agent
    environment, environment_version = args.environment
    status, _ = asyncio.run(
        run_prompt(
            args.target,
            args.prompt,
            timeout=args.timeout,
            credentials=credentials,
            api_key=api_key,
            agent=agent,
            agent_version=agent_version,
            environment=environment,
            environment_version=environment_version,
            files=starting_files.StartingFiles.from_args(args),
        )
    )
    return status


async def _admin_command(args: argparse.Namespace) -> int:
    async with _connect(args) as client:
        return await admin_commands.run(args, client)


def _cmd_admin(args: argparse.Namespace) -> int:
    return asyncio.run(_admin_command(args))


async def _status_command(args: argparse.Namespace) -> int:
    async with _connect(args) as client:
        return await status_commands.run(args, client)


def _cmd_status(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_status_command(args))
    except KeyboardInterrupt:  # `astrabox top` off a terminal runs until interrupted
        return 0


async def _agents_command(args: argparse.Namespace) -> int:
    async with _connect(args) as client:
        return await agent_commands.run(args, client)


def _cmd_agents(args: argparse.Namespace) -> int:
    return asyncio.run(_agents_command(args))


async def _credentials_command(args: argparse.Namespace) -> int:
    async with _connect(args) as client:
        return await credential_commands.run(args, client)


def _cmd_credentials(args: argparse.Namespace) -> int:
    return asyncio.run(_credentials_command(args))


async def _environments_command(args: argparse.Namespace) -> int:
    async with _connect(args) as client:
        return await environment_commands.run(args, client)


def _cmd_environments(args: argparse.Namespace) -> int:
    return asyncio.run(_environments_command(args))


def _connection_options() -> argparse.ArgumentParser:
    """--target, --tls-ca and the API key's flags, shared by every client command."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--target", default=DEFAULT_TARGET, help="control plane address (env ASTRABOX_TARGET)")
    options.add_argument("--tls-ca", default=DEFAULT_TLS_CA, help=_TLS_CA_HELP)
    API_KEY.add_to(options, note="; default: the key `astrabox up` saved in ~/.config/astrabox/api-key")
    return options


def _cmd_session(args: argparse.Namespace) -> int:
    return asyncio.run(_session_command(args))


def _pin_options(parser: argparse.ArgumentParser) -> None:
    """--agent and --environment of the commands that create a session."""
    parser.add_argument(
        "--agent",
        type=agent_commands.agent_reference,
        default=("", 0),
        metavar="NAME[@VERSION]",
        help="start the session from this agent (default version: its newest)",
    )
    parser.add_argument(
        "--environment",
        type=environment_commands.environment_reference,
        default=("", 0),
        metavar="NAME[@VERSION]",
        help="run the session in this environment (default version: its newest; default: the built-in one)",
    )


def build_parser(contributed: dict[str, EntryPoint] | None = None) -> argparse.ArgumentParser:
    """The parser of `astrabox`; `contributed` (default: the installed ones) are listed with their
    help but parse nothing: `main` hands them their arguments unparsed."""
    contributed = contributed_commands() if contributed is None else contributed
    parser = argparse.ArgumentParser(
        prog="astrabox",
        description="Run coding agents as durable sessions.",
        epilog=None
        if contributed
        else "Server commands (astrabox up, astrabox agent, …) appear here where the "
        "astrabox-server distribution is installed.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, entry_point in contributed.items():
        command: ContributedCommand = entry_point.load()
        sub.add_parser(name, help=command.help, add_help=False)

    connection = _connection_options()
    run = sub.add_parser("run", help="run one prompt in a new session and print it live", parents=[connection])
    run.add_argument("prompt")
    run.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the turn")
    _pin_options(run)
    starting_files.add_arguments(run)
    run.set_defaults(func=_cmd_run)

    session = sub.add_parser("session", help="inspect sessions", parents=[connection])
    actions = session.add_subparsers(dest="action", required=True)
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
    _pin_options(create)
    for name in ("show", "delete", "archive", "interrupt"):
        actions.add_parser(name).add_argument("session_id")
    send = actions.add_parser("send", help="send a message (queued while a turn runs)")
    send.add_argument("session_id")
    send.add_argument("text")
    mode = actions.add_parser("mode", help="set the engine's permission mode")
    mode.add_argument("session_id")
    mode.add_argument("permission_mode")
    respond = actions.add_parser(
        "respond",
        help="answer the pending interaction: allow (default), --deny MSG, --answer Q=A,"
        " or a custom tool's --tool-result TEXT (--tool-error: the tool failed)",
    )
    respond.add_argument("session_id")
    respond.add_argument("--deny", metavar="MESSAGE")
    respond.add_argument("--answer", action="append", metavar="QUESTION=ANSWER")
    respond.add_argument("--tool-result", metavar="TEXT", help="a custom tool's result, which the model reads")
    respond.add_argument("--tool-error", action="store_true", help="with --tool-result: the tool failed")
    events = actions.add_parser("events")
    events.add_argument("session_id")
    events.add_argument("--follow", "-f", action="store_true", help="keep following live events")
    session.set_defaults(func=_cmd_session)

    agent_commands.add_parsers(sub, connection, _cmd_agents)
    credential_commands.add_parsers(sub, connection, _cmd_credentials)
    environment_commands.add_parsers(sub, connection, _cmd_environments)
    admin_commands.add_parsers(sub, connection, _cmd_admin)
    status_commands.add_parsers(sub, connection, _cmd_status)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Runs `astrabox` with `argv` (default: the process's arguments) and exits with its status;
    a failure, whatever it raised, ends in one line on stderr (see `astrabox.failures`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    contributed = contributed_commands()
    if argv and argv[0] in contributed:
        command: ContributedCommand = contributed[argv[0]].load()
        _exit_with(f"astrabox {argv[0]}", lambda: command.main(argv[1:]))
    args = build_parser(contributed).parse_args(argv)
    _exit_with("astrabox", lambda: args.func(args))


def _exit_with(name: str, run: Callable[[], int | None]) -> None:
    try:
        sys.exit(run())
    except SystemExit:
        raise
    except KeyboardInterrupt:
        sys.exit(130)
    except BaseException as error:
        found = failures.causes(error)
        if exit_ := next((e for e in found if isinstance(e, SystemExit)), None):
            raise exit_ from None
        if any(isinstance(e, KeyboardInterrupt) for e in found):
            sys.exit(130)
        if all(isinstance(e, BrokenPipeError) for e in found):  # `astrabox … | head`
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
        failures.print_traceback_if_asked(error)
        sys.exit(
            f"{name}: {failures.describe(found, (AstraBoxError, SecretSettingError, LocalStackError, AgentFileError))}"
        )
