"""Capacity with a real agent (`--capacity 8`), the local driver and the real CLI: archived sessions
give their slot back, so after archiving ten a user still runs eight at once; the ninth live one is
refused as RESOURCE_EXHAUSTED CAPACITY_EXHAUSTED (one readable line from `astrabox run`), an archive
makes room again, and with the agent gone the answer is NO_AGENT_AVAILABLE."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import grpc
import pytest

from astrabox.client import AstraBoxClient, AstraBoxError
from tests.e2e.test_session_end_to_end import collect_turn
from tests.support.stack import Stack, StartStack

pytestmark = pytest.mark.e2e

CAPACITY = 8
READY_TIMEOUT = 180


@pytest.fixture
def small_stack(stacks: StartStack) -> Stack:
    return stacks(args=("--capacity", str(CAPACITY)))


async def run_turn(client: AstraBoxClient, session_id: str, text: str) -> str:
    """Send `text`, wait for its turn's end: its payload kind."""
    accepted = await client.send_message(session_id, text)
    events = await collect_turn(client, session_id, accepted.turn_id)
    return str(events[-1].WhichOneof("payload"))


async def ready_session(client: AstraBoxClient, request_id: str) -> str:
    session = await client.create_session(request_id=request_id)
    await client.wait_for_state(session.session_id, ["READY"], timeout=READY_TIMEOUT)
    return session.session_id


async def astrabox(*args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("astrabox")),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, err.decode()


async def test_archived_sessions_free_their_slots_and_a_full_agent_says_so(small_stack: Stack) -> None:
    async with AstraBoxClient.connect(small_stack.address) as client:
        # Ten sessions archived: three after a turn, three once ready, four while still creating.
        for i in range(3):
            sid = await ready_session(client, f"turned-{i}")
            assert await run_turn(client, sid, f"run: echo archived {i}") == "turn_completed"
            await client.archive_session(sid)
        for i in range(3):
            await client.archive_session(await ready_session(client, f"ready-{i}"))
        for i in range(4):
            await client.archive_session((await client.create_session(request_id=f"creating-{i}")).session_id)

        # Eight live at once, each running a turn (started one by one: engines start slowly on a busy host).
        live = [await ready_session(client, f"live-{i}") for i in range(CAPACITY)]
        ends = await asyncio.gather(*(run_turn(client, sid, f"run: echo live {i}") for i, sid in enumerate(live)))
        assert ends == ["turn_completed"] * CAPACITY

        with pytest.raises(AstraBoxError) as full:
            await client.create_session(request_id="ninth")
        assert (full.value.code, full.value.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "CAPACITY_EXHAUSTED")
        assert full.value.metadata == {"agents": "1", "capacity": "8", "live": "8"}
        assert "is full (1 agent, 8 of 8 live runtimes)" in full.value.message

        code, err = await astrabox("run", "--target", small_stack.address, "run: echo hi")
        assert code != 0
        assert err.splitlines() == [f"astrabox: RESOURCE_EXHAUSTED CAPACITY_EXHAUSTED: {full.value.message}"]

        await client.archive_session(live[0])
        ninth = await ready_session(client, "ninth")
        assert await run_turn(client, ninth, "run: echo ninth") == "turn_completed"

        small_stack.agent.stop()
        # Until its lease lapses the agent still counts (as full); then nothing runs the engine.
        async with asyncio.timeout(60):
            while True:
                with pytest.raises(AstraBoxError) as refused:
                    await client.create_session(request_id="no-agent")
                if refused.value.reason != "CAPACITY_EXHAUSTED":
                    break
                await asyncio.sleep(1)
        assert (refused.value.code, refused.value.reason) == (grpc.StatusCode.UNAVAILABLE, "NO_AGENT_AVAILABLE")
        assert "start one with `astrabox agent`" in refused.value.message
