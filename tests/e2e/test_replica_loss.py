"""A control-plane replica SIGKILLed under a real agent and a real client: two replicas on one
PostgreSQL, the agent and the client given a target naming both (A first). After A dies, the
agent is served by B, the session takes its next message there, and a watch opened on A goes on
from B with every event once."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from astrabox.client import AstraBoxClient
from tests.support.processes import Process, start_agent, start_controlplane

TURN_TIMEOUT_S = 180


@pytest.fixture
def two_replicas(database_url: str, tmp_path: Path) -> Iterator[tuple[dict[str, Process], str]]:
    processes: dict[str, Process] = {}
    addresses = {}
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            processes[name], addresses[name] = start_controlplane(database_url, tmp_path / name)
        target = f"ipv4:{addresses['a']},{addresses['b']}"
        processes["agent"] = start_agent(target, tmp_path / "agent-state", tmp_path)
        yield processes, target
    finally:
        for process in processes.values():
            process.stop()


async def turn(client: AstraBoxClient, session_id: str, text: str, message_id: str) -> str:
    sent = await client.send_message(session_id, text, client_message_id=message_id)
    async with asyncio.timeout(TURN_TIMEOUT_S):
        async for event in client.watch(session_id):
            if event.turn_id == sent.turn_id and event.WhichOneof("payload") == "turn_completed":
                return event.turn_completed.result
            assert event.WhichOneof("payload") not in ("turn_failed", "runtime_failed"), event
    raise AssertionError("the watch ended")


async def test_the_agent_and_a_watch_move_to_the_other_replica_when_one_is_killed(two_replicas) -> None:
    processes, target = two_replicas
    async with AstraBoxClient.connect(target) as client:
        session = await client.create_session()
        await client.wait_for_state(session.session_id, ["READY"], timeout=120)
        assert "one" in await turn(client, session.session_id, "run: echo one", "m1")
        seen: list[int] = []

        async def watch() -> None:
            async for event in client.watch(session.session_id):
                seen.append(event.seq)

        watching = asyncio.create_task(watch())
        try:
            processes["a"].kill()
            result = await turn(client, session.session_id, "run: echo two", "m2")
            assert "two" in result, "the session took its next message with only replica B alive"
            last = (await client.get_session(session.session_id)).last_seq
            async with asyncio.timeout(60):
                while not seen or seen[-1] < last:
                    await asyncio.sleep(0.1)
        finally:
            watching.cancel()
        assert seen == list(range(1, last + 1)), "the watch saw every event once, across the replica's death"
    assert processes["agent"].tail(1000).count("relay_connected") >= 2, "the agent dialled again after A died"
