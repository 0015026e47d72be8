"""A control plane's collaborators on a fresh real PostgreSQL database."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta

import asyncpg
import pytest_asyncio

from astrabox.client import AstraBoxClient
from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane.agent_definitions.definitions import AgentDefinitions
from controlplane.agents import AgentHello, Agents
from controlplane.conversation import Conversation
from controlplane.database import create_pool, migrate
from controlplane.deadlines import DeadlineSweeper
from controlplane.destructions import DestroyRetries
from controlplane.engines import EngineManifest
from controlplane.forwarding import read_cluster_secret
from controlplane.identity import store as identity_store
from controlplane.identity.callers import Caller, Role
from controlplane.journal import Journal
from controlplane.kernel import SessionKernel
from controlplane.live import LiveTail
from controlplane.outputs import OutputCommitter
from controlplane.page_tokens import PageTokens
from controlplane.server import RunningControlPlane, serve
from controlplane.turns import Turns
from controlplane.verdicts import CommandVerdicts
from dataplane_agent.engines.claude_code import MANIFEST as AGENT_CLAUDE_CODE
from dataplane_agent.relay.client import engine_manifest_proto

# What a real agent declares for Claude Code, as its Hello carries it.
CLAUDE_CODE = EngineManifest.from_proto(engine_manifest_proto(AGENT_CLAUDE_CODE))


@dataclass
class Plane:
    pool: asyncpg.Pool
    journal: Journal
    agents: Agents
    kernel: SessionKernel
    conversation: Conversation
    committer: OutputCommitter
    live: LiveTail
    turns: Turns
    sweeper: DeadlineSweeper
    verdicts: CommandVerdicts
    # The operator project `default`: whose sessions the tests make through the kernel.
    project_id: uuid.UUID
    next_output: dict[str, int] = field(default_factory=dict)

    @property
    def caller(self) -> Caller:
        """An operator admin of the project `default`: the caller of in-process servicer calls."""
        return Caller(self.project_id, "default", Role.ADMIN, "testkey00000000a", operator=True)

    async def connect_agent(self, agent_id: str = "agent-1", capacity: int = 10) -> None:
        await self.agents.register(
            AgentHello(
                agent_id=agent_id,
                instance_id="test",
                drivers=["local"],
                engines=[CLAUDE_CODE],
                capacity=capacity,
                sessions={},
            )
        )

    async def report(self, session_id: str, turn_id: str = "", agent_id: str = "agent-1", **body) -> int:
        """Commit one agent output for the session with the next output_seq, as the relay would."""
        seq = self.next_output.get(session_id, 0) + 1
        self.next_output[session_id] = seq
        output = runner_pb2.Output(session_id=session_id, output_seq=seq, turn_id=turn_id, **body)
        result = await self.committer.commit(agent_id, [output])
        assert not result.refused, result.refused
        return seq

    async def runtime_started(self, session_id: str) -> None:
        """What an agent reports once the session's sandbox and engine are up."""
        await self.report(session_id, runtime_started=runner_pb2.RuntimeStarted(sandbox_id="sb", driver="local"))


@pytest_asyncio.fixture
async def plane(database_url: str) -> AsyncIterator[Plane]:
    pool = await create_pool(database_url, min_size=1, max_size=4)
    await migrate(pool)
    live = LiveTail()
    journal = Journal(pool, live)
    agents = Agents(pool, timedelta(seconds=30))
    turns = Turns(agents)
    page_tokens = PageTokens.from_cluster_secret(await read_cluster_secret(pool))
    async with pool.acquire() as conn:
        project = await identity_store.operator_project(conn)
    try:
        yield Plane(
            pool,
            journal,
            agents,
            SessionKernel(pool, journal, agents, turns, live, page_tokens, AgentDefinitions(pool, agents, page_tokens)),
            Conversation(journal, agents, turns, timedelta(seconds=10)),
            OutputCommitter(journal, turns),
            live,
            turns,
            DeadlineSweeper(pool, journal, turns, agents, timedelta(seconds=180), destroy_retry=timedelta(0)),
            # A failed destruction may be retried at once (the tests of the backoff set their own).
            CommandVerdicts(journal, turns, DestroyRetries(first=timedelta(0))),
            project.project_id,
        )
    finally:
        await pool.close()


@pytest_asyncio.fixture
async def running(plane: Plane, database_url: str, bootstrap_key_file: str) -> AsyncIterator[RunningControlPlane]:
    """A control plane serving on the `plane`'s database, with the plane's agent on record."""
    from tests.controlplane.test_quotas import settings  # a test module: imported once conftest is

    await plane.connect_agent()
    async with serve(settings(database_url, bootstrap_key_file)) as control_plane:
        yield control_plane


@pytest_asyncio.fixture
async def client(running: RunningControlPlane) -> AsyncIterator[AstraBoxClient]:
    """A client of `running`, with its bootstrap admin key (from the environment)."""
    async with AstraBoxClient.connect(running.address) as connected:
        yield connected
