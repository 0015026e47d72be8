"""The deployment artifacts in deploy/ hold together with the code they deploy.

- Every metric the Grafana dashboard and the Prometheus rules query exists, with the labels they
  match on, in the real registries of a control plane (serving on a real database) and an agent
  (on a real agent database): names as exposed, a counter's `_total`, a histogram's
  `_bucket`/`_sum`/`_count`. A renamed metric fails here rather than on an operator's empty panel
  or an alert that can never fire.
- The rules file is valid for Prometheus (`promtool check rules`, and its example configuration
  `promtool check config`) and carries what an operator needs: a summary, a description and a
  runbook on every alert, and an alert for each thing issue 15 names.
- The dashboard is well-formed Grafana JSON: unique panel ids, every panel on the datasource
  variable with at least one query.
- The systemd units pass `systemd-analyze verify` and keep their hardening.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from prometheus_client import CollectorRegistry

from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from controlplane.server import serve
from controlplane.settings import ControlPlaneSettings
from dataplane_agent.metrics import AgentMetrics, ScrapeSources
from dataplane_agent.relay.client import RelayClient, RelayConfig
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from dataplane_agent.sandboxes.usage import UsageSampler
from dataplane_agent.settings import AgentSettings
from dataplane_agent.state import AgentState
from dataplane_agent.state_database import Database
from serverkit.settings import CONFIG_ENV, Option, Secret

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
RULES = DEPLOY / "prometheus" / "alerts.yml"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
DASHBOARD = DEPLOY / "grafana" / "astrabox.json"
SYSTEMD = DEPLOY / "systemd"
UNITS = {"astrabox-controlplane.service": "controlplane", "astrabox-agent.service": "agent"}
INSTALLED = "/opt/astrabox/venv/bin/astrabox"
# The secrets' variables (astrabox.secret_settings.SecretOption).
SECRET = r"DATABASE_URL|TOKEN|API_KEY|CREDENTIAL_KEY"

# Labels Prometheus gives every series of a target, and the bucket bound of a histogram's buckets.
TARGET_LABELS = frozenset({"job", "instance"})
# Series Prometheus makes itself for each target.
BUILTIN = {"up": frozenset[str]()}
# What issue 15 asks the rules to watch, each by at least one alert.
REQUIRED_ALERTS = {
    "AstraBoxRelayLagHigh",
    "AstraBoxOutboxBacklog",
    "AstraBoxOutboxGrowing",
    "AstraBoxSessionsStuckStarting",
    "AstraBoxSessionsStuckInterrupting",
    "AstraBoxLeakedSandboxes",
    "AstraBoxAbandonedSandboxes",
    "AstraBoxDatabaseDown",
    "AstraBoxAgentDisconnected",
}
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
}


# -- the registries' names ------------------------------------------------------------


def exposed(registry: CollectorRegistry) -> dict[str, frozenset[str]]:
    """Every series name `registry` exposes, with the labels seen on it (call off the event loop:
    the scrape-time collectors hop onto it)."""
    names: dict[str, set[str]] = {}
    for family in registry.collect():
        for suffix in _SUFFIXES.get(family.type, ("",)):
            names.setdefault(family.name + suffix, set())
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    for name, labels in names.items():
        if name.endswith("_bucket"):
            labels.add("le")
    return {name: frozenset(labels) for name, labels in names.items()}


@pytest_asyncio.fixture
async def metric_names(
    database_url: str, bootstrap_key_file: str, tmp_path: Path
) -> AsyncIterator[dict[str, frozenset[str]]]:
    """The control plane's and the agent's series, each labelled metric given one child (a labelled
    metric nothing has recorded yet exposes no sample to read its labels from)."""
    settings = ControlPlaneSettings(
        database_url=database_url,
        listen="127.0.0.1:0",
        metrics_listen="127.0.0.1:0",
        bootstrap_key_file=bootstrap_key_file,
    )
    async with serve(settings) as plane:
        async with AstraBoxClient.connect(plane.address) as client:
            with pytest.raises(AstraBoxError):
                await client.get_session("00000000-0000-4000-8000-000000000000")
        # The RPC series' children, by their label names (a wrong name raises), whether or not the
        # call above was counted: CI once ran it without a sample of either (cause not found).
        plane.metrics.rpc_requests.labels(service="astrabox.probe", method="Probe", code="OK")
        plane.metrics.rpc_duration.labels(service="astrabox.probe", method="Probe")
        plane.metrics.turn_ended("completed", 1.0)
        plane.metrics.webhook_attempts.labels(outcome="delivered")
        plane.metrics.schedule_runs.labels(outcome="started")
        plane_names = await asyncio.to_thread(exposed, plane.metrics.registry)

    db = await Database.open(tmp_path / "agent.db")
    try:
        state, outbox = AgentState(db), Outbox(db)
        relay = RelayClient(
            RelayConfig(target="127.0.0.1:1", agent_id="agent-1", enrollment_token="", instance_id="i-1"),
            state=state,
            outbox=outbox,
            commands=None,  # type: ignore[arg-type]  # never connects: nothing is sent
        )
        agent = AgentMetrics()
        agent.startup_phase_done("local", "ready", 100, warm=False)
        usage = UsageSampler(LocalSandboxDriver(tmp_path / "sandboxes"), list)
        sources = ScrapeSources(outbox, relay, state, running=lambda: 0, warm_ready=lambda: 0, usage=usage)
        agent.attach(sources, asyncio.get_running_loop())
        agent_names = await asyncio.to_thread(exposed, agent.registry)
    finally:
        await db.close()
    assert not set(plane_names) & set(agent_names)  # one name, one meaning
    yield {**plane_names, **agent_names, **BUILTIN}


# -- what the artifacts query ---------------------------------------------------------

_TOKEN = re.compile(
    r'(?P<string>"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\')'
    r"|(?P<matchers>\{[^}]*\})"
    r"|(?P<range>\[[^\]]*\])"
    r"|(?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r"|(?P<open>\()"
    r"|(?P<other>.)",
    re.S,
)
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
# Aggregations may put their grouping before their argument: `sum by (le) (...)`.
_AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk"}
_AGGREGATIONS |= {"quantile", "limitk", "limit_ratio"}
_GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"')


def selectors(expr: str) -> list[tuple[str, frozenset[str]]]:
    """Each series selector of a PromQL expression: its metric name and the labels it matches on.
    Grafana's variables ($__rate_interval, ${datasource}) are taken out first."""
    text = re.sub(r"\$\{[^}]*\}|\$\w+", "", expr)
    found: list[tuple[str, frozenset[str]]] = []
    tokens = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(text) if not m.group().isspace()]
    i = 0
    while i < len(tokens):
        kind, value = tokens[i]
        following = tokens[i + 1] if i + 1 < len(tokens) else (None, "")
        if kind == "ident" and value in _GROUPING:  # a list of labels, not of metrics
            depth, i = 0, i + 1
            while i < len(tokens):
                depth += tokens[i][0] == "open"
                depth -= tokens[i][1] == ")"
                i += 1
                if depth == 0:
                    break
            continue
        if kind == "ident" and following[0] != "open" and value.lower() not in _KEYWORDS | _AGGREGATIONS:
            labels = frozenset(_MATCHER.findall(following[1])) if following[0] == "matchers" else frozenset()
            found.append((value, labels))
        i += 1
    return found


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def panels() -> list[dict[str, Any]]:
    dashboard = json.loads(DASHBOARD.read_text())
    found = list(dashboard["panels"])
    for panel in dashboard["panels"]:
        found.extend(panel.get("panels", []))  # a collapsed row holds its panels
    return found


def queries() -> list[tuple[str, str]]:
    """Every PromQL expression of the rules and the dashboard, with where it is."""
    from_rules = [(f"alert {rule['alert']}", rule["expr"]) for rule in rules()]
    from_panels = [(f"panel {p['title']!r}", t["expr"]) for p in panels() for t in p.get("targets", [])]
    return from_rules + from_panels


def unknown(expr: str, names: dict[str, frozenset[str]]) -> list[str]:
    """What `expr` selects that the registries do not have: a missing name, or a label it lacks."""
    problems = []
    for name, labels in selectors(expr):
        if name not in names:
            problems.append(name)
        elif extra := labels - names[name] - TARGET_LABELS:
            problems.append(f"{name}{{{','.join(sorted(extra))}}}")
    return problems


# -- the tests ------------------------------------------------------------------------


async def test_every_metric_the_dashboard_and_the_alerts_use_exists_with_its_labels(
    metric_names: dict[str, frozenset[str]],
) -> None:
    every = queries()
    assert len(every) > 40
    missing = {where: problems for where, expr in every if (problems := unknown(expr, metric_names))}
    assert missing == {}
    used = {name for _, expr in every for name, _ in selectors(expr)}
    # The check can tell: a misspelt name and a label the metric does not have are both caught.
    assert unknown('rate(astrabox_turns_ended_totl{outcome="failed"}[5m])', metric_names) == [
        "astrabox_turns_ended_totl"
    ]
    assert unknown('astrabox_sessions{outcome="x"} > 0', metric_names) == ["astrabox_sessions{outcome}"]
    # Both halves are on the dashboard, each area the issue names with them.
    for name in (
        "astrabox_rpc_requests_total",
        "astrabox_rpc_duration_seconds_bucket",
        "astrabox_sessions",
        "astrabox_turns_ended_total",
        "astrabox_relay_ack_lag_seconds_bucket",
        "astrabox_agent_outbox_outputs",
        "astrabox_agent_startup_phase_seconds_bucket",
        "astrabox_agent_startup_phase_seconds_count",
        "astrabox_agent_sandboxes_cpu_cores",
        "astrabox_agent_sandbox_memory_bytes_max",
        "astrabox_database_up",
    ):
        assert name in used, name


def test_the_rules_are_valid_and_each_alert_tells_what_to_do() -> None:
    document = yaml.safe_load(RULES.read_text())
    assert set(document) == {"groups"}
    names = [rule["alert"] for rule in rules()]
    assert len(names) == len(set(names))
    assert set(names) >= REQUIRED_ALERTS
    for rule in rules():
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations", "keep_firing_for"}, rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        for annotation in ("summary", "description", "runbook"):
            assert len(rule["annotations"].get(annotation, "").split()) >= 3, (rule["alert"], annotation)


def test_promtool_accepts_the_rules_and_the_example_configuration() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed here (apt-get install prometheus); the structure is checked above")
    for command in (["check", "rules", str(RULES)], ["check", "config", str(PROMETHEUS_CONFIG)]):
        checked = subprocess.run([promtool, *command], capture_output=True, text=True, timeout=60)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    rules_found = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert f"SUCCESS: {len(rules())} rules found" in rules_found.stdout


def test_the_dashboard_is_well_formed_grafana_json() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and isinstance(dashboard["schemaVersion"], int)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [panel["id"] for panel in panels()]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for panel in panels():
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"] and panel.get("description"), panel["title"]
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
    # No two panels overlap on the grid.
    cells = [
        (x, y)
        for p in panels()
        for x in range(p["gridPos"]["x"], p["gridPos"]["x"] + p["gridPos"]["w"])
        for y in range(p["gridPos"]["y"], p["gridPos"]["y"] + p["gridPos"]["h"])
    ]
    assert len(cells) == len(set(cells))


def unit(name: str) -> dict[str, dict[str, list[str]]]:
    """A unit file's sections, each key with every value it is given (systemd allows repeats)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for line in (SYSTEMD / name).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key, []).append(value)
    return sections


def test_systemd_analyze_verifies_the_units_without_a_warning(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here (apt-get install systemd); the structure is checked below")
    astrabox = Path(sys.executable).parent / "astrabox"  # the installed command, where the unit names its own
    assert astrabox.exists()
    for name in UNITS:
        copy = tmp_path / name
        copy.write_text((SYSTEMD / name).read_text().replace(INSTALLED, str(astrabox)))
        verified = subprocess.run(
            [analyze, "verify", "--man=no", str(copy)], capture_output=True, text=True, timeout=60
        )
        # An unknown or misspelt directive is only a warning, and ignored: any line of output fails.
        assert (verified.returncode, verified.stdout + verified.stderr) == (0, ""), name


def variables(settings_type: type[Any]) -> set[str]:
    """Every environment variable `settings_type` reads: its options' and its secrets' (with `_FILE`),
    and ASTRABOX_CONFIG, which names the config file of both processes."""
    names: set[str] = {CONFIG_ENV}
    for field in dataclasses.fields(settings_type):
        for declared in field.metadata.values():
            if isinstance(declared, Option):
                names.update(declared.env)
            elif isinstance(declared, Secret):
                names.update((declared.option.env, declared.option.env + "_FILE"))
    return names


def test_the_units_run_the_server_hardened_with_secrets_only_in_files() -> None:
    read_by = {"controlplane": variables(ControlPlaneSettings), "agent": variables(AgentSettings)}
    for name, command in UNITS.items():
        service = unit(name)["Service"]
        assert service["ExecStart"] == [f"{INSTALLED} {command}"], name
        assert service["NoNewPrivileges"] == ["yes"], name
        assert service["Restart"] == ["on-failure"] and unit(name)["Install"]["WantedBy"] == ["multi-user.target"]
        # Secrets reach the process as files of systemd's credentials directory, never as values.
        loaded = {c.partition(":")[0] for c in service["LoadCredential"]}
        for assignment in service.get("Environment", []):
            variable, _, value = assignment.partition("=")
            if re.search(SECRET, variable):
                assert variable.endswith("_FILE") and value.removeprefix("%d/") in loaded, (name, assignment)
    plane = unit("astrabox-controlplane.service")["Service"]
    assert plane["User"] == ["astrabox"] and plane["ProtectSystem"] == ["strict"]
    assert plane["CapabilityBoundingSet"] == [""] and plane["PrivateTmp"] == ["yes"]
    assert "u astrabox " in (SYSTEMD / "astrabox.sysusers.conf").read_text()
    # The agent runs as root on purpose (docker, bubblewrap, cgroups): the unit says so and why.
    agent_text = (SYSTEMD / "astrabox-agent.service").read_text()
    assert unit("astrabox-agent.service")["Service"]["User"] == ["root"]
    for why in ("dockerd", "bubblewrap", "cgroup", "ProtectSystem"):
        assert why in agent_text, why
    # Every variable each process's unit and env file set is one that process reads, and no env file
    # holds a secret.
    examples = {"controlplane": SYSTEMD / "controlplane.env.example", "agent": SYSTEMD / "agent.env.example"}
    for name, command in UNITS.items():
        text = (SYSTEMD / name).read_text() + examples[command].read_text()
        given = set(re.findall(r"\b((?:ASTRABOX|ANTHROPIC)_[A-Z_]+)=", text))
        assert len(given) > 5
        assert given - read_by[command] == set(), name
    for example in examples.values():
        set_here = re.findall(r"^#?((?:ASTRABOX|ANTHROPIC)_[A-Z_]+)=", example.read_text(), re.M)
        assert not [v for v in set_here if re.search(SECRET, v)], example
