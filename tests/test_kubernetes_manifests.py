"""deploy/kubernetes, checked with no cluster: every manifest parses and names itself; selectors
match the pods they select; the Service targets a port the pods declare; every ASTRABOX_* variable
is one the control plane or the agent reads (so a renamed setting cannot silently go unread); every
secret is the documented `astrabox-secrets` (with the keys its README's command makes) or
CloudNativePG's `<cluster>-app`; and `kubectl kustomize` builds the set (skipped without kubectl)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DIRECTORY = ROOT / "deploy" / "kubernetes"


def _documents() -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = []
    for path in sorted(DIRECTORY.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        documents += [document for document in yaml.safe_load_all(path.read_text()) if document]
    return documents


def _of_kind(kind: str) -> list[dict[str, Any]]:
    return [document for document in _documents() if document["kind"] == kind]


def _workloads() -> list[dict[str, Any]]:
    return _of_kind("Deployment") + _of_kind("DaemonSet")


def _containers() -> Iterator[dict[str, Any]]:
    for workload in _workloads():
        yield from workload["spec"]["template"]["spec"]["containers"]


def _settings_variables(command: str) -> set[str]:
    """The variables `astrabox COMMAND --help` names (each setting's, and its secrets' _FILE)."""
    astrabox = str(Path(sys.executable).with_name("astrabox"))
    result = subprocess.run([astrabox, command, "--help"], capture_output=True, text=True, timeout=60, check=True)
    named = set(re.findall(r"ASTRABOX_[A-Z0-9_]+", result.stdout))
    return named | {f"{name}_FILE" for name in named}


def test_every_manifest_parses_and_names_itself_and_the_kustomization_lists_them_all() -> None:
    documents = _documents()
    assert {document["kind"] for document in documents} >= {"Cluster", "Deployment", "Service", "DaemonSet"}
    for document in documents:
        assert document["apiVersion"] and document["metadata"]["name"], document
        if document["kind"] != "Namespace":
            assert document["metadata"]["namespace"] == "astrabox", document["metadata"]
    listed = yaml.safe_load((DIRECTORY / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in DIRECTORY.glob("*.yaml") if p.name != "kustomization.yaml")


def test_selectors_select_the_pods_and_the_service_targets_a_declared_port() -> None:
    for workload in _workloads():
        selector = workload["spec"]["selector"]["matchLabels"]
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), workload["metadata"]["name"]
    (service,) = _of_kind("Service")
    selected = [
        w
        for w in _workloads()
        if service["spec"]["selector"].items() <= w["spec"]["template"]["metadata"]["labels"].items()
    ]
    assert [w["metadata"]["name"] for w in selected] == ["astrabox-controlplane"]
    ports = {p["name"] for c in selected[0]["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports
    # The agents reach the control plane through that Service.
    agent_env = {
        e["name"]: e.get("value") for e in _of_kind("DaemonSet")[0]["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert agent_env["ASTRABOX_CONTROLPLANE"].startswith(f"{service['metadata']['name']}.astrabox.svc:")


def test_every_astrabox_variable_is_a_setting_of_the_process_it_is_given_to() -> None:
    known = {
        "controlplane": _settings_variables("controlplane"),
        "astrabox-agent-entrypoint": _settings_variables("agent"),
    }
    for container in _containers():
        role = container["command"][-1] if container["command"][0] == "astrabox" else container["command"][0]
        names = {e["name"] for e in container["env"] if e["name"].startswith("ASTRABOX_")}
        assert names, container["name"]
        assert names <= known[role], f"{container['name']}: not settings: {sorted(names - known[role])}"


def test_secrets_come_from_files_of_the_documented_secrets() -> None:
    clusters = {c["metadata"]["name"] for c in _of_kind("Cluster")}
    readme = (DIRECTORY / "README.md").read_text()
    made = set(re.findall(r"--from-file=([a-z-]+)=", readme))
    assert "create secret generic astrabox-secrets" in readme
    for workload in _workloads():
        for volume in workload["spec"]["template"]["spec"]["volumes"]:
            if "secret" not in volume:
                continue
            name, keys = volume["secret"]["secretName"], {i["key"] for i in volume["secret"]["items"]}
            if name == "astrabox-secrets":
                assert keys <= made, f"{name} has no keys {sorted(keys - made)}"
            else:
                assert name in {f"{cluster}-app" for cluster in clusters} and keys == {"uri"}, name
    for container in _containers():
        for variable in container["env"]:
            assert "secretKeyRef" not in variable.get("valueFrom", {}), "secrets come from files, not variables"
            if variable["name"].endswith(("_TOKEN", "_KEY", "_URL")):
                pytest.fail(f"{variable['name']} holds a secret as a value; use {variable['name']}_FILE")


def test_kubectl_kustomize_builds_the_set() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (apt-get install kubernetes-client, or kubectl from kubernetes.io)")
    result = subprocess.run([kubectl, "kustomize", str(DIRECTORY)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    kinds = [document["kind"] for document in yaml.safe_load_all(result.stdout) if document]
    assert sorted(kinds) == sorted(["Namespace", "Cluster", "Deployment", "Service", "DaemonSet"])
