"""Isolation tiers on real PostgreSQL: a session whose environment asks for `isolation: gvisor` is placed
only on an agent whose Hello says its sandboxes run under gVisor, also when it is placed again; with
none connected it is refused with FAILED_PRECONDITION ISOLATION_UNAVAILABLE, saying what to start. An
environment without it goes anywhere; an unknown isolation is an invalid spec."""

from __future__ import annotations

import grpc
import pytest_asyncio

from astrabox.environments.v1 import environment_pb2 as epb
from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane.agents import AgentHello
from controlplane.environments.definitions import EnvironmentDefinitions
from controlplane.errors import InvalidArgument
from controlplane.forwarding import read_cluster_secret
from controlplane.page_tokens import PageTokens
from tests.controlplane.conftest import CLAUDE_CODE
from tests.controlplane.test_conversation import api as api
from tests.controlplane.test_conversation import ok, refused


async def connect(plane, agent_id: str, isolation: str) -> None:
    await plane.agents.register(
        AgentHello(
            agent_id=agent_id,
            instance_id="test",
            drivers=["docker"],
            engines=[CLAUDE_CODE],
            capacity=10,
            sessions={},
            isolation=isolation,
        )
    )


@pytest_asyncio.fixture
async def environments(plane) -> EnvironmentDefinitions:
    definitions = EnvironmentDefinitions(
        plane.pool, PageTokens.from_cluster_secret(await read_cluster_secret(plane.pool))
    )
    await definitions.create(plane.project_id, "e1", "sealed", epb.EnvironmentSpec(isolation="gvisor"))
    await definitions.create(plane.project_id, "e2", "plain", epb.EnvironmentSpec())
    return definitions


async def test_without_a_gvisor_agent_a_gvisor_environment_is_refused_saying_what_to_start(api, plane, environments):
    await connect(plane, "runc-agent", "container")

    code, reason, details = await refused(api, "CreateSession", request_id="s1", environment="sealed")

    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "ISOLATION_UNAVAILABLE")
    assert "isolation 'gvisor'" in details and "--sandbox-runtime runsc" in details
    # Nothing was made of it; a session without the requirement still runs there.
    assert await plane.pool.fetchval("SELECT count(*) FROM sessions") == 0
    plain = (await ok(api, "CreateSession", request_id="s2", environment="plain")).session
    assert await plane.pool.fetchval("SELECT agent_id FROM sessions WHERE session_id = $1", plain.session_id) == (
        "runc-agent"
    )


async def test_a_gvisor_environment_goes_only_to_gvisor_agents(api, plane, environments):
    await connect(plane, "runc-agent", "container")
    await connect(plane, "gvisor-agent", "gvisor")
    await connect(plane, "local-agent", "bubblewrap")

    placed = set()
    for i in range(4):
        session = (await ok(api, "CreateSession", request_id=f"s{i}", environment="sealed")).session
        placed.add(await plane.pool.fetchval("SELECT agent_id FROM sessions WHERE session_id = $1", session.session_id))

    assert placed == {"gvisor-agent"}


async def test_a_gvisor_session_placed_again_needs_a_gvisor_agent_too(api, plane, environments):
    await connect(plane, "gvisor-agent", "gvisor")
    sid = (await ok(api, "CreateSession", request_id="s1", environment="sealed")).session.session_id
    await plane.report(sid, agent_id="gvisor-agent", runtime_started=runner_pb2.RuntimeStarted(sandbox_id="sb"))
    # Its agent is lost; only a runc agent is left: the next message cannot place it there.
    await plane.pool.execute("UPDATE agents SET lease_expires_at = now() - interval '1 s'")
    await plane.sweeper.sweep()
    await connect(plane, "runc-agent", "container")

    turn = await ok(api, "SendMessage", session_id=sid, client_message_id="m1", text="hello")

    failed = [
        e.payload
        for e in await plane.journal.read(sid, 0, 100)
        if e.turn_id == turn.turn_id and e.payload.get("reason")
    ]
    assert failed and "isolation 'gvisor'" in failed[-1]["reason"]
    assert await plane.pool.fetchval("SELECT agent_id FROM sessions WHERE session_id = $1", sid) != "runc-agent"


async def test_an_unknown_isolation_is_an_invalid_environment(plane) -> None:
    definitions = EnvironmentDefinitions(
        plane.pool, PageTokens.from_cluster_secret(await read_cluster_secret(plane.pool))
    )
    try:
        await definitions.create(plane.project_id, "e1", "odd", epb.EnvironmentSpec(isolation="kata"))
    except InvalidArgument as error:
        assert error.reason == "INVALID_ENVIRONMENT_SPEC"
        assert "spec.isolation must be empty or gvisor" in error.message
    else:
        raise AssertionError("an unknown isolation was accepted")
