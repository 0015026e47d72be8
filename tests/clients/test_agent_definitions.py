"""Agent definitions from the client's side, against a real control plane on PostgreSQL:
`client.agents` (AgentService)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest_asyncio

from astrabox.agents.v1 import agent_pb2
from astrabox.client import AstraBoxClient
from controlplane.agents import AgentHello, Agents
from controlplane.engines import EngineManifest
from controlplane.server import RunningControlPlane, serve
from controlplane.settings import ControlPlaneSettings
from dataplane_agent.engines.claude_code import MANIFEST as CLAUDE_CODE
from dataplane_agent.relay.client import engine_manifest_proto


@pytest_asyncio.fixture
async def running(database_url: str, bootstrap_key_file: str) -> AsyncIterator[RunningControlPlane]:
    settings = ControlPlaneSettings(
        database_url=database_url, listen="127.0.0.1:0", bootstrap_key_file=bootstrap_key_file
    )
    async with serve(settings) as control_plane:
        # A host has declared Claude Code's manifest, which definitions are validated against.
        manifest = EngineManifest.from_proto(engine_manifest_proto(CLAUDE_CODE))
        hello = AgentHello(
            agent_id="host-1", instance_id="t", drivers=["local"], engines=[manifest], capacity=1, sessions={}
        )
        await Agents(control_plane.pool, timedelta(seconds=30)).register(hello)
        yield control_plane


@pytest_asyncio.fixture
async def client(running: RunningControlPlane) -> AsyncIterator[AstraBoxClient]:
    async with AstraBoxClient.connect(running.address) as connected:
        yield connected


async def test_concurrent_applies_of_a_new_agent_make_it_once(client: AstraBoxClient) -> None:
    spec = agent_pb2.AgentSpec(description="raced", model="claude-sonnet-4-5")

    results = await asyncio.gather(*(client.agents.apply("raced", spec) for _ in range(4)))

    assert {(r.agent.name, r.version.version) for r in results} == {("raced", 1)}
    assert [r.new_agent for r in results].count(True) == 1
    assert [v.version async for v in client.agents.versions("raced")] == [1]


async def test_the_sdk_pages_through_agents_and_versions(client: AstraBoxClient) -> None:
    for name in ("gamma", "alpha", "beta"):
        await client.agents.create(name, agent_pb2.AgentSpec(description=name))
    for n in range(2, 5):
        applied = await client.agents.update("alpha", agent_pb2.AgentSpec(description=f"alpha {n}"))
        assert applied.created and applied.version.version == n
    unchanged = await client.agents.update("alpha", agent_pb2.AgentSpec(description="alpha 4"))
    assert not unchanged.created and unchanged.version.version == 4

    assert [a.name async for a in client.agents.list(page_size=1)] == ["alpha", "beta", "gamma"]
    versions = [v async for v in client.agents.versions("alpha", page_size=1)]
    assert [(v.version, v.spec.description) for v in versions] == [
        (4, "alpha 4"),
        (3, "alpha 3"),
        (2, "alpha 2"),
        (1, "alpha"),
    ]
    agent, version = await client.agents.get("alpha", version=2)
    assert (agent.latest_version, version.version, version.spec.description) == (4, 2, "alpha 2")
    assert len(version.spec_digest) == 64 and version.spec_digest != versions[0].spec_digest
