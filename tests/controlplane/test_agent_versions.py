"""Agents send their release in Hello; the control plane refuses one it cannot run with (another major
version, older than its minimum, or none at all) with FAILED_PRECONDITION AGENT_VERSION_UNSUPPORTED and
a message saying what to upgrade, and enrols nothing for it. Real control plane, real gRPC, PostgreSQL."""

from __future__ import annotations

import asyncio
import secrets
import types
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from structlog.testing import capture_logs

from astrabox.backoff import Backoff
from controlplane.server import RunningControlPlane, serve
from controlplane.settings import ControlPlaneSettings
from dataplane_agent.engines.claude_code import MANIFEST as CLAUDE_CODE
from dataplane_agent.relay import client as relay_client
from dataplane_agent.relay.client import RelayClient, RelayConfig
from dataplane_agent.relay.commands import CommandApplier
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.state import AgentState
from dataplane_agent.state_database import Database
from serverkit import versions
from tests.controlplane.test_agent_admission import TOKEN, AgentStream


@pytest_asyncio.fixture
async def running(database_url: str, bootstrap_key_file: str) -> AsyncIterator[RunningControlPlane]:
    """A control plane that admits agents with its token at once: the version is checked next."""
    settings = ControlPlaneSettings(
        database_url=database_url,
        listen="127.0.0.1:0",
        bootstrap_key_file=bootstrap_key_file,
        enrollment_token=TOKEN,
        agent_admission="automatic",
        heartbeat_interval=timedelta(milliseconds=200),
    )
    async with serve(settings) as control_plane:
        yield control_plane


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


async def test_an_old_agent_logs_why_it_is_refused_and_keeps_trying(
    running: RunningControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real agent's relay, of a release this control plane no longer takes."""
    monkeypatch.setattr(relay_client, "versions", types.SimpleNamespace(VERSION="0.0.1"))
    db = await Database.open(tmp_path / "agent.db")
    state = AgentState(db)
    config = RelayConfig(
        target=running.address,
        agent_id="agent-old",
        enrollment_token=TOKEN,
        instance_id="i-1",
        credential=secrets.token_urlsafe(32),
        drivers=("local",),
        engines=(CLAUDE_CODE,),
        capacity=1,
        backoff=Backoff(initial=0.05, maximum=0.2),
    )
    # No command reaches a refused agent: it needs no runtimes.
    relay = RelayClient(config, state=state, outbox=Outbox(db), commands=CommandApplier(db, state, None))  # type: ignore[arg-type]
    with capture_logs() as logs:
        task = asyncio.create_task(relay.run())
        try:
            async with asyncio.timeout(30):
                while len([e for e in logs if e["event"] == "relay_stream_failed"]) < 2:
                    await asyncio.sleep(0.05)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await db.close()
    failed = next(e for e in logs if e["event"] == "relay_stream_failed")
    assert failed["error"].startswith("FAILED_PRECONDITION: agent version 0.0.1 is too old: this control plane")
    assert "upgrade the agent" in failed["error"]
    assert relay.streams_opened == 0


def test_the_rule() -> None:
    assert versions.compatibility("1.4.0", own="1.9.2", minimum="1.2.0") is None
    assert versions.compatibility("1.9.2+local", own="1.9.2", minimum="1.2.0") is None
    assert "too old" in (versions.compatibility("1.1.9", own="1.9.2", minimum="1.2.0") or "")
    assert "upgrade the control plane first" in (versions.compatibility("2.0.0", own="1.9.2", minimum="1.2.0") or "")
    assert "upgrade the agent" in (versions.compatibility("0.9.0", own="1.9.2", minimum="0.1.0") or "")
    # What the agent sent is echoed bounded, however long.
    assert len(versions.compatibility("2.0.0+" + "x" * 10_000, own="1.9.2", minimum="1.2.0") or "") < 300
