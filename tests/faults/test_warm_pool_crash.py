"""SIGKILL the data-plane agent while its warm pool holds containers with pre-started CLIs, and
restart it: the pool takes its containers back and starts one CLI in each (the killed agent's CLIs
are gone, not left running beside the new ones), no other container is left, and a new session
adopts a CLI and runs a turn. Docker driver; skipped only when no Docker daemon answers."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from astrabox.client import AstraBoxClient
from tests.e2e.test_docker_end_to_end import collect_turn
from tests.support.containers import Containers
from tests.support.stack import Stack, StartDockerStack

pytestmark = pytest.mark.e2e

POOL = 2


@pytest.fixture
def pooled_stack(docker_stacks: StartDockerStack) -> Stack:
    return docker_stacks(args=("--warm-pool", str(POOL)))


async def clis_in(container: str) -> int:
    """How many Claude Code CLI processes run in the container (the SDK starts it with stream-json)."""
    top = await asyncio.to_thread(
        subprocess.run, ["docker", "top", container, "-eo", "pid,args"], capture_output=True, text=True, timeout=30
    )
    return sum("--output-format stream-json" in line and "/bin/sh" not in line for line in top.stdout.splitlines())


async def pool_clis(containers: Containers) -> dict[str, int]:
    prefix = f"/astrabox-{containers.installation}-pool-"
    pool = [c["Names"][0].lstrip("/") for c in await containers.list() if c["Names"][0].startswith(prefix)]
    return {name: await clis_in(name) for name in pool}


async def until_pool_ready(containers: Containers) -> dict[str, int]:
    """Until POOL pool containers each run exactly one CLI (and nothing else runs one)."""
    async with asyncio.timeout(120):
        while True:
            clis = await pool_clis(containers)
            if len(clis) == POOL and all(count == 1 for count in clis.values()):
                return clis
            await asyncio.sleep(0.3)


async def test_a_killed_agents_warm_clis_are_replaced_not_doubled_and_a_session_adopts_one(
    pooled_stack: Stack, containers: Containers
) -> None:
    before = await until_pool_ready(containers)

    pooled_stack.agent.kill()
    pooled_stack.start_agent()

    after = await until_pool_ready(containers)
    assert set(after) == set(before)  # taken back, not made again
    await asyncio.sleep(2)  # a CLI left running by the killed agent would still be there
    assert await pool_clis(containers) == dict.fromkeys(before, 1)
    assert len(await containers.list()) == POOL

    async with AstraBoxClient.connect(pooled_stack.address) as client:
        session = await client.create_session(request_id="warm-after-crash")
        await client.wait_for_state(session.session_id, ["READY"], timeout=120)
        phases = [
            e.startup_phase.phase
            async for e in client.iter_events(session.session_id)
            if e.WhichOneof("payload") == "startup_phase"
        ]
        assert phases[-3:] == ["sandbox_claimed", "engine_adopted", "ready"]
        accepted = await client.send_message(session.session_id, "Please create hello.txt", client_message_id="m1")
        events = await collect_turn(client, session.session_id, accepted.turn_id)
        assert events[-1].WhichOneof("payload") == "turn_completed"
        assert await clis_in(f"astrabox-{containers.installation}-{session.session_id}") == 1
