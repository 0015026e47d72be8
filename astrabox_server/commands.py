"""The server's subcommands of `astrabox`, contributed through the `astrabox.commands` entry points.

    astrabox up            control plane + one local agent (+ embedded PostgreSQL, + offline model)
    astrabox demo          `up` in a scratch directory, one real session, then shut down
    astrabox controlplane  the control-plane process
    astrabox agent         the data-plane agent process
    astrabox image build   build the docker driver's sandbox image offline (debootstrap)
                           (--server: the control plane's and agent's image)
    astrabox db status|migrate  the control plane's schema: migrations applied and pending, applying them

`astrabox --help` imports this module to list them, so it stays cheap: each
command imports what it runs when it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

DEFAULT_PROMPT = "Create a file hello.txt in the workspace with a greeting, then show it."


@dataclass(frozen=True, slots=True)
class ServerCommand:
    """One subcommand: its line in `astrabox --help` and what runs it (see astrabox.cli.ContributedCommand)."""

    name: str
    help: str
    run: Callable[[Sequence[str]], int | None]

    def main(self, argv: Sequence[str]) -> int | None:
        """Run it; a server error written for the user (the first failure, also inside exception
        groups) ends it with that error's one line. The client's `astrabox` says what is left."""
        try:
            return self.run(argv)
        except Exception as error:
            from astrabox.failures import causes, describe, print_traceback_if_asked

            found, expected = causes(error), _user_errors()
            if not isinstance(found[0], expected):
                raise
            print_traceback_if_asked(error)
            sys.exit(f"astrabox {self.name}: {describe(found, expected)}")


def _user_errors() -> tuple[type[BaseException], ...]:
    """The server's errors whose message says what failed and what to do about it."""
    from controlplane.database import DatabaseUnreachable, SchemaMismatch
    from controlplane.embedded_postgres import EmbeddedPostgresError
    from controlplane.settings import SettingsError
    from dataplane_agent.engines.base import EngineError
    from dataplane_agent.errors import AgentError
    from dataplane_agent.sandboxes.base import SandboxError
    from dataplane_agent.sandboxes.images import ImageBuildError

    return (
        AgentError,
        DatabaseUnreachable,
        EmbeddedPostgresError,
        EngineError,
        ImageBuildError,
        SandboxError,
        SchemaMismatch,
        SettingsError,
    )


def _up(argv: Sequence[str]) -> None:
    from astrabox_server.stack import main

    main(argv)


def _demo(argv: Sequence[str]) -> int:
    from astrabox_server.stack import run_demo

    parser = argparse.ArgumentParser(prog="astrabox demo", description=DEMO.help)
    parser.add_argument("prompt", nargs="?", default="", help="the prompt (default: create hello.txt)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the turn (default 300)")
    parser.add_argument(
        "--log-format",
        choices=("auto", "json", "console"),
        default="auto",
        help="auto: the logs go to a file (named at the start; warnings and errors also shown here, readable); "
        "json or console: all of them to standard error in that format (default %(default)s)",
    )
    parser.add_argument("--verbose", action="store_true", help="all the logs to standard error")
    args = parser.parse_args(argv)
    return asyncio.run(run_demo(args, args.prompt or DEFAULT_PROMPT))


def _controlplane(argv: Sequence[str]) -> None:
    from controlplane.main import main

    main(list(argv))


def _agent(argv: Sequence[str]) -> None:
    from dataplane_agent.main import main

    main(argv)


def _image(argv: Sequence[str]) -> int:
    from astrabox_server.server_image import DEFAULT_SERVER_IMAGE, build_server_image
    from dataplane_agent.sandboxes.images import ImageBuildError, build_image
    from dataplane_agent.settings import DEFAULT_IMAGE

    parser = argparse.ArgumentParser(prog="astrabox image", description="The docker driver's sandbox image.")
    actions = parser.add_subparsers(dest="action", required=True)
    build = actions.add_parser(
        "build", help="build the sandbox image offline (debootstrap + docker import; needs root)"
    )
    build.add_argument(
        "--server",
        action="store_true",
        help=f"build the server image instead (control plane, agent and PostgreSQL; default tag {DEFAULT_SERVER_IMAGE})",
    )
    build.add_argument(
        "--tag",
        default="",
        help=f"image tag (env ASTRABOX_SANDBOX_IMAGE; default {DEFAULT_IMAGE}, or {DEFAULT_SERVER_IMAGE} with --server)",
    )
    build.add_argument("--rebuild", action="store_true", help="build even when the tag exists")
    build.add_argument("--mirror", default="", help="Debian mirror URL (default: the host's apt source for bookworm)")
    args = parser.parse_args(argv)
    try:
        if args.server:
            tag = args.tag or DEFAULT_SERVER_IMAGE
            asyncio.run(build_server_image(tag, rebuild=args.rebuild, mirror=args.mirror, progress=_progress))
        else:
            tag = args.tag or os.environ.get("ASTRABOX_SANDBOX_IMAGE", DEFAULT_IMAGE)
            asyncio.run(build_image(tag, rebuild=args.rebuild, mirror=args.mirror, progress=_progress))
    except ImageBuildError as error:
        print(f"astrabox image build: {error}", file=sys.stderr)
        return 1
    return 0


def _db(argv: Sequence[str]) -> int:
    from astrabox_server.schema import main

    return main(argv)


def _progress(line: str) -> None:
    print(line, flush=True)


UP = ServerCommand("up", "run the whole stack on this machine (see `astrabox up --help`)", _up)
DEMO = ServerCommand("demo", "bring the stack up in a scratch directory, run one session, shut down", _demo)
CONTROLPLANE = ServerCommand(
    "controlplane", "run the control plane (see `astrabox controlplane --help`)", _controlplane
)
AGENT = ServerCommand("agent", "run a data-plane agent (see `astrabox agent --help`)", _agent)
IMAGE = ServerCommand("image", "the docker driver's sandbox image (`astrabox image build`)", _image)
DB = ServerCommand("db", "the control plane's database schema (`astrabox db status`, `astrabox db migrate`)", _db)
