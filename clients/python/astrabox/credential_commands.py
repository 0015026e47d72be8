"""`astrabox credentials …`: a project's stored secrets from the command line (CredentialService).

    astrabox credentials put NAME [--description TEXT] [--from-file PATH]   the secret from stdin (or the file)
    astrabox credentials list                                                names, versions, descriptions
    astrabox credentials delete NAME

The secret is never an argument: a command line is visible to every user of the machine (`ps`).
`put` reads it from standard input (one trailing newline dropped; prompted for, unechoed, at a
terminal) or from `--from-file`. An environment binds a credential to hosts
(`credentials:` in its file); the egress proxy adds it to the sandbox's requests to them.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from astrabox.client import AstraBoxClient

__all__ = ["COMMANDS", "add_parsers", "run"]

COMMANDS = ("credentials",)
"""The subcommands this module adds to `astrabox`."""
MAX_SECRET_BYTES = 16 * 1024


def add_parsers(sub: Any, connection: argparse.ArgumentParser, func: Callable[[argparse.Namespace], int]) -> None:
    """Adds `astrabox credentials` to `sub`, taking the `connection` options."""
    credentials = sub.add_parser(
        "credentials", help="store secrets for environments to bind to hosts: put, list, delete", parents=[connection]
    )
    actions = credentials.add_subparsers(dest="action", required=True)
    put = actions.add_parser("put", help="store a secret read from stdin (or --from-file), never from the command line")
    put.add_argument("name", metavar="NAME", help="the credential's name, as environments and agents name it")
    put.add_argument("--description", default="", help="a note about it (never the secret)")
    put.add_argument("--from-file", metavar="PATH", help="read the secret from this file instead of stdin")
    actions.add_parser("list", help="the project's credentials by name (never their secrets)")
    actions.add_parser("delete", help="delete a credential").add_argument(
        "name", metavar="NAME", help="the credential's name"
    )
    credentials.set_defaults(func=func)


def read_secret(args: argparse.Namespace) -> str:
    """The secret of `put`: the file's, or stdin's (prompted for without echo at a terminal)."""
    if args.from_file:
        data = Path(args.from_file).expanduser().read_bytes()[: MAX_SECRET_BYTES + 2]
        text = data.decode("utf-8", errors="strict")
    elif sys.stdin.isatty():
        text = getpass.getpass(f"secret for {args.name}: ")
    else:
        text = sys.stdin.read(MAX_SECRET_BYTES + 2)
    return text.removesuffix("\n").removesuffix("\r")


async def run(args: argparse.Namespace, client: AstraBoxClient) -> int:
    """Carry out the parsed `astrabox credentials` command `args` with `client`; the exit status."""
    if args.action == "put":
        try:
            secret = read_secret(args)
        except (OSError, UnicodeDecodeError) as error:
            print(
                f"astrabox: cannot read the secret: {getattr(error, 'strerror', None) or 'not UTF-8 text'}",
                file=sys.stderr,
            )
            return 2
        if not secret:
            print("astrabox: the secret is empty (give it on stdin or with --from-file)", file=sys.stderr)
            return 2
        stored = await client.credentials.put(args.name, secret, description=args.description)
        print(f"{'created' if stored.created else 'replaced'} {stored.name} v{stored.version}", flush=True)
    elif args.action == "list":
        async for credential in client.credentials.list():
            when = credential.update_time.isoformat(timespec="seconds")
            print(f"{credential.name:<32} v{credential.version:<4} updated {when}  {credential.description}".rstrip())
    else:
        await client.credentials.delete(args.name)
        print(f"deleted {args.name}")
    return 0
