"""AgentService: a project's agent definitions, versioned, checked against the engine's manifest
as the agents declared it, and invisible to other projects; through a real control plane on a
real PostgreSQL, with real API keys."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta

import grpc
import pytest
import pytest_asyncio
from google.protobuf import duration_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from astrabox.agents.v1 import agent_pb2 as apb
from astrabox.agents.v1 import agent_service_pb2 as pb
from astrabox.agents.v1 import agent_service_pb2_grpc as pb_grpc
from astrabox.client import AstraBoxClient
from controlplane.agent_definitions.definitions import AgentDefinitions
from controlplane.agents import AgentHello
from controlplane.errors import (
    AgentDefinitionArchived,
    AgentDefinitionNotFound,
    AgentVersionNotFound,
    InvalidArgument,
    NoAgentAvailable,
)
from controlplane.forwarding import read_cluster_secret
from controlplane.page_tokens import PageTokens
from controlplane.server import RunningControlPlane, serve
from controlplane.settings import ControlPlaneSettings
from controlplane.status import error_info
from tests.controlplane.conftest import CLAUDE_CODE

SKILL = apb.Skill(
    name="release-notes",
    files=[
        apb.SkillFile(path="SKILL.md", content=b"---\nname: release-notes\ndescription: Writes notes\n---\nBe brief."),
        apb.SkillFile(path="scripts/collect.sh", content=b"#!/bin/sh\ngit log --oneline\n"),
    ],
)


def reviewer(prompt: str = "You review code. Be terse.") -> apb.AgentSpec:
    return apb.AgentSpec(
        description="Reviews pull requests",
        model="claude-sonnet-4-5",
        permission_mode="default",
        system_prompt=apb.SystemPrompt(append=prompt),
        tools=apb.Tools(
            enabled=["Bash", "Read", "Edit"],
            rules=[
                apb.ToolRule(tool="Read", policy=apb.TOOL_POLICY_ALLOW),
                apb.ToolRule(tool="Bash", policy=apb.TOOL_POLICY_ASK),
                apb.ToolRule(tool="mcp__docs__*", policy=apb.TOOL_POLICY_ALLOW),
            ],
            default_policy=apb.TOOL_POLICY_DENY,
        ),
        mcp_servers=[
            apb.McpServer(
                name="docs",
                stdio=apb.StdioMcpServer(command="docs-mcp", args=["--root", "/workspace"], env={"LOG": "1", "A": "2"}),
            )
        ],
        skills=[SKILL],
        limits=apb.Limits(max_turns=20, max_cost_usd_per_session=5, turn_timeout=duration_pb2.Duration(seconds=600)),
        custom_tools=[
            apb.CustomTool(
                name="lookup_order",
                description="Looks an order up by its id",
                input_schema_json='{"type": "object", "properties": {"order_id": {"type": "string"}}}',
            )
        ],
    )


@dataclass(frozen=True)
class Refusal:
    code: grpc.StatusCode
    reason: str
    field: str
    message: str
    metadata: dict[str, str]


class Agents:
    """AgentService (or another service of `stub`'s, EnvironmentService) as one API key calls it."""

    def __init__(self, channel: grpc.aio.Channel, key: str, stub=pb_grpc.AgentServiceStub) -> None:
        self._stub = stub(channel)
        self._metadata = (("authorization", f"Bearer {key}"),)

    def __getattr__(self, rpc: str):
        method = getattr(self._stub, rpc)

        async def call(request):
            return await method(request, metadata=self._metadata, timeout=30)

        return call

    async def refused(self, rpc: str, request) -> Refusal:
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await getattr(self, rpc)(request)
        info = error_info(failed.value)
        assert info is not None, failed.value
        metadata = dict(info.metadata)
        return Refusal(failed.value.code(), info.reason, metadata.get("field", ""), failed.value.details(), metadata)


@dataclass
class Callers:
    developer: Agents
    viewer: Agents
    other: Agents  # a developer of another project


@pytest_asyncio.fixture
async def running(plane, database_url: str, bootstrap_key_file: str) -> AsyncIterator[RunningControlPlane]:
    """A control plane on the `plane`'s database, where an agent has declared Claude Code."""
    await plane.connect_agent()
    settings = ControlPlaneSettings(
        database_url=database_url,
        listen="127.0.0.1:0",
        bootstrap_key_file=bootstrap_key_file,
        lease_ttl=timedelta(minutes=10),
        credentials_ttl=timedelta(0),
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
    async with grpc.aio.insecure_channel(running.address) as channel:
        yield Callers(Agents(channel, developer.secret), Agents(channel, viewer.secret), Agents(channel, theirs.secret))


async def stored(running: RunningControlPlane) -> tuple[int, int]:
    return (
        await running.pool.fetchval("SELECT count(*) FROM agent_definitions"),
        await running.pool.fetchval("SELECT count(*) FROM agent_definition_versions"),
    )


def canonical_digest(spec: apb.AgentSpec) -> str:
    return hashlib.sha256(spec.SerializeToString(deterministic=True)).hexdigest()


async def test_an_agent_is_created_read_updated_listed_and_archived(running, callers) -> None:
    dev = callers.developer
    created = await dev.CreateAgent(pb.CreateAgentRequest(request_id="c-1", name="reviewer", spec=reviewer()))
    agent = created.agent
    assert (agent.name, agent.latest_version, agent.archived) == ("reviewer", 1, False)
    assert uuid.UUID(agent.agent_id) and agent.project_id
    assert created.version.version == 1 and created.version.spec == reviewer()
    assert created.version.spec_digest == canonical_digest(reviewer())

    by_name = await dev.GetAgent(pb.GetAgentRequest(agent="reviewer"))
    by_id = await dev.GetAgent(pb.GetAgentRequest(agent=agent.agent_id))
    assert by_name == by_id and by_name.version.spec == reviewer()

    # A change makes version 2; the same definition again makes nothing.
    changed = await dev.UpdateAgent(
        pb.UpdateAgentRequest(agent="reviewer", spec=reviewer("Be thorough."), expected_version=1)
    )
    assert (changed.created, changed.agent.latest_version, changed.version.version) == (True, 2, 2)
    again = await dev.UpdateAgent(pb.UpdateAgentRequest(agent=agent.agent_id, spec=reviewer("Be thorough.")))
    assert (again.created, again.agent.latest_version, again.version.version) == (False, 2, 2)
    # A stale expected_version with a new definition: refused, nothing stored.
    conflict = await dev.refused(
        "UpdateAgent", pb.UpdateAgentRequest(agent="reviewer", spec=reviewer("Be kind."), expected_version=1)
    )
    assert (conflict.code, conflict.reason) == (grpc.StatusCode.ABORTED, "AGENT_VERSION_CONFLICT")
    assert conflict.metadata["latest_version"] == "2" and "version 2, not 1" in conflict.message
    assert await stored(running) == (1, 2)

    newest = await dev.GetAgent(pb.GetAgentRequest(agent="reviewer"))
    assert newest.version.version == 2 and newest.version.spec.system_prompt.append == "Be thorough."
    first = await dev.GetAgent(pb.GetAgentRequest(agent="reviewer", version=1))
    assert first.version.spec == reviewer()
    missing = await dev.refused("GetAgent", pb.GetAgentRequest(agent="reviewer", version=3))
    assert (missing.code, missing.reason) == (grpc.StatusCode.NOT_FOUND, "AGENT_VERSION_NOT_FOUND")

    page = await dev.ListAgentVersions(pb.ListAgentVersionsRequest(agent="reviewer", page_size=1))
    rest = await dev.ListAgentVersions(
        pb.ListAgentVersionsRequest(agent="reviewer", page_size=1, page_token=page.next_page_token)
    )
    assert [v.version for v in (*page.versions, *rest.versions)] == [2, 1] and rest.next_page_token == ""

    await dev.CreateAgent(pb.CreateAgentRequest(request_id="c-2", name="author", spec=apb.AgentSpec()))
    await dev.CreateAgent(pb.CreateAgentRequest(request_id="c-3", name="triage", spec=apb.AgentSpec()))
    names, token = [], ""
    while True:
        listed = await dev.ListAgents(pb.ListAgentsRequest(page_size=2, page_token=token))
        names += [a.name for a in listed.agents]
        if not (token := listed.next_page_token):
            break
    assert names == ["author", "reviewer", "triage"]

    archived = await dev.ArchiveAgent(pb.ArchiveAgentRequest(agent="reviewer"))
    assert archived.agent.archived
    assert (await dev.ArchiveAgent(pb.ArchiveAgentRequest(agent="reviewer"))).agent == archived.agent  # idempotent
    assert [a.name for a in (await dev.ListAgents(pb.ListAgentsRequest())).agents] == ["author", "triage"]
    shown = await dev.ListAgents(pb.ListAgentsRequest(show_archived=True))
    assert [(a.name, a.archived) for a in shown.agents] == [("author", False), ("reviewer", True), ("triage", False)]
    assert (await dev.GetAgent(pb.GetAgentRequest(agent="reviewer"))).version.version == 2  # still readable
    frozen = await dev.refused("UpdateAgent", pb.UpdateAgentRequest(agent="reviewer", spec=reviewer("x")))
    assert (frozen.code, frozen.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "AGENT_ARCHIVED")
    taken = await dev.refused("CreateAgent", pb.CreateAgentRequest(request_id="c-4", name="reviewer"))
    assert (taken.code, taken.reason) == (grpc.StatusCode.ALREADY_EXISTS, "AGENT_ALREADY_EXISTS")
    assert await stored(running) == (3, 4)

    audited = await running.pool.fetch(
        "SELECT method, details, code FROM audit_records WHERE method LIKE '%Agent' ORDER BY record_id"
    )
    assert [(r["method"], r["code"]) for r in audited][:3] == [
        ("CreateAgent", "OK"),
        ("UpdateAgent", "OK"),
        ("UpdateAgent", "OK"),
    ]
    assert audited[0]["details"]["name"] == "reviewer" and audited[1]["details"]["agent"] == "reviewer"


async def test_an_http_mcp_server_is_kept_by_its_url_and_the_name_of_its_credential(running, callers) -> None:
    spec = reviewer()
    spec.mcp_servers.append(
        apb.McpServer(
            name="tickets",
            http=apb.HttpMcpServer(
                url="https://mcp.example:8443/mcp", credential="tickets.token-1", header="X-Api-Key"
            ),
            enabled_tools=["search"],
        )
    )
    created = await callers.developer.CreateAgent(pb.CreateAgentRequest(request_id="h", name="reviewer", spec=spec))
    read = await callers.developer.GetAgent(pb.GetAgentRequest(agent="reviewer"))
    assert created.version.spec == read.version.spec == spec
    assert read.version.spec.mcp_servers[1].http.credential == "tickets.token-1"


async def test_a_retried_create_returns_its_agent_and_a_reused_request_id_is_refused(running, callers) -> None:
    dev = callers.developer
    request = pb.CreateAgentRequest(request_id="same", name="reviewer", spec=reviewer())
    first, retried = await asyncio.gather(dev.CreateAgent(request), dev.CreateAgent(request))
    assert first == retried
    await dev.UpdateAgent(pb.UpdateAgentRequest(agent="reviewer", spec=reviewer("later")))
    late = await dev.CreateAgent(request)  # after a change too: the agent it made, with its first version
    assert late.agent.agent_id == first.agent.agent_id and late.version == first.version
    for reused in (
        pb.CreateAgentRequest(request_id="same", name="reviewer", spec=reviewer("other")),
        pb.CreateAgentRequest(request_id="same", name="another", spec=reviewer()),
    ):
        refused = await dev.refused("CreateAgent", reused)
        assert (refused.code, refused.reason) == (grpc.StatusCode.ALREADY_EXISTS, "REQUEST_ID_REUSED")
    assert await stored(running) == (1, 2)


async def test_concurrent_creates_of_one_name_make_one_agent(running, callers) -> None:
    requests = [pb.CreateAgentRequest(request_id=f"race-{i}", name="racer", spec=reviewer()) for i in range(6)]
    outcomes = await asyncio.gather(*(callers.developer.CreateAgent(r) for r in requests), return_exceptions=True)
    made = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)]
    assert len(made) == 1 and len(refused) == 5
    assert {(e.code(), error_info(e).reason) for e in refused} == {
        (grpc.StatusCode.ALREADY_EXISTS, "AGENT_ALREADY_EXISTS")
    }
    assert await stored(running) == (1, 1)


async def test_of_concurrent_updates_from_one_version_exactly_one_wins(running, callers) -> None:
    dev = callers.developer
    await dev.CreateAgent(pb.CreateAgentRequest(request_id="r", name="reviewer", spec=reviewer()))
    edits = [pb.UpdateAgentRequest(agent="reviewer", spec=reviewer(f"edit {i}"), expected_version=1) for i in range(5)]
    outcomes = await asyncio.gather(*(dev.UpdateAgent(e) for e in edits), return_exceptions=True)
    won = [o for o in outcomes if isinstance(o, pb.UpdateAgentResponse)]
    lost = [o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)]
    assert len(won) == 1 and won[0].created and won[0].version.version == 2
    assert [error_info(e).reason for e in lost] == ["AGENT_VERSION_CONFLICT"] * 4
    newest = await dev.GetAgent(pb.GetAgentRequest(agent="reviewer"))
    assert newest.version.spec == won[0].version.spec and await stored(running) == (1, 2)


async def test_an_undecodable_request_is_refused_as_malformed(running, callers) -> None:
    async with grpc.aio.insecure_channel(running.address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await channel.unary_unary("/astrabox.agents.v1.AgentService/CreateAgent")(
                b"\xff\xff\xff", metadata=callers.developer._metadata
            )
    assert (refused.value.code(), error_info(refused.value).reason) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "MALFORMED_REQUEST",
    )


async def test_another_projects_agent_answers_like_one_that_does_not_exist(running, callers) -> None:
    made = await callers.developer.CreateAgent(pb.CreateAgentRequest(request_id="r", name="reviewer", spec=reviewer()))
    ours = made.agent.agent_id
    unknown = str(uuid.uuid4())
    calls = {
        "GetAgent": lambda ref: pb.GetAgentRequest(agent=ref),
        "UpdateAgent": lambda ref: pb.UpdateAgentRequest(agent=ref, spec=reviewer("mine now")),
        "ListAgentVersions": lambda ref: pb.ListAgentVersionsRequest(agent=ref),
        "ArchiveAgent": lambda ref: pb.ArchiveAgentRequest(agent=ref),
    }
    for rpc, request in calls.items():
        for foreign, absent in ((ours, unknown), ("reviewer", "nobody")):
            as_foreign = await callers.other.refused(rpc, request(foreign))
            as_absent = await callers.other.refused(rpc, request(absent))
            assert (as_foreign.code, as_foreign.reason) == (grpc.StatusCode.NOT_FOUND, "AGENT_NOT_FOUND"), rpc
            assert as_foreign.message.replace(foreign, "X") == as_absent.message.replace(absent, "X"), rpc
    assert (await callers.other.ListAgents(pb.ListAgentsRequest(show_archived=True))).agents == []
    # Names are per project: theirs may be called the same, and stays apart.
    theirs = await callers.other.CreateAgent(pb.CreateAgentRequest(request_id="r", name="reviewer"))
    assert theirs.agent.agent_id != ours
    mine = await callers.developer.GetAgent(pb.GetAgentRequest(agent="reviewer"))
    assert (mine.agent.agent_id, mine.agent.latest_version, mine.agent.archived) == (ours, 1, False)


async def test_a_viewer_reads_agents_but_cannot_change_them(running, callers) -> None:
    await callers.developer.CreateAgent(pb.CreateAgentRequest(request_id="r", name="reviewer", spec=reviewer()))
    assert (await callers.viewer.GetAgent(pb.GetAgentRequest(agent="reviewer"))).version.spec == reviewer()
    assert [a.name for a in (await callers.viewer.ListAgents(pb.ListAgentsRequest())).agents] == ["reviewer"]
    for rpc, request in (
        ("CreateAgent", pb.CreateAgentRequest(request_id="v", name="mine", spec=reviewer())),
        ("UpdateAgent", pb.UpdateAgentRequest(agent="reviewer", spec=reviewer("changed"))),
        ("ArchiveAgent", pb.ArchiveAgentRequest(agent="reviewer")),
    ):
        refused = await callers.viewer.refused(rpc, request)
        assert (refused.code, refused.reason) == (grpc.StatusCode.PERMISSION_DENIED, "ROLE_INSUFFICIENT"), rpc
    assert await stored(running) == (1, 1)
    assert not (await callers.developer.GetAgent(pb.GetAgentRequest(agent="reviewer"))).agent.archived


async def test_the_service_is_healthy_and_listed_by_reflection(running) -> None:
    name = pb.DESCRIPTOR.services_by_name["AgentService"].full_name
    async with grpc.aio.insecure_channel(running.address) as channel:
        health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=name))
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        answers = reflection.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        listed = {service.name async for answer in answers for service in answer.list_services_response.service}
    assert name in listed


# ---- resolving the version a new session starts from (CreateSession's part) ----------------------


@pytest_asyncio.fixture
async def definitions(plane) -> AgentDefinitions:
    return AgentDefinitions(
        plane.pool, plane.agents, PageTokens.from_cluster_secret(await read_cluster_secret(plane.pool))
    )


async def test_a_session_resolves_the_newest_version_or_the_one_it_names(plane, definitions) -> None:
    await plane.connect_agent()
    agent, _ = await definitions.create(plane.project_id, "r", "reviewer", reviewer())
    await definitions.update(plane.project_id, "reviewer", reviewer("second"))

    newest = await definitions.resolve(plane.project_id, "reviewer")
    assert (newest.agent_id, newest.name, newest.version) == (agent.agent_id, "reviewer", 2)
    assert newest.spec.system_prompt.append == "second" and newest.spec_digest == canonical_digest(newest.spec)
    pinned = await definitions.resolve(plane.project_id, agent.agent_id, 1)
    assert pinned.version == 1 and pinned.spec == reviewer()

    with pytest.raises(AgentVersionNotFound):
        await definitions.resolve(plane.project_id, "reviewer", 3)
    with pytest.raises(AgentDefinitionNotFound):
        await definitions.resolve(uuid.uuid4(), "reviewer")  # another project
    await definitions.archive(plane.project_id, "reviewer")
    with pytest.raises(AgentDefinitionArchived) as archived:
        await definitions.resolve(plane.project_id, "reviewer")
    assert "starts no new session" in archived.value.message


async def test_without_an_agent_that_declared_an_engine_a_definition_cannot_be_checked(plane, definitions) -> None:
    with pytest.raises(NoAgentAvailable) as refused:
        await definitions.create(plane.project_id, "r", "reviewer", reviewer())
    assert "start one with `astrabox agent`" in refused.value.message
    assert await plane.pool.fetchval("SELECT count(*) FROM agent_definitions") == 0


async def test_tools_are_checked_against_what_the_agents_declared(plane, definitions) -> None:
    narrow = dataclasses.replace(CLAUDE_CODE, tools=("Read",))
    await plane.agents.register(AgentHello("agent-narrow", "i", ["local"], [narrow], 1, {}))
    with pytest.raises(InvalidArgument) as refused:
        await definitions.create(plane.project_id, "r", "reviewer", reviewer())
    assert refused.value.metadata["field"] == "spec.tools.enabled[0]"
    assert "its built-in tools: Read " in refused.value.message
    read_only = apb.AgentSpec(tools=apb.Tools(enabled=["Read"]))
    assert (await definitions.create(plane.project_id, "r2", "reader", read_only))[1].version == 1
