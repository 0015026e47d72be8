"""Agents send their release in Hello; the control plane refuses one it cannot run with (another major
version, older than its minimum, or none at all) with FAILED_PRECONDITION AGENT_VERSION_UNSUPPORTED and
a message saying what to upgrade, and enrols nothing for it. Real control plane, real gRPC, PostgreSQL."""

from __future__ import annotations

import secrets

import grpc
import pytest

from controlplane.server import RunningControlPlane
from serverkit import versions
from tests.controlplane.test_agent_admission import AgentStream, running

__all__ = ["running"]  # the fixture, used by name

MAJOR = int(versions.VERSION.split(".", 1)[0])


@pytest.mark.parametrize(
    ("agent_version", "says"),
    [
        ("", "the agent sent no version"),
        ("0.0.1", "is too old"),
        (f"{MAJOR + 1}.0.0", "is of another major version"),
        ("latest", "is not MAJOR.MINOR.PATCH"),
    ],
)
async def test_an_incompatible_agent_version_is_refused_with_the_reason(
    running: RunningControlPlane, agent_version: str, says: str
) -> None:
    agent = AgentStream(running.address, "agent-old", secrets.token_urlsafe(24), agent_version=agent_version)
    try:
        code, reason, details = await agent.first()  # type: ignore[misc]
    finally:
        await agent.close()
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "AGENT_VERSION_UNSUPPORTED")
    assert says in details
    assert f"this control plane ({versions.VERSION}) takes agents {versions.MINIMUM_AGENT_VERSION} or newer" in details
    assert await running.pool.fetchval("SELECT count(*) FROM agents WHERE agent_id = 'agent-old'") == 0


async def test_an_agent_of_this_release_is_welcomed(running: RunningControlPlane) -> None:
    agent = AgentStream(running.address, "agent-new", secrets.token_urlsafe(24))
    try:
        first = await agent.first()
    finally:
        await agent.close()
    assert not isinstance(first, tuple), first
    assert first.WhichOneof("message") == "welcome"


def test_the_rule() -> None:
    assert versions.compatibility("1.4.0", own="1.9.2", minimum="1.2.0") is None
    assert versions.compatibility("1.9.2+local", own="1.9.2", minimum="1.2.0") is None
    assert "too old" in (versions.compatibility("1.1.9", own="1.9.2", minimum="1.2.0") or "")
    assert "upgrade the control plane first" in (versions.compatibility("2.0.0", own="1.9.2", minimum="1.2.0") or "")
    assert "upgrade the agent" in (versions.compatibility("0.9.0", own="1.9.2", minimum="0.1.0") or "")
