"""`astrabox environments …`: a project's environments from the command line (EnvironmentService).

    astrabox environments apply FILE... [--timeout D]   create each environment, or give it a new version
    astrabox environments list [--all]                  the project's environments (--all: archived too)
    astrabox environments show NAME[@VERSION] [--output yaml|json]
    astrabox environments versions NAME                 its versions, newest first
    astrabox environments archive NAME                  it starts no new session
    astrabox environments build NAME[@VERSION] [--agent ID] [--wait] [--timeout D]
                                                        its layer built on the live agents (or one)

`build` shows each agent's progress as it streams (`astrabox.build_progress`: bars redrawn on a
terminal, a line per step elsewhere). With `--wait` it follows every agent to READY or FAILED and
exits 1 if any failed, printing the package manager's error; without it, it returns at the first step
shown: the build is queued durably on every agent asked by then and goes on (a session's start waits
for its layer anyway). A version with nothing to build (no package, no setup script) says so and
exits 0: it has no layer.

`--timeout` (default 30m; "90s", "1h30m") bounds the whole command's waiting for builds. When it runs
out the command exits 1 naming each agent still building and its last step; the builds go on on the
agents (leaving cancels none), and `apply` still applies its remaining files, building none of them.
`apply` builds each new version that has packages or a setup script on every live agent and waits
for the outcome as `build --wait` does (a mistake in a package shows now, not at a session's start),
unless `--no-build`; with no agent connected it says so and the first session's start builds it.

`apply` reads every file first (astrabox.environment_files), so a mistake in any of them applies
nothing, then prints one line per environment: "created python-ci v1", "python-ci v3 (new
version)" or "python-ci v3 (unchanged)". `show` prints the environment file of a version, which
`apply` takes back as it is.

`astrabox run --environment NAME[@VERSION]` and `astrabox session create --environment …` start
their session in it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import grpc

from astrabox import environment_files
from astrabox._definition_commands import applied, as_json, when
from astrabox.agent_commands import agent_reference
from astrabox.agent_files import parse_duration
from astrabox.build_progress import BuildView
from astrabox.client import AstraBoxClient
from astrabox.environment_definitions import Environment, EnvironmentVersion
from astrabox.errors import AstraBoxError

__all__ = ["COMMANDS", "add_parsers", "environment_reference", "run"]

COMMANDS = ("environments",)
"""The subcommands this module adds to `astrabox`."""

DEFAULT_BUILD_TIMEOUT = "30m"
"""How long `build` and `apply` wait for builds, unless `--timeout` says."""


def environment_reference(text: str) -> tuple[str, int]:
    """`NAME` or `NAME@VERSION` (a name or an environment's id) as (environment, version); version 0
    is the newest. Read as agents are (`agent_commands.agent_reference`)."""
    return agent_reference(text)


def add_parsers(sub: Any, connection: argparse.ArgumentParser, func: Callable[[argparse.Namespace], int]) -> None:
    """Adds `astrabox environments` to `sub` (the subparsers of `astrabox`), taking the `connection` options."""
    environments = sub.add_parser(
        "environments",
        help="define where sessions run in YAML files: apply, list, show, versions, archive, build",
        parents=[connection],
    )
    actions = environments.add_subparsers(dest="action", required=True)
    apply = actions.add_parser("apply", help="create each file's environments, or give them a new version if changed")
    apply.add_argument("files", nargs="+", metavar="FILE", help="environment files (YAML), one or more each")
    apply.add_argument("--no-build", action="store_true", help="do not build new versions' layers on the agents now")
    _timeout_option(apply)
    listing = actions.add_parser("list", help="the project's environments by name")
    listing.add_argument("--all", action="store_true", help="archived environments too")
    show = actions.add_parser("show", help="an environment's definition, as a file `apply` takes back")
    show.add_argument(
        "reference",
        type=environment_reference,
        metavar="NAME[@VERSION]",
        help="the environment (default: newest version)",
    )
    show.add_argument(
        "--output", "-o", choices=("yaml", "json"), default="yaml", help="yaml: an environment file (the default); json"
    )
    actions.add_parser("versions", help="an environment's versions, newest first").add_argument(
        "name", metavar="NAME", help="the environment's name or id"
    )
    actions.add_parser("archive", help="start no new session in it").add_argument(
        "name", metavar="NAME", help="the environment's name or id"
    )
    build = actions.add_parser("build", help="build a version's layer on the live agents, showing their progress")
    build.add_argument(
        "reference",
        type=environment_reference,
        metavar="NAME[@VERSION]",
        help="the environment (default: newest version)",
    )
    build.add_argument("--agent", default="", metavar="ID", help="only on this data-plane agent")
    build.add_argument(
        "--wait", action="store_true", help="follow every agent to READY or FAILED (exit 1 if any failed)"
    )
    _timeout_option(build)
    environments.set_defaults(func=func)


def _timeout_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout",
        type=_duration,
        default=_duration(DEFAULT_BUILD_TIMEOUT),
        metavar="DURATION",
        help=f"stop waiting for builds after this long, exit 1 (they go on on the agents; default {DEFAULT_BUILD_TIMEOUT})",
    )


def _duration(text: str) -> float:
    try:
        seconds = float(parse_duration(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a timeout must be longer than 0s")
    return seconds


async def run(args: argparse.Namespace, client: AstraBoxClient) -> int:
    """Carry out the parsed `astrabox environments` command `args` with `client`; the exit status."""
    actions = {
        "apply": _apply,
        "list": _list,
        "show": _show,
        "versions": _versions,
        "archive": _archive,
        "build": _build,
    }
    try:
        if not await actions[args.action](args, client):
            return 1
    except AstraBoxError as error:
        if error.code == grpc.StatusCode.UNIMPLEMENTED and not error.reason:
            raise AstraBoxError(
                error.code,
                f"the control plane at {args.target} serves no environments (EnvironmentService):"
                " it is older than this client",
            ) from error
        raise
    return 0


async def _apply(args: argparse.Namespace, client: AstraBoxClient) -> bool:
    built = True
    deadline = time.monotonic() + args.timeout
    for environment in [e for path in args.files for e in environment_files.load(path)]:
        done = await client.environments.apply(environment.name, environment.spec)
        print(applied(done.environment.name, done.version.version, done.new_environment, done.created), flush=True)
        if done.created and done.version.build_digest and not args.no_build:
            if deadline <= time.monotonic():
                print(
                    "  not built now: --timeout ran out; a session's first start builds it"
                    f" (or `astrabox environments build {done.environment.name} --wait`)",
                    flush=True,
                )
                built = False
                continue
            try:
                built &= await _follow(
                    client, done.environment.name, done.version.version, "", wait=True, deadline=deadline
                )
            except AstraBoxError as error:
                if error.reason == "NO_AGENT_AVAILABLE":
                    print("  no agent is connected: the layer is built when a session first starts in it", flush=True)
                elif error.code == grpc.StatusCode.UNIMPLEMENTED:
                    print("  this control plane builds no layer ahead: a session's first start builds it", flush=True)
                else:
                    raise
    return built


async def _build(args: argparse.Namespace, client: AstraBoxClient) -> bool:
    name, number = args.reference
    deadline = time.monotonic() + args.timeout
    return await _follow(client, name, number, args.agent, wait=args.wait, deadline=deadline)


async def _follow(
    client: AstraBoxClient, name: str, version: int, agent_id: str, *, wait: bool, deadline: float
) -> bool:
    """Shows the build's progress; whether no agent's build failed and all ended by `deadline` (a
    time.monotonic()). Without `wait`, returns at the first step: by then the control plane has queued
    the build durably on every agent it asked (an agent that reconnects gets it again), so leaving
    cancels nothing."""
    view = BuildView(sys.stdout, tty=sys.stdout.isatty())
    steps = 0
    try:
        async for progress in client.environments.build(
            name, version, agent_id, timeout=max(0.001, deadline - time.monotonic())
        ):
            steps += 1
            view.show(progress)
            if not wait:
                if not progress.done:
                    print("the build goes on on the agents; `--wait` follows it to its end", flush=True)
                break
    except AstraBoxError as error:
        if error.code != grpc.StatusCode.DEADLINE_EXCEEDED:
            raise
        print(_timed_out(name, view), file=sys.stderr, flush=True)
        return False
    if not steps:
        print(f"{name} has no package and no setup script: no layer to build (its sessions start on the plain sandbox)")
    return not view.failed


def _timed_out(name: str, view: BuildView) -> str:
    """What `--timeout` running out says: who was still building, and that the builds go on."""
    building = view.building()
    if building:
        still = ", ".join(f"{agent} ({step})" for agent, step in building.items())
        what = f"still building on {still}"
    else:
        what = "no agent had reported a step"
    return (
        f"astrabox: --timeout ran out waiting for the build of {name}: {what}. The build goes on on the"
        f" agents; `astrabox environments build {name} --wait` follows it again"
    )


async def _list(args: argparse.Namespace, client: AstraBoxClient) -> bool:
    async for environment in client.environments.list(archived=args.all):
        archived = "  archived" if environment.archived else ""
        print(
            f"{environment.name:<24} v{environment.latest_version:<4} updated {when(environment.update_time)}{archived}"
        )
    return True


async def _show(args: argparse.Namespace, client: AstraBoxClient) -> bool:
    name, number = args.reference
    environment, version = await client.environments.get(name, number)
    print(_json(environment, version) if args.output == "json" else _yaml(environment, version), end="")
    return True


async def _versions(args: argparse.Namespace, client: AstraBoxClient) -> bool:
    async for version in client.environments.versions(args.name):
        print(
            f"v{version.version:<4} made {when(version.create_time)}  sha256 {version.spec_digest[:16]}"
            f"  layer {version.build_digest[:16]}"
        )
    return True


async def _archive(args: argparse.Namespace, client: AstraBoxClient) -> bool:
    environment = await client.environments.archive(args.name)
    print(f"archived {environment.name} (at v{environment.latest_version}; its sessions go on)")
    return True


def _yaml(environment: Environment, version: EnvironmentVersion) -> str:
    archived = ", archived" if environment.archived else ""
    return (
        f"# environment {environment.name} v{version.version} of {environment.latest_version}{archived};"
        f" id {environment.environment_id}\n"
        f"# made {when(version.create_time)}, sha256 {version.spec_digest}, layer {version.build_digest}\n"
        + environment_files.dump(environment.name, version.spec)
    )


def _json(environment: Environment, version: EnvironmentVersion) -> str:
    identity = {
        "environment_id": environment.environment_id,
        "name": environment.name,
        "latest_version": environment.latest_version,
        "archived": environment.archived,
        "version": version.version,
        "spec_digest": version.spec_digest,
        "build_digest": version.build_digest,
    }
    return as_json(identity, version.create_time, version.spec)
