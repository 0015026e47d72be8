"""The `astrabox` command.

    astrabox run PROMPT    create a session on a running stack and print its turn live, asking on a
                           terminal what the turn asks (`astrabox.run_command`)
                           (--agent NAME[@VERSION]: started from that agent;
                           --environment NAME[@VERSION]: run in that environment;
                           --permission-mode, --model, --label KEY=VALUE: the session's;
                           --repo URL[@REF] [--repo-dir DIR], --upload DIR: starting files)
    astrabox session …     list, create, show, print events of, answer, interrupt, archive or delete
                           sessions; list and revoke their tool grants (`astrabox.session_commands`)
    astrabox agents …      apply agent files (YAML), list, show, version and archive agents
    astrabox environments …  apply environment files (YAML), list, show, version, archive and build them
    astrabox schedules …   cron schedules that start a session with a prompt, and their runs
    astrabox memory …      memory stores of versioned documents sessions attach (--memory STORE[:MODE])
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
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Protocol

# gRPC core's informational chatter (fork handlers) is noise on a terminal; it reads this at import.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import grpc

from astrabox import (
    admin_commands,
    agent_commands,
    credential_commands,
    environment_commands,
    failures,
    memory_commands,
    schedule_commands,
    session_commands,
    starting_files,
    status_commands,
    webhook_commands,
)
from astrabox.client import AstraBoxClient, AstraBoxError
from astrabox.credentials import API_KEY, default_api_key
from astrabox.errors import AgentFileError, LocalStackError
from astrabox.interaction_prompts import TerminalPrompter
from astrabox.run_command import add_session_options, run_prompt, session_options
from astrabox.secret_settings import SecretSettingError

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
    *schedule_commands.COMMANDS,
    *memory_commands.COMMANDS,
    *admin_commands.COMMANDS,
    *status_commands.COMMANDS,
    *webhook_commands.COMMANDS,
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
        return await session_commands.run(args, client, DEFAULT_TARGET)


def _cmd_run(args: argparse.Namespace) -> int:
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    status, _ = asyncio.run(
        run_prompt(
            args.target,
            args.prompt,
            timeout=args.timeout,
            credentials=_credentials(args.tls_ca),
            api_key=API_KEY.read(args) or default_api_key(),
            files=starting_files.StartingFiles.from_args(args),
            prompter=TerminalPrompter(sys.stdin, sys.stdout) if interactive else None,
            connection=session_commands.connection_flags(args, DEFAULT_TARGET),
            **session_options(args),
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


async def _webhooks_command(args: argparse.Namespace) -> int:
    async with _connect(args) as client:
        return await webhook_commands.run(args, client)


def _cmd_webhooks(args: argparse.Namespace) -> int:
    return asyncio.run(_webhooks_command(args))


async def _environments_command(args: argparse.Namespace) -> int:
    async with _connect(args) as client:
        return await environment_commands.run(args, client)


def _cmd_environments(args: argparse.Namespace) -> int:
    return asyncio.run(_environments_command(args))


async def _schedules_command(args: argparse.Namespace) -> int:
    async with _connect(args) as client:
        return await schedule_commands.run(args, client)


def _cmd_schedules(args: argparse.Namespace) -> int:
    return asyncio.run(_schedules_command(args))


async def _memory_command(args: argparse.Namespace) -> int:
    async with _connect(args) as client:
        return await memory_commands.run(args, client)


def _cmd_memory(args: argparse.Namespace) -> int:
    return asyncio.run(_memory_command(args))


def _connection_options() -> argparse.ArgumentParser:
    """--target, --tls-ca and the API key's flags, shared by every client command."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--target", default=DEFAULT_TARGET, help="control plane address (env ASTRABOX_TARGET)")
    options.add_argument("--tls-ca", default=DEFAULT_TLS_CA, help=_TLS_CA_HELP)
    API_KEY.add_to(options, note="; default: the key `astrabox up` saved in ~/.config/astrabox/api-key")
    return options


def _cmd_session(args: argparse.Namespace) -> int:
    return asyncio.run(_session_command(args))


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
    run = sub.add_parser(
        "run",
        help="run one prompt in a new session and print it live, asking you what it asks on a terminal",
        description="Create a session, send PROMPT and print the turn as it happens. When the turn waits for"
        " you (a question, a tool approval, a custom tool's result) it asks on a terminal; elsewhere it prints"
        " the `astrabox session respond` commands that answer and goes on waiting.",
        parents=[connection],
    )
    run.add_argument("prompt", metavar="PROMPT", help="the message the session's first turn answers")
    run.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the turn (default 600)")
    add_session_options(run)
    starting_files.add_arguments(run)
    run.set_defaults(func=_cmd_run)

    session_commands.add_parser(sub, connection, _cmd_session)
    agent_commands.add_parsers(sub, connection, _cmd_agents)
    credential_commands.add_parsers(sub, connection, _cmd_credentials)
    environment_commands.add_parsers(sub, connection, _cmd_environments)
    schedule_commands.add_parsers(sub, connection, _cmd_schedules)
    memory_commands.add_parsers(sub, connection, _cmd_memory)
    admin_commands.add_parsers(sub, connection, _cmd_admin)
    status_commands.add_parsers(sub, connection, _cmd_status)
    webhook_commands.add_parsers(sub, connection, _cmd_webhooks)
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
