"""SIGKILL the data-plane agent with two sessions that ran turns, delete one session meanwhile, and
restart the agent: the live session's sandbox is adopted (its next message runs in the same
workspace), the deleted one's is destroyed, and no sandbox is left without a live session."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.e2e


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


async def test_agent_crash_adopts_the_live_sandbox_and_destroys_the_deleted_ones(client, stack):
    sandboxes = stack.agent_state / "sandboxes"
    keep = (await client.create_session(request_id="reconcile-keep")).session_id
    drop = (await client.create_session(request_id="reconcile-drop")).session_id
    for session_id in (keep, drop):
        await client.wait_for_state(session_id, ["READY"], timeout=120)
        await run_turn(client, session_id, f"run: echo {session_id[:8]} > marker.txt && cat marker.txt")
        assert (sandboxes / f"local-{session_id}" / "workspace" / "marker.txt").read_text().strip() == session_id[:8]

    stack.agent.kill()
    await client.delete_session(drop)
    stack.start_agent()

    # The deleted session's sandbox is destroyed, the live one's kept: nothing else is left.
    async with asyncio.timeout(60):
        while (sandboxes / f"local-{drop}").exists():
            await asyncio.sleep(0.1)
    assert sorted(p.name for p in sandboxes.iterdir()) == [f"local-{keep}"]

    # The live session's journal says its sandbox was adopted.
    async with asyncio.timeout(60):
        async for event in client.watch(keep):
            if event.WhichOneof("payload") == "sandbox_reconciled":
                adopted = event.sandbox_reconciled
                break
    assert (adopted.action, adopted.sandbox_id, adopted.driver) == ("adopted", f"local-{keep}", "local")

    # Its next message runs where the first one left its file.
    result = await run_turn(client, keep, "run: cat marker.txt", after_seq=event.seq)
    assert keep[:8] in result
    assert sorted(p.name for p in sandboxes.iterdir()) == [f"local-{keep}"]
