"""`astrabox whoami`, `astrabox projects …` and `astrabox keys …`: AdminService from the command line.

    astrabox whoami
    astrabox projects create NAME            (operator admins)
    astrabox projects list
    astrabox keys create NAME --role developer [--project ID] [--expires-in-days N]
    astrabox keys list [--project ID]
    astrabox keys revoke KEY_ID
    astrabox audit [--project ID] [--session ID] [--limit N]
    astrabox projects credential-hosts any|dedicated [--project ID]
    astrabox hosts list | admit AGENT_ID | revoke AGENT_ID | dedicate AGENT_ID [--project ID]  (operator admins)
    astrabox hosts join-token [--ttl 1h] [--project ID]
    astrabox hosts cordon AGENT_ID | uncordon AGENT_ID | drain AGENT_ID [--timeout SECONDS]
    astrabox quotas show [--project ID]
    astrabox quotas set [--project ID] [--live-sessions N|default] [--sessions-per-minute N|default]
                        [--message-bytes N|default] [--upload-bytes N|default]
                        [--concurrent-commands N|default]          (operator admins)

`quotas set` changes the quotas it names and keeps the others as they are set.

`keys create` prints the new key once, on its own line, so that
`astrabox keys create ci --role developer > ci.key` keeps only the key.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from astrabox.admin.v1 import admin_service_pb2 as admin
from astrabox.administration import QUOTAS
from astrabox.client import AstraBoxClient

__all__ = ["COMMANDS", "ROLES", "add_parsers", "run"]

COMMANDS = ("whoami", "projects", "keys", "audit", "hosts", "quotas")
"""The subcommands this module adds to `astrabox`."""
ROLES = ("viewer", "developer", "admin")
"""The roles `keys create --role` takes."""


_AGENT_ID_HELP = "the agent's id, as `hosts list` shows it"


def add_parsers(sub: Any, connection: argparse.ArgumentParser, func: Callable[[argparse.Namespace], int]) -> None:
    """Adds the commands to `sub` (the subparsers of `astrabox`), each taking the `connection` options."""
    sub.add_parser("whoami", help="the project, role and key of the credential in use", parents=[connection])
    projects = sub.add_parser("projects", help="create and list projects", parents=[connection])
    actions = projects.add_subparsers(dest="action", required=True)
    actions.add_parser("create", help="create a project (operator admins)").add_argument(
        "name", help="the project's name"
    )
    actions.add_parser("list", help="the projects this key may manage")
    hosts_policy = actions.add_parser(
        "credential-hosts", help="where sessions that bind credentials may run: any host, or dedicated ones only"
    )
    hosts_policy.add_argument(
        "credential_hosts",
        choices=("any", "dedicated"),
        help="any: every host; dedicated: the project's own hosts only",
    )
    hosts_policy.add_argument("--project", default="", help="project id (default: the key in use's)")
    keys = sub.add_parser("keys", help="create, list and revoke API keys", parents=[connection])
    actions = keys.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="create a key and print it (shown only now)")
    create.add_argument("name", help="a name for the key (who or what uses it)")
    create.add_argument("--role", choices=ROLES, required=True, help="what the key may do")
    create.add_argument("--project", default="", help="project id (default: the key in use's)")
    create.add_argument("--expires-in-days", type=float, default=0, help="0: never (the default)")
    listing = actions.add_parser("list", help="a project's keys (never their secrets)")
    listing.add_argument("--project", default="", help="project id (default: the key in use's)")
    actions.add_parser("revoke", help="revoke a key at once").add_argument(
        "key_id", help="the key's id, as `keys list` shows it"
    )
    trail = sub.add_parser(
        "audit", help="who did what: the project's mutating calls, newest first", parents=[connection]
    )
    trail.add_argument("--project", default="", help="project id (default: the key in use's)")
    trail.add_argument("--session", default="", help="only this session's")
    trail.add_argument("--limit", type=int, default=50, help="at most this many records (default %(default)s)")
    hosts = sub.add_parser("hosts", help="list, revoke and dedicate hosts (data-plane agents)", parents=[connection])
    actions = hosts.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="the hosts whose agents enrolled, pending ones with their fingerprint")
    actions.add_parser(
        "admit", help="give a pending agent work (check its fingerprint against the agent's log first)"
    ).add_argument("agent_id", help=_AGENT_ID_HELP)
    join = actions.add_parser("join-token", help="mint a token that admits one new agent, once (shown once)")
    join.add_argument("--ttl", type=_duration, default=None, metavar="DURATION", help="e.g. 30m, 1h, 2d (default 1h)")
    join.add_argument("--project", default="", help="dedicate the agent to this project id (default: shared pool)")
    actions.add_parser("revoke", help="close its stream and refuse it from now on").add_argument(
        "agent_id", help=_AGENT_ID_HELP
    )
    dedicate = actions.add_parser("dedicate", help="run only a project's sessions on it (no --project: shared)")
    dedicate.add_argument("agent_id", help=_AGENT_ID_HELP)
    dedicate.add_argument("--project", default="", help="project id (default: the shared pool)")
    actions.add_parser("cordon", help="take no new sessions on it; what runs goes on").add_argument(
        "agent_id", help=_AGENT_ID_HELP
    )
    actions.add_parser("uncordon", help="place sessions on it again (ends a drain)").add_argument(
        "agent_id", help=_AGENT_ID_HELP
    )
    drain = actions.add_parser("drain", help="cordon it and move its sessions elsewhere as each falls idle")
    drain.add_argument("agent_id", help=_AGENT_ID_HELP)
    drain.add_argument(
        "--timeout", type=int, default=0, help="seconds turns may run before they are interrupted (default 1800)"
    )
    limits = sub.add_parser("quotas", help="a project's quotas: show them, or set them", parents=[connection])
    actions = limits.add_subparsers(dest="action", required=True)
    show = actions.add_parser("show", help="the limits in force, those set, and what is in use")
    show.add_argument("--project", default="", help="project id (default: the key in use's)")
    change = actions.add_parser("set", help="set quotas (operator admins); the others stay as they are")
    change.add_argument("--project", default="", help="project id (default: the key in use's)")
    for name in QUOTAS:
        change.add_argument(
            f"--{name.replace('_', '-')}", type=_quota_value, metavar="N|default", help="'default': back to it"
        )
    for name in COMMANDS:
        sub.choices[name].set_defaults(func=func)


_DEFAULT = -1  # `quotas set --NAME default`
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(text: str) -> timedelta:
    """`90s`, `30m`, `1h`, `2d` (a bare number: seconds)."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    return timedelta(seconds=float(number) * _UNITS[unit])


def _quota_value(text: str) -> int:
    if text == "default":
        return _DEFAULT
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


def _quota_lines(project_id: str, configured: admin.Quotas, effective: admin.Quotas, usage: Any = None) -> None:
    print(f"project {project_id}")
    print(f"{'quota':<21} {'limit':>10}  {'set':<8} in use")
    for name in QUOTAS:
        chosen = str(getattr(configured, name)) if configured.HasField(name) else "default"
        used = str(getattr(usage, name)) if usage is not None and name in usage.DESCRIPTOR.fields_by_name else "-"
        print(f"{name:<21} {getattr(effective, name):>10}  {chosen:<8} {used}")


def _when(value: Any, has: bool) -> str:
    return value.ToDatetime(tzinfo=UTC).isoformat(timespec="seconds") if has else "-"


def _key_line(key: admin.ApiKey) -> str:
    state = "revoked" if key.HasField("revoke_time") else "active"
    if (
        state == "active"
        and key.HasField("expire_time")
        and key.expire_time.ToDatetime(tzinfo=UTC) <= datetime.now(UTC)
    ):
        state = "expired"
    role = admin.Role.Name(key.role).removeprefix("ROLE_").lower()
    return (
        f"{key.key_id}  {role:<9} {state:<7} last used {_when(key.last_use_time, key.HasField('last_use_time'))}"
        f"  expires {_when(key.expire_time, key.HasField('expire_time'))}  {key.name}"
    )


async def _hold(client: AstraBoxClient, args: argparse.Namespace) -> admin.AgentHold:
    if args.action == "cordon":
        return await client.admin.cordon_agent(args.agent_id)
    if args.action == "uncordon":
        return await client.admin.uncordon_agent(args.agent_id)
    return await client.admin.drain_agent(args.agent_id, timeout_seconds=args.timeout)


def _agent_line(agent: admin.Agent) -> str:
    if agent.HasField("revoke_time"):
        state = f"revoked {_when(agent.revoke_time, True)}"
    elif agent.HasField("admit_time"):
        state = f"admitted {_when(agent.admit_time, True)} by {agent.admitted_by}"
    else:
        seen = f", last tried {_when(agent.last_refused_time, True)} from {agent.last_peer}" if agent.last_peer else ""
        state = f"PENDING (astrabox hosts admit {agent.agent_id}){seen}"
    return f"{agent.agent_id}  {agent.fingerprint}  enrolled {_when(agent.enroll_time, True)}  {state}"


def _hold_line(hold: admin.AgentHold) -> str:
    if hold.HasField("drain_deadline"):
        return f"{hold.agent_id} draining: no new sessions; turns still running at {_when(hold.drain_deadline, True)} are interrupted"
    if hold.HasField("cordon_time"):
        return f"{hold.agent_id} cordoned since {_when(hold.cordon_time, True)}: no new sessions"
    return f"{hold.agent_id} takes new sessions"


async def run(args: argparse.Namespace, client: AstraBoxClient) -> int:
    """Carry out the parsed command `args` with `client`; the exit status."""
    if args.command == "hosts":
        if args.action == "list":
            for agent in await client.admin.list_agents():
                print(_agent_line(agent))
        elif args.action == "admit":
            print(f"admitted {_agent_line(await client.admin.admit_agent(args.agent_id))}")
        elif args.action == "join-token":
            made = await client.admin.create_join_token(args.ttl, args.project)
            where = f"dedicated to project {made.join_token.project_id}" if made.join_token.project_id else "shared"
            print(
                f"join token {made.join_token.token_id}: admits one new agent ({where}) until"
                f" {_when(made.join_token.expire_time, True)}; give it as ASTRABOX_JOIN_TOKEN (or --join-token-file)",
                file=sys.stderr,
            )
            print(made.token)
        elif args.action in ("cordon", "uncordon", "drain"):
            print(_hold_line(await _hold(client, args)))
        elif args.action == "dedicate":
            dedicated = await client.admin.dedicate_agent(args.agent_id, args.project)
            print(f"{dedicated.agent_id} runs {dedicated.project_id or 'any project'}'s sessions")
        else:
            agent = await client.admin.revoke_agent(args.agent_id)
            print(f"revoked {agent.agent_id}")
    elif args.command == "audit":
        token, shown = "", 0
        while shown < args.limit:
            page = await client.admin.list_audit_records(
                args.project, session_id=args.session, page_size=min(500, args.limit - shown), page_token=token
            )
            for record in page.records:
                details = " ".join(f"{k}={v}" for k, v in sorted(record.details.items()))
                session = f" session {record.session_id}" if record.session_id else ""
                when = _when(record.time, True)
                print(f"{when}  {record.actor:<22} {record.method:<24} {record.code:<18}{session} {details}".rstrip())
            shown += len(page.records)
            if not (token := page.next_page_token):
                break
    elif args.command == "quotas" and args.action == "show":
        found = await client.admin.get_quotas(args.project)
        _quota_lines(found.project_id, found.configured, found.effective, found.usage)
    elif args.command == "quotas":
        current = (await client.admin.get_quotas(args.project)).configured
        values = {name: getattr(current, name) if current.HasField(name) else None for name in QUOTAS}
        for name in QUOTAS:
            if (given := getattr(args, name)) is not None:
                values[name] = None if given == _DEFAULT else given
        stored = await client.admin.set_quotas(args.project, **values)
        _quota_lines(stored.project_id, stored.configured, stored.effective)
    elif args.command == "whoami":
        caller = await client.admin.whoami()
        role = admin.Role.Name(caller.role).removeprefix("ROLE_").lower()
        operator = " (operator)" if caller.project.operator else ""
        print(f"key {caller.key_id}: {role} of project {caller.project.name}{operator} {caller.project.project_id}")
    elif args.command == "projects" and args.action == "credential-hosts":
        project = await client.admin.set_credential_hosts(args.credential_hosts, args.project)
        hosts = admin.CredentialHosts.Name(project.credential_hosts).removeprefix("CREDENTIAL_HOSTS_").lower()
        print(f"{project.project_id}  {project.name}: sessions that bind credentials run on {hosts} hosts")
    elif args.command == "projects" and args.action == "create":
        project = await client.admin.create_project(args.name)
        print(f"{project.project_id}  {project.name}")
    elif args.command == "projects":
        for project in await client.admin.list_projects():
            print(f"{project.project_id}  {project.name}{'  (operator)' if project.operator else ''}")
    elif args.action == "create":
        expires = datetime.now(UTC) + timedelta(days=args.expires_in_days) if args.expires_in_days > 0 else None
        created = await client.admin.create_api_key(args.name, role=args.role, project_id=args.project, expires=expires)
        print(f"created {_key_line(created.key)}", file=sys.stderr)
        print(created.secret)
    elif args.action == "list":
        for key in await client.admin.list_api_keys(args.project):
            print(_key_line(key))
    else:
        print(f"revoked {_key_line(await client.admin.revoke_api_key(args.key_id))}")
    return 0
