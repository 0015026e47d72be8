"""SIGKILL the data-plane agent while a turn streams output, restart it, and
check that the journal and a watching client hold every output exactly once,
in order, with no gap."""

from __future__ import annotations

import asyncio

import pytest

from astrabox.sessionkernel.v1 import events_pb2

pytestmark = pytest.mark.e2e


async def test_agent_sigkill_mid_turn_loses_and_duplicates_nothing(client, stack, database_url):
    import asyncpg

    session = await client.create_session(request_id="fault-1")
    await client.wait_for_state(session.session_id, ["READY"], timeout=120)
    accepted = await client.send_message(session.session_id, "steps: 8")

    seen: list[events_pb2.SessionEvent] = []
    streaming = asyncio.Event()
    settled = asyncio.Event()

    async def watch() -> None:
        async for event in client.watch(session.session_id):
            seen.append(event)
            kind = event.WhichOneof("payload")
            if kind == "engine_message" and sum(e.WhichOneof("payload") == "engine_message" for e in seen) >= 4:
                streaming.set()
            if event.turn_id == accepted.turn_id and kind in ("turn_completed", "turn_failed"):
                settled.set()
                return

    watcher = asyncio.create_task(watch())
    try:
        async with asyncio.timeout(180):
            await streaming.wait()
            stack.agent.kill()
            stack.start_agent()
            await settled.wait()
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)

    # The watcher saw every seq exactly once, in order.
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    # The turn was settled (the agent restarted while it ran).
    assert seen[-1].WhichOneof("payload") == "turn_failed"
    assert "restarted" in seen[-1].turn_failed.reason

    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT seq, output_seq, kind FROM events WHERE session_id = $1 ORDER BY seq", session.session_id
        )
        committed = await conn.fetchval(
            "SELECT committed_output_seq FROM sessions WHERE session_id = $1", session.session_id
        )
    finally:
        await conn.close()
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
    # Every agent output was journaled once, in the agent's order, none past the committed cursor
    # (the last committed output may be one that journals no engine message: the restarted
    # runtime's report, say, when it happens to come last).
    output_seqs = [r["output_seq"] for r in rows if r["output_seq"] is not None]
    assert output_seqs == sorted(set(output_seqs)) and output_seqs[-1] <= committed
    # The watcher stopped at the settled turn; the restarted agent's reconciler may have journaled
    # its adoption of the sandbox since.
    assert [r["seq"] for r in rows][: len(seen)] == [e.seq for e in seen]
    assert {r["kind"] for r in rows[len(seen) :]} <= {"sandbox_reconciled"}

    # The session is usable again: the next message runs on the restarted agent.
    session_after = await client.wait_for_state(session.session_id, ["READY"], timeout=30)
    assert session_after.failure_reason
    again = await client.send_message(session.session_id, "run: echo back")
    async with asyncio.timeout(180):
        async for event in client.watch(session.session_id, after_seq=seen[-1].seq):
            if event.turn_id == again.turn_id and event.WhichOneof("payload") in ("turn_completed", "turn_failed"):
                assert event.WhichOneof("payload") == "turn_completed", event.turn_failed.reason
                break
