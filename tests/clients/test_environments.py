"""Environments from the client's side: environment files (YAML, strict, line-numbered errors), and
against a real control plane on PostgreSQL the `astrabox environments` commands run as the user
runs them, `astrabox session create --environment`, and `client.environments`."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
import pytest_asyncio

from astrabox import environment_files
from astrabox.cli import build_parser
from astrabox.client import AstraBoxClient
from astrabox.environments.v1 import environment_pb2 as epb
from astrabox.errors import EnvironmentFileError
from controlplane.agents import AgentHello, Agents
from controlplane.engines import EngineManifest
from controlplane.server import RunningControlPlane, serve
from controlplane.settings import ControlPlaneSettings
from dataplane_agent.engines.claude_code import MANIFEST as CLAUDE_CODE
from dataplane_agent.relay.client import engine_manifest_proto
from tests.clients.test_agent_definitions import astrabox

CREDENTIAL_KEY = base64.b64encode(b"K" * 32).decode()


@pytest_asyncio.fixture
async def running(database_url: str, bootstrap_key_file: str) -> AsyncIterator[RunningControlPlane]:
    """A control plane with a credentials key, where a host has declared Claude Code, and the
    project holds the credentials PYTHON_CI binds."""
    settings = ControlPlaneSettings(
        database_url=database_url,
        listen="127.0.0.1:0",
        bootstrap_key_file=bootstrap_key_file,
        credential_key=CREDENTIAL_KEY,
    )
    async with serve(settings) as control_plane:
        manifest = EngineManifest.from_proto(engine_manifest_proto(CLAUDE_CODE))
        hello = AgentHello(
            agent_id="host-1", instance_id="t", drivers=["local"], engines=[manifest], capacity=4, sessions={}
        )
        await Agents(control_plane.pool, timedelta(seconds=30)).register(hello)
        async with AstraBoxClient.connect(control_plane.address) as operator:
            for name in ("github-token", "api-key"):
                await operator.credentials.put(name, "s3cr3t")
        yield control_plane


@pytest_asyncio.fixture
async def client(running: RunningControlPlane) -> AsyncIterator[AstraBoxClient]:
    async with AstraBoxClient.connect(running.address) as connected:
        yield connected


PYTHON_CI = """\
name: python-ci
packages:
  apt: [git, "jq=1.6-2.1"]
  pip: ["requests==2.32.3", pytest]
  npm: ["@types/node@20"]
setup: |
  git config --global init.defaultBranch main
variables: {APP_MODE: test, RETRIES: 3}
limits: {cpus: "1.5", memory: 2GiB, pids: 256, disk: 10GiB}
network:
  mode: limited
  allowed_hosts: [api.github.com, "*.corp.example:443"]
  package_registries: true
credentials:
  - {credential: github-token, hosts: [github.com], scheme: basic}
  - {credential: api-key, hosts: [api.corp.example], port: 8443, scheme: header, header: X-Api-Key}
  - {credential: github-token, hosts: [db.corp.internal], port: 8080, allow_plain_http: true}
"""


def test_a_complete_file_reads_into_the_spec_it_says() -> None:
    [environment] = environment_files.parse(PYTHON_CI, source="env.yaml")
    assert (environment.name, environment.source) == ("python-ci", "env.yaml:1")
    assert environment.spec == epb.EnvironmentSpec(
        packages=epb.Packages(apt=["git", "jq=1.6-2.1"], pip=["requests==2.32.3", "pytest"], npm=["@types/node@20"]),
        setup_script="git config --global init.defaultBranch main\n",
        variables={"APP_MODE": "test", "RETRIES": "3"},
        limits=epb.ResourceLimits(cpu_millis=1500, memory_bytes=2 << 30, pids=256, disk_bytes=10 << 30),
        network=epb.NetworkPolicy(
            mode=epb.NETWORK_MODE_LIMITED,
            allowed_hosts=["api.github.com", "*.corp.example:443"],
            allow_package_registries=True,
        ),
        credentials=[
            epb.CredentialBinding(credential="github-token", hosts=["github.com"], scheme=epb.CREDENTIAL_SCHEME_BASIC),
            epb.CredentialBinding(
                credential="api-key",
                hosts=["api.corp.example"],
                port=8443,
                scheme=epb.CREDENTIAL_SCHEME_HEADER,
                header="X-Api-Key",
            ),
            epb.CredentialBinding(
                credential="github-token", hosts=["db.corp.internal"], port=8080, allow_plain_http=True
            ),
        ],
    )
    [again] = environment_files.parse(environment_files.dump(environment.name, environment.spec))
    assert again.spec == environment.spec


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: x\npackage: {pip: [a]}\n", "f:2: environment: unknown key 'package'; did you mean 'packages'?"),
        ("name: x\npackages: {pip: a}\n", "f:2: packages.pip: must be a list"),
        ("name: x\nnetwork: {mode: open}\n", "f:2: network.mode: unknown value 'open'; valid: none, limited"),
        ("name: x\nisolation: kata\n", "f:2: isolation: unknown value 'kata'; valid: gvisor"),
        ("name: x\nlimits:\n  memory: lots\n", "f:3: limits.memory: 'lots' is not a size"),
        ("name: x\nlimits: {cpus: -1}\n", "f:2: limits.cpus: -1 is not a number of cores"),
        ("name: x\ncredentials: [{hosts: [a]}]\n", "f:2: credentials[0]: 'credential' is required"),
        ("name: x\ncredentials: [{credential: c, hosts: [a], port: 0}]\n", "f:2: credentials[0].port: 0 is not a port"),
        ("name: x\ncredentials: [{credential: c, hosts: [a], port: 65536}]\n", "f:2: credentials[0].port: 65536"),
        ("name: x\ncredentials: [{credential: c, hosts: [a], port: -1}]\n", "f:2: credentials[0].port: -1 is not"),
        ("name: x\ncredentials: [{credential: c, hosts: [a], port: '443'}]\n", "f:2: credentials[0].port: must be"),
        (
            "name: x\ncredentials: [{credential: c, hosts: [a], allow_plain_http: yes please}]\n",
            "f:2: credentials[0].allow_plain_http: must be true or false",
        ),
        ("name: x\nnetwork: {package_registries: yes please}\n", "f:2: network.package_registries: must be true"),
        ("name: X\n", "f:1: name: 'X' is not 1-64 characters"),
        ("name: x\n---\nname: x\n", "f:3: name: 'x' is defined twice (first at f:1)"),
        ("name: x\nsetup: [a\n", "f:3: not valid YAML"),
    ],
)
def test_each_kind_of_mistake_names_its_line_key_and_what_is_valid(text: str, expected: str) -> None:
    with pytest.raises(EnvironmentFileError) as refused:
        environment_files.parse(text, source="f")
    assert str(refused.value).startswith(expected), str(refused.value)


def test_run_and_session_create_take_an_environment_by_name_and_optionally_a_version() -> None:
    parser = build_parser({})
    assert parser.parse_args(["run", "hi", "--environment", "python-ci@2"]).environment == ("python-ci", 2)
    assert parser.parse_args(["run", "hi"]).environment == ("", 0)
    create = parser.parse_args(["session", "create", "--environment", "python-ci"])
    assert (create.action, create.environment, create.agent) == ("create", ("python-ci", 0), ("", 0))


async def test_apply_twice_makes_one_version_show_round_trips_and_a_session_pins_it(running, tmp_path: Path) -> None:
    # The agent here is registered without a stream, so it builds nothing: layers are built by
    # tests/e2e/test_environment_build_cli.py with a real agent.
    (tmp_path / "env.yaml").write_text(PYTHON_CI)
    first = await astrabox(running, "environments", "apply", "env.yaml", "--no-build", cwd=tmp_path)
    assert (first.code, first.out, first.err) == (0, "created python-ci v1\n", "")
    again = await astrabox(running, "environments", "apply", "env.yaml", cwd=tmp_path)
    assert (again.code, again.out) == (0, "python-ci v1 (unchanged)\n"), again.err
    (tmp_path / "env.yaml").write_text(PYTHON_CI.replace("pytest", "pytest==8.3.0"))
    changed = await astrabox(running, "environments", "apply", "env.yaml", "--no-build", cwd=tmp_path)
    assert (changed.code, changed.out) == (0, "python-ci v2 (new version)\n"), changed.err
    versions = await astrabox(running, "environments", "versions", "python-ci")
    assert [line.split()[0] for line in versions.out.splitlines()] == ["v2", "v1"]

    shown = await astrabox(running, "environments", "show", "python-ci@1")
    assert shown.code == 0 and shown.out.startswith("# environment python-ci v1 of 2; id ")
    (tmp_path / "shown.yaml").write_text(shown.out)
    assert environment_files.load(tmp_path / "shown.yaml")[0].spec == environment_files.parse(PYTHON_CI)[0].spec
    as_json = json.loads((await astrabox(running, "environments", "show", "python-ci", "-o", "json")).out)
    assert as_json["version"] == 2 and as_json["spec"]["packages"]["pip"] == ["requests==2.32.3", "pytest==8.3.0"]

    created = await astrabox(running, "session", "create", "--environment", "python-ci@1")
    assert created.code == 0 and created.out.rstrip().endswith("(environment python-ci v1)"), created
    missing = await astrabox(running, "session", "create", "--environment", "nobody")
    assert missing.code == 1 and "NOT_FOUND" in missing.err and "environment nobody does not exist" in missing.err

    archived = await astrabox(running, "environments", "archive", "python-ci")
    assert archived.out == "archived python-ci (at v2; its sessions go on)\n"
    listed = await astrabox(running, "environments", "list", "--all")
    assert listed.out.split()[0] == "python-ci" and listed.out.rstrip().endswith("archived")
    assert (await astrabox(running, "environments", "list")).out == ""


async def test_an_environment_asking_for_gvisor_round_trips_and_without_such_a_host_its_session_is_refused(
    running, tmp_path: Path
) -> None:
    (tmp_path / "sealed.yaml").write_text("name: sealed\nisolation: gvisor\n")
    [sealed] = environment_files.load(tmp_path / "sealed.yaml")
    assert sealed.spec == epb.EnvironmentSpec(isolation="gvisor")
    assert environment_files.parse(environment_files.dump("sealed", sealed.spec))[0].spec == sealed.spec
    assert (await astrabox(running, "environments", "apply", "sealed.yaml", cwd=tmp_path)).code == 0

    # The only host here runs bubblewrap sandboxes: the session is refused, saying what to start.
    created = await astrabox(running, "session", "create", "--environment", "sealed")

    assert created.code == 1 and "FAILED_PRECONDITION ISOLATION_UNAVAILABLE" in created.err
    assert "--sandbox-runtime runsc" in created.err


async def test_a_bad_file_is_refused_with_its_line_and_nothing_is_applied(running, tmp_path: Path) -> None:
    (tmp_path / "good.yaml").write_text("name: good\n")
    (tmp_path / "bad.yaml").write_text("name: bad\nnetwork:\n  mode: open\n")
    refused = await astrabox(running, "environments", "apply", "good.yaml", "bad.yaml", cwd=tmp_path)
    assert refused.code == 1 and "bad.yaml:3: network.mode: unknown value 'open'" in refused.err
    assert (await astrabox(running, "environments", "list")).out == ""
    # What only the server can tell, it refuses naming the spec's field.
    (tmp_path / "reserved.yaml").write_text("name: reserved\nvariables: {HTTPS_PROXY: http://evil}\n")
    server = await astrabox(running, "environments", "apply", "reserved.yaml", cwd=tmp_path)
    assert server.code == 1 and "INVALID_ARGUMENT" in server.err and "spec.variables[HTTPS_PROXY]" in server.err


async def test_the_client_applies_gets_and_lists_versions(client) -> None:
    spec = environment_files.parse(PYTHON_CI)[0].spec
    applied = await client.environments.apply("python-ci", spec)
    assert (applied.new_environment, applied.version.version) == (True, 1)
    assert (await client.environments.apply("python-ci", spec)).created is False
    spec.variables["APP_MODE"] = "prod"
    changed = await client.environments.apply("python-ci", spec)
    assert changed.version.version == 2 and changed.version.build_digest == applied.version.build_digest
    environment, version = await client.environments.get("python-ci", version=1)
    assert (environment.latest_version, version.spec.variables["APP_MODE"]) == (2, "test")
    assert [v.version async for v in client.environments.versions("python-ci", page_size=1)] == [2, 1]
    assert [e.name async for e in client.environments.list()] == ["python-ci"]
    session = await client.create_session(environment="python-ci", environment_version=1)
    assert (session.environment.name, session.environment.version) == ("python-ci", 1)
