"""A control plane's collaborators on a fresh real PostgreSQL database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta

import asyncpg
import pytest_asyncio

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane.agents import AgentHello, Agents
from controlplane.database import create_pool, migrate
from controlplane.journal import Journal
from controlplane.kernel import SessionKernel
from controlplane.live import LiveTail
from controlplane.outputs import OutputCommitter


@dataclass
class Plane:
    pool: asyncpg.Pool
    journal: Journal
    agents: Agents
    kernel: SessionKernel
    committer: OutputCommitter
    live: LiveTail

    async def connect_agent(self, agent_id: str = "agent-1", capacity: int = 10) -> None:
        await self.agents.register(
            AgentHello(agent_id=agent_id, instance_id="test", drivers=["local"], engines=["claude_code"],
                       capacity=capacity, sessions={})
        )

    async def runtime_started(self, session_id: str, output_seq: int = 1) -> None:
        """What an agent reports once the session's sandbox and engine are up."""
        await self.committer.commit(
            "agent-1",
            [runner_pb2.Output(session_id=session_id, output_seq=output_seq,
                               runtime_started=runner_pb2.RuntimeStarted(sandbox_id="sb", driver="local"))],
        )


@pytest_asyncio.fixture
async def plane(database_url: str) -> AsyncIterator[Plane]:
    pool = await create_pool(database_url, min_size=1, max_size=4)
    await migrate(pool)
    live = LiveTail()
    journal = Journal(pool, live)
    agents = Agents(pool, timedelta(seconds=30))
    try:
        yield Plane(pool, journal, agents, SessionKernel(pool, journal, agents, live), OutputCommitter(journal), live)
    finally:
        await pool.close()
