"""EnvironmentService: a project's environments, versioned, bounded as environment.proto documents
(each refusal naming its field by its path) and invisible to other projects; through a real
control plane on a real PostgreSQL, with real API keys."""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from astrabox.client import AstraBoxClient
from astrabox.environments.v1 import environment_pb2 as epb
from astrabox.environments.v1 import environment_service_pb2 as pb
from astrabox.environments.v1 import environment_service_pb2_grpc as pb_grpc
from controlplane import migrations
from controlplane.server import RunningControlPlane, serve
from controlplane.settings import ControlPlaneSettings
from controlplane.status import error_info
from tests.controlplane.test_agent_definitions import Agents, Refusal

CREDENTIAL_KEY = base64.b64encode(b"K" * 32).decode()


def python_env(pip: tuple[str, ...] = ("requests==2.32.3",), token: str = "1") -> epb.EnvironmentSpec:
    return epb.EnvironmentSpec(
        packages=epb.Packages(apt=["git", "jq=1.6-2.1"], pip=list(pip), npm=["@types/node@20.1.0", "left-pad"]),
        setup_script="#!/bin/sh\necho ready\n",
        variables={"APP_MODE": "test", "TOKEN_HINT": token},
        limits=epb.ResourceLimits(cpu_millis=1500, memory_bytes=2 << 30, pids=256),
        network=epb.NetworkPolicy(
            mode=epb.NETWORK_MODE_LIMITED,
            allowed_hosts=["pypi.org", "*.github.com:443", "10.0.0.7:8080", "[::1]:9000"],
            allow_package_registries=True,
        ),
        credentials=[
            epb.CredentialBinding(
                credential="github-token", hosts=["api.github.com"], scheme=epb.CREDENTIAL_SCHEME_BASIC
            ),
            epb.CredentialBinding(
                credential="internal.key", hosts=["*.corp.example"], scheme=epb.CREDENTIAL_SCHEME_HEADER, header="X-Key"
            ),
        ],
    )


@dataclass
class Callers:
    developer: Agents
    viewer: Agents
    other: Agents  # a developer of another project


@pytest_asyncio.fixture
async def running(database_url: str, bootstrap_key_file: str) -> AsyncIterator[RunningControlPlane]:
    settings = ControlPlaneSettings(
        database_url=database_url,
        listen="127.0.0.1:0",
        bootstrap_key_file=bootstrap_key_file,
        lease_ttl=timedelta(minutes=10),
        credentials_ttl=timedelta(0),
        credential_key=CREDENTIAL_KEY,
    )
    async with serve(settings) as control_plane:
        yield control_plane


@pytest_asyncio.fixture
async def callers(running: RunningControlPlane) -> AsyncIterator[Callers]:
    async with AstraBoxClient.connect(running.address) as operator:
        other = await operator.admin.create_project("other")
        developer = await operator.admin.create_api_key("dev", role="developer")
        viewer = await operator.admin.create_api_key("view", role="viewer")
        theirs = await operator.admin.create_api_key("theirs", role="developer", project_id=other.project_id)
        for name in ("github-token", "internal.key"):  # what python_env() binds, in the developer's project
            await operator.credentials.put(name, "s3cr3t")
    async with grpc.aio.insecure_channel(running.address) as channel:
        stub = pb_grpc.EnvironmentServiceStub
        yield Callers(*(Agents(channel, key.secret, stub) for key in (developer, viewer, theirs)))


async def stored(running: RunningControlPlane) -> tuple[int, int]:
    return (
        await running.pool.fetchval("SELECT count(*) FROM environments"),
        await running.pool.fetchval("SELECT count(*) FROM environment_versions"),
    )


def sha256(message) -> str:
    return hashlib.sha256(message.SerializeToString(deterministic=True)).hexdigest()


async def test_an_environment_is_created_read_updated_listed_and_archived(running, callers) -> None:
    dev = callers.developer
    created = await dev.CreateEnvironment(pb.CreateEnvironmentRequest(request_id="c-1", name="py", spec=python_env()))
    env = created.environment
    assert (env.name, env.latest_version, env.archived) == ("py", 1, False) and uuid.UUID(env.environment_id)
    assert created.version.spec == python_env() and created.version.spec_digest == sha256(python_env())
    # With a setup script, the network policy it runs under is part of what is built.
    built = epb.EnvironmentSpec(
        packages=python_env().packages, setup_script=python_env().setup_script, network=python_env().network
    )
    assert created.version.build_digest == sha256(built)

    by_id = await dev.GetEnvironment(pb.GetEnvironmentRequest(environment=env.environment_id))
    assert by_id == await dev.GetEnvironment(pb.GetEnvironmentRequest(environment="py"))

    # A variable changes the spec, not what is built: a new version sharing the layer.
    varied = await dev.UpdateEnvironment(
        pb.UpdateEnvironmentRequest(environment="py", spec=python_env(token="2"), expected_version=1)
    )
    assert (varied.created, varied.version.version) == (True, 2)
    assert varied.version.build_digest == created.version.build_digest
    assert varied.version.spec_digest != created.version.spec_digest
    same = await dev.UpdateEnvironment(pb.UpdateEnvironmentRequest(environment="py", spec=python_env(token="2")))
    assert (same.created, same.environment.latest_version) == (False, 2)
    # A package changes the layer.
    repinned = await dev.UpdateEnvironment(
        pb.UpdateEnvironmentRequest(environment="py", spec=python_env(pip=("requests==2.31.0",)), expected_version=2)
    )
    assert repinned.version.version == 3 and repinned.version.build_digest != created.version.build_digest
    conflict = await dev.refused(
        "UpdateEnvironment",
        pb.UpdateEnvironmentRequest(environment="py", spec=python_env(token="x"), expected_version=1),
    )
    assert (conflict.code, conflict.reason) == (grpc.StatusCode.ABORTED, "ENVIRONMENT_VERSION_CONFLICT")
    assert conflict.metadata["latest_version"] == "3"
    assert await stored(running) == (1, 3)

    first = await dev.GetEnvironment(pb.GetEnvironmentRequest(environment="py", version=1))
    assert first.version.spec == python_env()
    missing = await dev.refused("GetEnvironment", pb.GetEnvironmentRequest(environment="py", version=4))
    assert (missing.code, missing.reason) == (grpc.StatusCode.NOT_FOUND, "ENVIRONMENT_VERSION_NOT_FOUND")

    versions, token = [], ""
    while True:
        page = await dev.ListEnvironmentVersions(
            pb.ListEnvironmentVersionsRequest(environment="py", page_size=2, page_token=token)
        )
        versions += [v.version for v in page.versions]
        if not (token := page.next_page_token):
            break
    assert versions == [3, 2, 1]

    for i, name in enumerate(("node", "base")):
        await dev.CreateEnvironment(pb.CreateEnvironmentRequest(request_id=f"c-{i + 2}", name=name))
    names, token = [], ""
    while True:
        listed = await dev.ListEnvironments(pb.ListEnvironmentsRequest(page_size=2, page_token=token))
        names += [e.name for e in listed.environments]
        if not (token := listed.next_page_token):
            break
    assert names == ["base", "node", "py"]

    archived = await dev.ArchiveEnvironment(pb.ArchiveEnvironmentRequest(environment="py"))
    assert archived.environment.archived
    again = await dev.ArchiveEnvironment(pb.ArchiveEnvironmentRequest(environment="py"))
    assert again.environment == archived.environment
    assert [e.name for e in (await dev.ListEnvironments(pb.ListEnvironmentsRequest())).environments] == ["base", "node"]
    shown = await dev.ListEnvironments(pb.ListEnvironmentsRequest(show_archived=True))
    assert [(e.name, e.archived) for e in shown.environments][-1] == ("py", True)
    frozen = await dev.refused("UpdateEnvironment", pb.UpdateEnvironmentRequest(environment="py", spec=python_env()))
    assert (frozen.code, frozen.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "ENVIRONMENT_ARCHIVED")
    taken = await dev.refused("CreateEnvironment", pb.CreateEnvironmentRequest(request_id="c-9", name="py"))
    assert (taken.code, taken.reason) == (grpc.StatusCode.ALREADY_EXISTS, "ENVIRONMENT_ALREADY_EXISTS")
    audited = await running.pool.fetch(
        "SELECT method, details FROM audit_records WHERE method = 'UpdateEnvironment' ORDER BY record_id LIMIT 1"
    )
    assert audited[0]["details"]["environment"] == "py"


async def test_a_retried_create_returns_its_environment_and_a_reused_request_id_is_refused(running, callers) -> None:
    dev = callers.developer
    first = await dev.CreateEnvironment(pb.CreateEnvironmentRequest(request_id="r", name="py", spec=python_env()))
    await dev.UpdateEnvironment(pb.UpdateEnvironmentRequest(environment="py", spec=python_env(token="2")))
    retry = await dev.CreateEnvironment(pb.CreateEnvironmentRequest(request_id="r", name="py", spec=python_env()))
    assert retry.environment.environment_id == first.environment.environment_id and retry.version.version == 1
    for name, spec in (("other", python_env()), ("py", python_env(token="3"))):
        reused = await dev.refused(
            "CreateEnvironment", pb.CreateEnvironmentRequest(request_id="r", name=name, spec=spec)
        )
        assert (reused.code, reused.reason) == (grpc.StatusCode.ALREADY_EXISTS, "REQUEST_ID_REUSED")
    assert await stored(running) == (1, 2)


def _with(change: Callable[[epb.EnvironmentSpec], object]) -> epb.EnvironmentSpec:
    spec = python_env()
    change(spec)
    return spec


def _set_network(spec: epb.EnvironmentSpec, **fields) -> None:
    spec.network.CopyFrom(epb.NetworkPolicy(**fields))


# (change, field path, what the message says)
BAD_SPECS = {
    "apt option": (lambda s: s.packages.apt.append("-oAPT::x=1"), "spec.packages.apt[2]", "Debian package"),
    "apt whitespace": (lambda s: s.packages.apt.append("git curl"), "spec.packages.apt[2]", "Debian package"),
    "pip URL": (
        lambda s: s.packages.pip.append("evil @ https://x.test/e.whl"),
        "spec.packages.pip[1]",
        "no URL",
    ),
    "pip option": (lambda s: s.packages.pip.append("--index-url=http://x"), "spec.packages.pip[1]", "requirement"),
    "pip editable path": (lambda s: s.packages.pip.append("-e."), "spec.packages.pip[1]", "requirement"),
    "npm git host": (lambda s: s.packages.npm.append("github:evil/pkg"), "spec.packages.npm[2]", "git host"),
    "npm file": (lambda s: s.packages.npm.append("x@file:../../etc"), "spec.packages.npm[2]", "package name"),
    "npm twice": (lambda s: s.packages.npm.append("left-pad"), "spec.packages.npm[2]", "appears twice"),
    "too many packages": (
        lambda s: s.packages.pip.extend(f"p{i}" for i in range(256)),
        "spec.packages.pip",
        "at most 256",
    ),
    "setup script": (lambda s: setattr(s, "setup_script", "x" * (64 * 1024 + 1)), "spec.setup_script", "65536"),
    "variable name": (lambda s: s.variables.update({"1BAD": "x"}), "spec.variables", "[A-Za-z_]"),
    "reserved PATH": (lambda s: s.variables.update({"PATH": "/evil"}), "spec.variables[PATH]", "AstraBox sets"),
    "reserved proxy": (
        lambda s: s.variables.update({"https_proxy": "http://x"}),
        "spec.variables[https_proxy]",
        "AstraBox sets",
    ),
    "reserved prefix": (
        lambda s: s.variables.update({"ANTHROPIC_BASE_URL": "http://x"}),
        "spec.variables[ANTHROPIC_BASE_URL]",
        "AstraBox sets",
    ),
    "preload": (lambda s: s.variables.update({"LD_PRELOAD": "/x.so"}), "spec.variables[LD_PRELOAD]", "AstraBox"),
    "variable value": (lambda s: s.variables.update({"BIG": "x" * 4097}), "spec.variables[BIG]", "4096"),
    "too many variables": (
        lambda s: s.variables.update({f"V{i}": "" for i in range(130)}),
        "spec.variables",
        "at most 128",
    ),
    "negative memory": (lambda s: setattr(s.limits, "memory_bytes", -1), "spec.limits.memory_bytes", "0"),
    "bad host": (lambda s: s.network.allowed_hosts.append("http://x.test/"), "spec.network.allowed_hosts[4]", "host"),
    "hosts without limited": (
        lambda s: _set_network(s, mode=epb.NETWORK_MODE_UNRESTRICTED, allowed_hosts=["x.test"]),
        "spec.network.allowed_hosts",
        "LIMITED only",
    ),
    "unknown mode": (lambda s: setattr(s.network, "mode", 9), "spec.network.mode", "NONE, LIMITED"),
    "credential name": (
        lambda s: setattr(s.credentials[0], "credential", "a b"),
        "spec.credentials[0].credential",
        "[A-Za-z0-9_.-]",
    ),
    "credential without hosts": (
        lambda s: s.credentials[0].ClearField("hosts"),
        "spec.credentials[0].hosts",
        "1 to 64",
    ),
    "credential bad host": (
        lambda s: s.credentials[1].hosts.append("*"),
        "spec.credentials[1].hosts[1]",
        "host pattern",
    ),
    "binding port negative": (lambda s: setattr(s.credentials[0], "port", -1), "spec.credentials[0].port", "65535"),
    "binding port too large": (
        lambda s: setattr(s.credentials[0], "port", 65536),
        "spec.credentials[0].port",
        "1 to 65535 (0: 443), got 65536",
    ),
    "binding host with a port": (
        lambda s: s.credentials[0].hosts.append("api.github.com:8443"),
        "spec.credentials[0].hosts[1]",
        "the port in spec.credentials[0].port",
    ),
    "binding host with NUL": (
        lambda s: s.credentials[0].hosts.append("api.github.com\x00.evil.test"),
        "spec.credentials[0].hosts[1]",
        "host pattern",
    ),
    "binding host huge": (
        lambda s: s.credentials[0].hosts.append("a" * 100_000),
        "spec.credentials[0].hosts[1]",
        "1 to 260 characters",
    ),
    "binding hosts too many": (
        lambda s: s.credentials[0].hosts.extend(f"h{i}.test" for i in range(10_000)),
        "spec.credentials[0].hosts",
        "1 to 64",
    ),
    "header injection": (
        lambda s: setattr(s.credentials[1], "header", "X-Key\r\nEvil: 1"),
        "spec.credentials[1].header",
        "header's name",
    ),
    "header for bearer": (
        lambda s: setattr(s.credentials[0], "header", "X-Key"),
        "spec.credentials[0].header",
        "HEADER",
    ),
}


@pytest.mark.parametrize("case", BAD_SPECS)
async def test_a_bad_definition_is_refused_naming_its_field_and_nothing_is_stored(running, callers, case) -> None:
    change, field, says = BAD_SPECS[case]
    spec = _with(change)
    refused = await callers.developer.refused(
        "CreateEnvironment", pb.CreateEnvironmentRequest(request_id="bad", name="py", spec=spec)
    )
    assert (refused.code, refused.reason, refused.field) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ENVIRONMENT_SPEC",
        field,
    ), refused
    assert says in refused.message and len(refused.message) < 600, refused.message
    assert await stored(running) == (0, 0)
    await callers.developer.CreateEnvironment(
        pb.CreateEnvironmentRequest(request_id="ok", name="py", spec=python_env())
    )
    again = await callers.developer.refused(
        "UpdateEnvironment", pb.UpdateEnvironmentRequest(environment="py", spec=spec)
    )
    assert (again.reason, again.field) == ("INVALID_ENVIRONMENT_SPEC", field)
    assert await stored(running) == (1, 1)


@pytest.mark.parametrize("name", ["", "Py", "1st", "py_env", "a" * 65, str(uuid.uuid4())])
async def test_a_bad_name_is_refused(running, callers, name) -> None:
    refused = await callers.developer.refused(
        "CreateEnvironment", pb.CreateEnvironmentRequest(request_id="n", name=name)
    )
    assert (refused.code, refused.field) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "name",
    ) and "[a-z0-9-]" in refused.message
    assert await stored(running) == (0, 0)


async def test_another_projects_environment_answers_like_one_that_does_not_exist(running, callers) -> None:
    made = await callers.developer.CreateEnvironment(pb.CreateEnvironmentRequest(request_id="r", name="py"))
    ours = made.environment.environment_id
    unknown = str(uuid.uuid4())
    calls = {
        "GetEnvironment": lambda ref: pb.GetEnvironmentRequest(environment=ref),
        "UpdateEnvironment": lambda ref: pb.UpdateEnvironmentRequest(environment=ref, spec=python_env()),
        "ListEnvironmentVersions": lambda ref: pb.ListEnvironmentVersionsRequest(environment=ref),
        "ArchiveEnvironment": lambda ref: pb.ArchiveEnvironmentRequest(environment=ref),
    }
    for rpc, request in calls.items():
        for foreign, absent in ((ours, unknown), ("py", "nobody")):
            as_foreign = await callers.other.refused(rpc, request(foreign))
            as_absent = await callers.other.refused(rpc, request(absent))
            assert (as_foreign.code, as_foreign.reason) == (grpc.StatusCode.NOT_FOUND, "ENVIRONMENT_NOT_FOUND"), rpc
            assert as_foreign.message.replace(foreign, "X") == as_absent.message.replace(absent, "X"), rpc
    assert (await callers.other.ListEnvironments(pb.ListEnvironmentsRequest(show_archived=True))).environments == []
    mine = await callers.developer.GetEnvironment(pb.GetEnvironmentRequest(environment="py"))
    assert (mine.environment.latest_version, mine.environment.archived) == (1, False)


async def test_a_viewer_reads_environments_but_cannot_change_them(running, callers) -> None:
    await callers.developer.CreateEnvironment(pb.CreateEnvironmentRequest(request_id="r", name="py", spec=python_env()))
    assert (
        await callers.viewer.GetEnvironment(pb.GetEnvironmentRequest(environment="py"))
    ).version.spec == python_env()
    for rpc, request in (
        ("CreateEnvironment", pb.CreateEnvironmentRequest(request_id="v", name="mine")),
        ("UpdateEnvironment", pb.UpdateEnvironmentRequest(environment="py")),
        ("ArchiveEnvironment", pb.ArchiveEnvironmentRequest(environment="py")),
    ):
        refused = await callers.viewer.refused(rpc, request)
        assert (refused.code, refused.reason) == (grpc.StatusCode.PERMISSION_DENIED, "ROLE_INSUFFICIENT"), rpc
    assert await stored(running) == (1, 1)


async def build_steps(callers: Callers, name: str) -> list[epb.BuildProgress]:
    steps = []
    async for answer in callers.developer._stub.BuildEnvironment(
        pb.BuildEnvironmentRequest(environment=name), metadata=callers.developer._metadata, timeout=30
    ):
        steps.append(answer.progress)
    return steps


async def test_building_ahead_needs_a_connected_agent_and_says_so(running, callers) -> None:
    spec = epb.EnvironmentSpec(packages=epb.Packages(pip=["six"]))
    await callers.developer.CreateEnvironment(pb.CreateEnvironmentRequest(request_id="r", name="py", spec=spec))

    async def build(name: str) -> Refusal:
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await build_steps(callers, name)
        info = error_info(failed.value)
        assert info is not None
        return Refusal(failed.value.code(), info.reason, "", failed.value.details(), dict(info.metadata))

    nowhere = await build("py")
    assert nowhere.reason == "NO_AGENT_AVAILABLE"
    assert "no data-plane agent is connected" in nowhere.message
    assert (await build("nobody")).reason == "ENVIRONMENT_NOT_FOUND"


async def test_an_environment_with_nothing_to_build_has_no_layer_and_builds_nothing(running, callers) -> None:
    # Variables, limits and a network policy, but no package and no setup script.
    plain = epb.EnvironmentSpec(
        variables={"SHIP": "Argo"},
        limits=epb.ResourceLimits(pids=64),
        network=epb.NetworkPolicy(mode=epb.NETWORK_MODE_LIMITED, allowed_hosts=["pypi.org"]),
    )
    created = await callers.developer.CreateEnvironment(
        pb.CreateEnvironmentRequest(request_id="p", name="plain", spec=plain)
    )
    assert created.version.build_digest == ""
    # No agent is connected, and none is needed: the stream ends at once, without a step.
    assert await build_steps(callers, "plain") == []
    assert await running.pool.fetchval("SELECT count(*) FROM agent_commands") == 0

    # A setup script alone is something to build, with the digest it always had.
    scripted = epb.EnvironmentSpec(setup_script="echo hi\n")
    updated = await callers.developer.UpdateEnvironment(pb.UpdateEnvironmentRequest(environment="plain", spec=scripted))
    # (the digest of an EnvironmentSpec holding the packages field, empty here, as it always did)
    assert updated.version.build_digest == sha256(
        epb.EnvironmentSpec(packages=epb.Packages(), setup_script="echo hi\n")
    )


async def test_versions_made_with_the_digest_of_an_empty_build_lose_it_and_others_keep_theirs(running) -> None:
    empty_digest = sha256(epb.EnvironmentSpec(packages=epb.Packages()))
    kept = sha256(epb.EnvironmentSpec(packages=epb.Packages(pip=["six"])))
    project = await running.pool.fetchval("SELECT project_id FROM projects LIMIT 1")
    environment_id = uuid.uuid4()
    async with running.pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO environments (environment_id, project_id, name, latest_version, request_id)"
            " VALUES ($1, $2, 'old', 2, 'old')",
            environment_id,
            project,
        )
        for version, digest in ((1, empty_digest), (2, kept)):
            await conn.execute(
                "INSERT INTO environment_versions (environment_id, version, spec, spec_digest, build_digest)"
                " VALUES ($1, $2, '', '', $3)",
                environment_id,
                version,
                digest,
            )
        await conn.execute((Path(migrations.__file__).parent / "0030_environments_without_layer.sql").read_text())
    rows = await running.pool.fetch(
        "SELECT version, build_digest FROM environment_versions WHERE environment_id = $1 ORDER BY version",
        environment_id,
    )
    assert [(r["version"], r["build_digest"]) for r in rows] == [(1, ""), (2, kept)]


async def test_the_service_is_healthy_and_listed_by_reflection(running) -> None:
    name = pb.DESCRIPTOR.services_by_name["EnvironmentService"].full_name
    async with grpc.aio.insecure_channel(running.address) as channel:
        health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=name))
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        answers = reflection.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        listed = {service.name async for answer in answers for service in answer.list_services_response.service}
    assert health.status == health_pb2.HealthCheckResponse.SERVING and name in listed


async def test_plain_http_is_refused_for_a_public_host_and_taken_for_non_public_ones(running, callers) -> None:
    public = python_env()
    public.credentials[1].hosts[:] = ["db.corp.internal", "10.0.0.5", "*.corp.example"]
    public.credentials[1].allow_plain_http = True
    refused = await callers.developer.refused(
        "CreateEnvironment", pb.CreateEnvironmentRequest(request_id="c", name="py", spec=public)
    )
    assert (refused.code, refused.reason, refused.field) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "PLAIN_HTTP_CREDENTIAL_TO_PUBLIC_HOST",
        "spec.credentials[1].allow_plain_http",
    )
    assert "unencrypted to '*.corp.example'" in refused.message and "over HTTPS" in refused.message
    assert await stored(running) == (0, 0)
    # A long public name is quoted only in part.
    public.credentials[1].hosts[:] = ["a" * 60 + "." + "b" * 60 + "." + "c" * 60 + ".example"]
    long = await callers.developer.refused(
        "CreateEnvironment", pb.CreateEnvironmentRequest(request_id="c", name="py", spec=public)
    )
    assert long.reason == "PLAIN_HTTP_CREDENTIAL_TO_PUBLIC_HOST" and "c" * 60 not in long.message

    local = python_env()
    local.credentials[1].hosts[:] = ["localhost", "db.corp.internal", "*.lab.home.arpa", "10.0.0.5", "[::1]"]
    local.credentials[1].port = 8080
    local.credentials[1].allow_plain_http = True
    created = await callers.developer.CreateEnvironment(
        pb.CreateEnvironmentRequest(request_id="ok", name="py", spec=local)
    )
    kept = created.version.spec.credentials[1]
    assert (list(kept.hosts), kept.port, kept.allow_plain_http) == (list(local.credentials[1].hosts), 8080, True)
    assert created.version.spec.credentials[0].port == 0  # not given: 443, HTTPS only


async def test_a_binding_of_a_credential_the_project_lacks_is_refused_naming_it(running, callers) -> None:
    spec = python_env()
    spec.credentials[1].credential = "typo.key"
    refused = await callers.developer.refused(
        "CreateEnvironment", pb.CreateEnvironmentRequest(request_id="c", name="py", spec=spec)
    )
    assert (refused.code, refused.reason) == (grpc.StatusCode.NOT_FOUND, "CREDENTIAL_NOT_FOUND")
    assert refused.field == "spec.credentials[1].credential" and "typo.key" in refused.message
    assert await stored(running) == (0, 0)
    # Another project's credentials are not theirs to bind.
    theirs = await callers.other.refused(
        "CreateEnvironment", pb.CreateEnvironmentRequest(request_id="c", name="py", spec=python_env())
    )
    assert (theirs.reason, theirs.field) == ("CREDENTIAL_NOT_FOUND", "spec.credentials[0].credential")
    await callers.developer.CreateEnvironment(pb.CreateEnvironmentRequest(request_id="ok", name="py"))
    again = await callers.developer.refused(
        "UpdateEnvironment", pb.UpdateEnvironmentRequest(environment="py", spec=spec)
    )
    assert again.reason == "CREDENTIAL_NOT_FOUND" and await stored(running) == (1, 1)
