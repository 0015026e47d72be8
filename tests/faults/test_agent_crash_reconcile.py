"""SIGKILL the data-plane agent with two sessions that ran turns, delete one session meanwhile, and
restart the agent: the live session's sandbox is adopted (its next message runs in the same
workspace), the deleted one's is destroyed, and no sandbox is left without a live session. Once
with the local driver (sandbox directories), once with the docker driver (containers)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from astrabox.client import AstraBoxClient
from dataplane_agent.sandboxes.base import SESSION_LABEL
from tests.support.stack import Stack, StartDockerStack

pytestmark = pytest.mark.e2e

# The session ids whose sandboxes exist.
Listing = Callable[[], Awaitable[list[str]]]


async def run_turn(client, session_id: str, text: str, after_seq: int = 0) -> str:
    """Send `text`, wait for its turn to complete; return the turn's result text."""
    accepted = await client.send_message(session_id, text)
    async with asyncio.timeout(180):
        async for event in client.watch(session_id, after_seq=after_seq):
            kind = event.WhichOneof("payload")
            if event.turn_id == accepted.turn_id and kind in ("turn_completed", "turn_failed"):
                assert kind == "turn_completed", event
                return event.turn_completed.result
    raise AssertionError("the watch ended")


async def crash_delete_restart(client: AstraBoxClient, stack: Stack, sandboxes: Listing, driver: str) -> None:
    keep = (await client.create_session(request_id="reconcile-keep")).session_id
    drop = (await client.create_session(request_id="reconcile-drop")).session_id
    for session_id in (keep, drop):
        await client.wait_for_state(session_id, ["READY"], timeout=120)
        marker = await run_turn(client, session_id, f"run: echo {session_id[:8]} > marker.txt && cat marker.txt")
        assert session_id[:8] in marker
    assert sorted(await sandboxes()) == sorted([keep, drop])

    stack.agent.kill()
    await client.delete_session(drop)
    stack.start_agent()

    # The deleted session's sandbox is destroyed, the live one's kept: nothing else is left.
    async with asyncio.timeout(60):
        while drop in await sandboxes():
            await asyncio.sleep(0.1)
    assert await sandboxes() == [keep]

    # The live session's journal says its sandbox was adopted.
    async with asyncio.timeout(60):
        async for event in client.watch(keep):
            if event.WhichOneof("payload") == "sandbox_reconciled":
                adopted = event.sandbox_reconciled
                break
    assert (adopted.action, adopted.driver) == ("adopted", driver)

    # Its next message runs where the first one left its file.
    result = await run_turn(client, keep, "run: cat marker.txt", after_seq=event.seq)
    assert keep[:8] in result
    assert await sandboxes() == [keep]


async def test_local_sandboxes_after_an_agent_crash(client, stack):
    root = stack.agent_state / "sandboxes"

    async def sandboxes() -> list[str]:
        return sorted(p.name.removeprefix("local-") for p in root.iterdir())

    await crash_delete_restart(client, stack, sandboxes, "local")


@pytest.fixture
def docker_stack(docker_stacks: StartDockerStack) -> Stack:
    return docker_stacks()


async def test_docker_containers_after_an_agent_crash(docker_stack, containers):
    async def sandboxes() -> list[str]:
        return sorted(c["Labels"].get(SESSION_LABEL, "?") for c in await containers.list())

    async with AstraBoxClient.connect(docker_stack.address) as client:
        await crash_delete_restart(client, docker_stack, sandboxes, "docker")
