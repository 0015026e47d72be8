"""`astrabox agents …`: a project's agent definitions from the command line (AgentService).

    astrabox agents apply FILE...                       create each agent, or give it a new version
    astrabox agents list [--all]                        the project's agents (--all: archived ones too)
    astrabox agents show NAME [--version N] [--output yaml|json]
    astrabox agents versions NAME                       its versions, newest first
    astrabox agents archive NAME                        it starts no new session

`apply` reads every file first (astrabox.agent_files), so a mistake in any of them applies
nothing, then prints one line per agent: "created reviewer v1", "reviewer v3 (new version)" or
"reviewer v3 (unchanged)". Applying the same file again makes no version. `show` prints the agent
file of a version (the default output, YAML, with its identity in comments), which `apply` takes
back as it is.

`astrabox run --agent NAME[@VERSION]` starts its session from an agent (`agent_reference`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import grpc

from astrabox import agent_files
from astrabox._definition_commands import applied, as_json, when
from astrabox.agent_definitions import AgentDefinition, AgentVersion
from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError

__all__ = ["COMMANDS", "add_parsers", "agent_reference", "run"]

COMMANDS = ("agents",)
"""The subcommands this module adds to `astrabox`."""


def agent_reference(text: str) -> tuple[str, int]:
    """`NAME` or `NAME@VERSION` (a name or an agent's id) as (agent, version); version 0 is the newest."""
    agent, at, version = text.partition("@")
    if not agent or (at and not (version.isdigit() and int(version) > 0)):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME or NAME@VERSION (a version from 1)")
    return agent, int(version) if at else 0


def add_parsers(sub: Any, connection: argparse.ArgumentParser, func: Callable[[argparse.Namespace], int]) -> None:
    """Adds `astrabox agents` to `sub` (the subparsers of `astrabox`), taking the `connection` options."""
    agents = sub.add_parser(
        "agents", help="define agents in YAML files: apply, list, show, versions, archive", parents=[connection]
    )
    actions = agents.add_subparsers(dest="action", required=True)
    apply = actions.add_parser("apply", help="create each file's agents, or give them a new version if changed")
    apply.add_argument("files", nargs="+", metavar="FILE", help="agent files (YAML), one or more agents each")
    listing = actions.add_parser("list", help="the project's agents by name")
    listing.add_argument("--all", action="store_true", help="archived agents too")
    show = actions.add_parser("show", help="an agent's definition, as a file `apply` takes back")
    show.add_argument("name", metavar="NAME", help="the agent's name or id")
    show.add_argument("--version", type=int, default=0, help="this version (default: the newest)")
    show.add_argument(
        "--output", "-o", choices=("yaml", "json"), default="yaml", help="yaml: an agent file (the default); json"
    )
    actions.add_parser("versions", help="an agent's versions, newest first").add_argument(
        "name", metavar="NAME", help="the agent's name or id"
    )
    actions.add_parser("archive", help="start no new session from it").add_argument(
        "name", metavar="NAME", help="the agent's name or id"
    )
    agents.set_defaults(func=func)


async def run(args: argparse.Namespace, client: AstraBoxClient) -> int:
    """Carry out the parsed `astrabox agents` command `args` with `client`; the exit status."""
    actions = {"apply": _apply, "list": _list, "show": _show, "versions": _versions, "archive": _archive}
    try:
        await actions[args.action](args, client)
    except AstraBoxError as error:
        if error.code == grpc.StatusCode.UNIMPLEMENTED and not error.reason:
            raise AstraBoxError(
                error.code,
                f"the control plane at {args.target} serves no agents (AgentService): it is older than this client",
            ) from error
        raise
    return 0


async def _apply(args: argparse.Namespace, client: AstraBoxClient) -> None:
    for agent in [agent for path in args.files for agent in agent_files.load(path)]:
        done = await client.agents.apply(agent.name, agent.spec)
        print(applied(done.agent.name, done.version.version, done.new_agent, done.created), flush=True)


async def _list(args: argparse.Namespace, client: AstraBoxClient) -> None:
    async for agent in client.agents.list(archived=args.all):
        archived = "  archived" if agent.archived else ""
        print(f"{agent.name:<24} v{agent.latest_version:<4} updated {when(agent.update_time)}{archived}")


async def _show(args: argparse.Namespace, client: AstraBoxClient) -> None:
    agent, version = await client.agents.get(args.name, args.version)
    print(_json(agent, version) if args.output == "json" else _yaml(agent, version), end="")


async def _versions(args: argparse.Namespace, client: AstraBoxClient) -> None:
    async for version in client.agents.versions(args.name):
        print(f"v{version.version:<4} made {when(version.create_time)}  sha256 {version.spec_digest[:16]}")


async def _archive(args: argparse.Namespace, client: AstraBoxClient) -> None:
    agent = await client.agents.archive(args.name)
    print(f"archived {agent.name} (at v{agent.latest_version}; its sessions go on)")


def _yaml(agent: AgentDefinition, version: AgentVersion) -> str:
    """The agent file of `version`, its identity in comments (which `apply` passes over)."""
    archived = ", archived" if agent.archived else ""
    return (
        f"# agent {agent.name} v{version.version} of {agent.latest_version}{archived}; id {agent.agent_id}\n"
        f"# made {when(version.create_time)}, sha256 {version.spec_digest}\n"
        + agent_files.dump(agent.name, version.spec)
    )


def _json(agent: AgentDefinition, version: AgentVersion) -> str:
    identity = {
        "agent_id": agent.agent_id,
        "name": agent.name,
        "latest_version": agent.latest_version,
        "archived": agent.archived,
        "version": version.version,
        "spec_digest": version.spec_digest,
    }
    return as_json(identity, version.create_time, version.spec)
