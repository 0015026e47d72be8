"""Every table of the control plane has one owner module, which holds every SQL statement naming it.

A statement naming a table (INSERT INTO, UPDATE, DELETE FROM, FROM, JOIN) anywhere else in
controlplane/ fails here with its file and line, unless it is one of the documented EXCEPTIONS
(the map is in `controlplane`'s docstring too).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import controlplane

ROOT = Path(controlplane.__file__).parent

OWNERS = {
    "sessions": "store/sessions.py",
    "events": "store/events.py",
    "turns": "store/turns.py",
    "interactions": "store/interactions.py",
    "background_tasks": "store/background_tasks.py",
    "open_tool_calls": "store/tool_calls.py",
    "tool_grants": "store/tool_grants.py",
    "session_requests": "store/session_requests.py",
    "engine_transcripts": "store/engine_transcripts.py",
    "agents": "store/agents.py",
    "agent_commands": "store/agent_commands.py",
    "agent_credentials": "store/agent_credentials.py",
    "agent_join_tokens": "store/agent_join_tokens.py",
    "cluster_secret": "store/cluster_secret.py",
    "project_quotas": "store/project_quotas.py",
    "command_leases": "store/command_leases.py",
    "agent_definitions": "store/agent_definitions.py",
    "agent_definition_versions": "store/agent_definition_versions.py",
    "credential_store": "store/credential_store.py",
    "environments": "store/environments.py",
    "environment_versions": "store/environment_versions.py",
    "webhooks": "store/webhooks.py",
    "webhook_deliveries": "store/webhook_deliveries.py",
    "webhook_attempts": "store/webhook_attempts.py",
    "schedules": "store/schedules.py",
    "schedule_runs": "store/schedule_runs.py",
    "memory_stores": "store/memory_stores.py",
    "session_memory": "store/memory_stores.py",
    "memory_versions": "store/memory_versions.py",
    "subagent_calls": "store/subagent_calls.py",
    "schema_migrations": "database.py",  # the migrator's own bookkeeping
    "projects": "identity/store.py",
    "api_keys": "identity/store.py",
    "audit_records": "identity/audit.py",
}

# (module, table it names but does not own): why.
EXCEPTIONS = {
    (
        "store/events.py",
        "sessions",
    ): "the journal's append moves sessions.last_seq (and an agent's cursor) on in the step that inserts",
    (
        "store/events.py",
        "turns",
    ): "an agent's plain outputs are journaled in one statement, if their turn has not ended",
    ("store/agents.py", "sessions"): "placement counts the sessions on each agent",
    ("store/sessions.py", "interactions"): "a session's view shows its pending interaction",
    (
        "store/schedule_runs.py",
        "schedules",
    ): "a run is worked on with its schedule's spec, read in the statement that leases it",
    ("store/sessions.py", "background_tasks"): "a session's view shows its open tasks; an idle session has none",
    ("store/sessions.py", "turns"): "a session's view shows its queued turns; an idle session has none",
    ("store/sessions.py", "tool_grants"): "a session's view shows its tool grants in force",
    ("store/sessions.py", "subagent_calls"): "a sub-agent's session shows the call that started it",
    ("store/sessions.py", "agents"): "a session's view shows its engine's manifest; the sweep finds lapsed leases",
    ("store/sessions.py", "events"): "an idle session's last event is older than the idle period",
    ("store/sessions.py", "agent_commands"): "a destruction is retried when no command for the session is pending",
    (
        "store/session_forks.py",
        "sessions",
    ): "a fork's columns of sessions (where it came from, its files copied), apart: store/sessions.py is past 600 lines",
}

_NAMED = re.compile(r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|FROM|JOIN)\s+([a-z_][a-z0-9_]*)")
_CREATED = re.compile(r"\bCREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?([a-z_][a-z0-9_]*)")


def _strings(source: str) -> list[tuple[int, str]]:
    """The string literals of a module with their lines; an f-string's fields read as `{}`."""
    nodes = list(ast.walk(ast.parse(source)))
    parts = {id(v) for node in nodes if isinstance(node, ast.JoinedStr) for v in node.values}
    found = []
    for node in nodes:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts:
            found.append((node.lineno, node.value))
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            found.append((node.lineno, text))
    return found


def tables() -> set[str]:
    """The tables the migrations create, and the migrator's own."""
    created = set()
    for path in (ROOT / "migrations").glob("*.sql"):
        created.update(_CREATED.findall(path.read_text()))
    for path in ROOT.rglob("*.py"):
        for _, text in _strings(path.read_text()):
            created.update(_CREATED.findall(text))
    return created


def violations(root: Path, known: set[str]) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).as_posix()
        for line, text in _strings(path.read_text()):
            for table in _NAMED.findall(text):
                if table in known and OWNERS.get(table) != module and (module, table) not in EXCEPTIONS:
                    found.append(f"controlplane/{module}:{line} names {table}, owned by {OWNERS.get(table)}")
    return found


def test_every_table_has_an_owner_module() -> None:
    known = tables()
    assert "sessions" in known and "schema_migrations" in known  # the scan finds them
    unowned = sorted(known - set(OWNERS))
    assert not unowned, f"tables without an owner module (add them to OWNERS and controlplane's map): {unowned}"
    for table, module in OWNERS.items():
        assert (ROOT / module).is_file(), f"the owner of {table}, controlplane/{module}, does not exist"


def test_sql_touches_a_table_only_in_its_owner_module() -> None:
    assert violations(ROOT, tables()) == []


def test_exceptions_are_still_needed() -> None:
    """An exception no statement uses any more is stale: remove it (here and in the map)."""
    for module, table in EXCEPTIONS:
        source = (ROOT / module).read_text()
        assert any(table in _NAMED.findall(text) for _, text in _strings(source)), (module, table)


def test_a_statement_outside_the_owner_is_named(tmp_path: Path) -> None:
    (tmp_path / "kernel.py").write_text(
        'async def f(conn):\n    await conn.execute("UPDATE turns SET state = $1", "x")\n'
        '    await conn.fetch(f"SELECT * FROM {x} JOIN interactions i USING (session_id)")\n'
    )
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "turns.py").write_text('Q = "SELECT turn_id FROM turns"\n')
    assert violations(tmp_path, {"turns", "interactions"}) == [
        "controlplane/kernel.py:2 names turns, owned by store/turns.py",
        "controlplane/kernel.py:3 names interactions, owned by store/interactions.py",
    ]


def test_the_package_map_names_every_owner() -> None:
    documented = controlplane.__doc__ or ""
    for table, module in OWNERS.items():
        assert Path(module).name in documented and table in documented, (table, module)
