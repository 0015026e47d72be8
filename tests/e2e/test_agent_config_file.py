"""An agent's config file, named by ASTRABOX_CONFIG, takes effect in the running agent process:
its capacity is what the control plane records (its agent id is not: the flag beats it), and its warm pool (off by default) keeps a
sandbox ready that a new session claims. Real processes, the local driver, the offline model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from astrabox.client import AstraBoxClient
from tests.e2e.test_conversation_end_to_end import TIMEOUT, all_events, new_session
from tests.e2e.test_warm_engines import phases, pool_ready
from tests.support.stack import StartStack

pytestmark = pytest.mark.e2e

AGENT = "e2e-agent"  # tests.support.processes.start_agent's --agent-id
CAPACITY = "SELECT capacity FROM agents WHERE agent_id = $1"


async def test_the_agents_config_file_from_astrabox_config_is_what_the_agent_runs_with(
    stacks: StartStack, tmp_path: Path
) -> None:
    config = tmp_path / "agent.toml"
    # The agent's --agent-id flag (e2e-agent) beats the file's.
    config.write_text('agent_id = "from-the-file"\ncapacity = 3\nwarm_pool = 1\nwarm_engines = false\n')
    stack = stacks(env={"ASTRABOX_CONFIG": str(config)})

    conn = await asyncpg.connect(stack.database_url)
    try:
        async with asyncio.timeout(TIMEOUT):
            while (capacity := await conn.fetchval(CAPACITY, AGENT)) is None:
                await asyncio.sleep(0.1)
        assert capacity == 3
        assert await conn.fetchval(CAPACITY, "from-the-file") is None
    finally:
        await conn.close()

    await pool_ready(stack, 1)
    async with AstraBoxClient.connect(stack.address) as client:
        session = await new_session(client)
        assert "sandbox_claimed" in phases(await all_events(client, session.session_id))
