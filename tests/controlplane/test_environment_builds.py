"""BuildEnvironment's control-plane half on a real PostgreSQL: a BuildLayer command queued durably per
agent, each agent's progress (as its stream publishes it) streamed to the caller until READY or FAILED,
and an agent's acknowledgement ending its build when its progress never arrived. The agents' side is
played here from the real command queue; the agents' own building is tested in
tests/dataplane_agent/test_environment_sessions.py."""

from __future__ import annotations

import asyncio

import pytest

from astrabox.environments.v1 import environment_pb2 as epb
from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane.environments.builds import NO_SESSION, BuildProgressHub, EnvironmentBuilds
from controlplane.errors import AgentNotConnected, NoAgentAvailable
from tests.controlplane.conftest import Plane

DIGEST = "ab" * 32
SPEC = epb.EnvironmentSpec(packages=epb.Packages(pip=["six"]))


async def _play_agent(
    plane: Plane, hub: BuildProgressHub, agent_id: str, *, fail: str = "", silent: bool = False
) -> None:
    """Take the agent's BuildLayer from the queue, report its steps as its stream would (unless
    `silent`: its progress is lost) and acknowledge it."""
    async with asyncio.timeout(10):
        while not (queued := await plane.agents.unacked(agent_id, 0)):
            await asyncio.sleep(0.05)
    [command] = queued
    body = runner_pb2.Command.FromString(command.body)
    assert command.session_id == NO_SESSION and body.build_layer.build_digest == DIGEST
    assert body.build_layer.spec == SPEC
    if not silent:
        # The agent's own claim of who it is is not trusted: the stream's agent id is reported.
        hub.publish(
            agent_id,
            epb.BuildProgress(
                agent_id="someone-else", build_digest=DIGEST, state=epb.BUILD_STATE_BUILDING, phase="pip"
            ),
        )
        hub.publish(agent_id, epb.BuildProgress(build_digest="cd" * 32, state=epb.BUILD_STATE_READY))  # another build
        done = epb.BUILD_STATE_FAILED if fail else epb.BUILD_STATE_READY
        hub.publish(agent_id, epb.BuildProgress(build_digest=DIGEST, state=done, phase="ready", error=fail))
    await plane.verdicts.record(agent_id, command.command_seq, fail)


async def test_each_agents_build_is_followed_to_its_end(plane: Plane) -> None:
    for agent_id in ("agent-1", "agent-2", "agent-3"):
        await plane.connect_agent(agent_id)
    hub = BuildProgressHub()
    builds = EnvironmentBuilds(plane.pool, plane.journal, plane.agents, hub)
    targets = await builds.targets("")
    assert targets == ["agent-1", "agent-2", "agent-3"]
    players = [
        asyncio.create_task(_play_agent(plane, hub, "agent-1")),
        asyncio.create_task(_play_agent(plane, hub, "agent-2", fail="pip: No matching distribution found for six")),
        asyncio.create_task(_play_agent(plane, hub, "agent-3", silent=True)),
    ]
    async with asyncio.timeout(20):
        seen = [progress async for progress in builds.build(SPEC, DIGEST, targets)]
    await asyncio.gather(*players)
    by_agent = {agent: [(p.state, p.phase) for p in seen if p.agent_id == agent] for agent in targets}
    assert by_agent["agent-1"] == [(epb.BUILD_STATE_BUILDING, "pip"), (epb.BUILD_STATE_READY, "ready")]
    assert by_agent["agent-2"] == [(epb.BUILD_STATE_BUILDING, "pip"), (epb.BUILD_STATE_FAILED, "ready")]
    # Its progress never came: its acknowledgement ends its build.
    assert by_agent["agent-3"] == [(epb.BUILD_STATE_READY, "ready")]
    [failed] = [p for p in seen if p.state == epb.BUILD_STATE_FAILED]
    assert failed.error == "pip: No matching distribution found for six"
    assert all(p.build_digest == DIGEST for p in seen)


async def test_a_silent_agents_failure_comes_from_its_acknowledgement(plane: Plane) -> None:
    await plane.connect_agent("agent-1")
    hub = BuildProgressHub()
    builds = EnvironmentBuilds(plane.pool, plane.journal, plane.agents, hub)
    player = asyncio.create_task(
        _play_agent(plane, hub, "agent-1", fail="apt: Unable to locate package zz", silent=True)
    )
    async with asyncio.timeout(20):
        [only] = [progress async for progress in builds.build(SPEC, DIGEST, await builds.targets("agent-1"))]
    await player
    assert (only.agent_id, only.state, only.error) == (
        "agent-1",
        epb.BUILD_STATE_FAILED,
        "apt: Unable to locate package zz",
    )


async def test_no_live_agent_or_an_unconnected_one_is_refused(plane: Plane) -> None:
    builds = EnvironmentBuilds(plane.pool, plane.journal, plane.agents, BuildProgressHub())
    with pytest.raises(NoAgentAvailable, match="no data-plane agent is connected"):
        await builds.targets("")
    await plane.connect_agent("agent-1")
    with pytest.raises(AgentNotConnected, match="agent agent-9 is not connected") as refused:
        await builds.targets("agent-9")
    assert refused.value.reason == "AGENT_NOT_CONNECTED"
