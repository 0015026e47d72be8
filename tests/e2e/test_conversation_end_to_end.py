"""The conversation lifecycle end to end: real processes, the real bundled CLI in
the local sandbox, the offline model's scripts."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from astrabox.client import AstraBoxClient
from astrabox.sessionkernel.v1 import events_pb2, session_pb2
from dataplane_agent.sandboxes.disk import release_mounts

pytestmark = pytest.mark.e2e

TIMEOUT = 120
_TURN_END = ("turn_completed", "turn_failed", "turn_interrupted")


async def new_session(client: AstraBoxClient, **options) -> session_pb2.Session:
    session = await client.create_session(**options)
    return await client.wait_for_state(session.session_id, ["READY"], timeout=TIMEOUT)


async def until(client, session_id, after_seq, predicate) -> list[events_pb2.SessionEvent]:
    """Events after `after_seq` up to and including the first that satisfies `predicate`."""
    events = []
    async with asyncio.timeout(TIMEOUT):
        async for event in client.watch(session_id, after_seq=after_seq):
            events.append(event)
            if predicate(event):
                return events
    raise AssertionError("watch ended")


def turn_end(turn_id):
    return lambda e: e.turn_id == turn_id and e.WhichOneof("payload") in _TURN_END


def kind(name):
    return lambda e: e.WhichOneof("payload") == name


def final_text(events) -> str:
    return next(e.turn_completed.result for e in reversed(events) if e.WhichOneof("payload") == "turn_completed")


async def all_events(client, session_id):
    return [e async for e in client.iter_events(session_id)]


async def test_denied_then_approved_tool_call(client, stack):
    session = await new_session(client, permission_mode="default")
    sid = session.session_id
    workspace = stack.host_workspace(await all_events(client, sid))

    first = await client.send_message(sid, "run: touch approved.txt")
    asked = await until(client, sid, first.seq, kind("interaction_requested"))
    interaction = asked[-1].interaction_requested.interaction
    assert interaction.tool_name == "Bash" and "touch approved.txt" in interaction.input_json
    waiting = await client.get_session(sid)
    assert waiting.state == session_pb2.SESSION_STATE_WAITING_FOR_INPUT
    await client.respond_to_interaction(sid, interaction.interaction_id, deny="not in this workspace")
    events = await until(client, sid, asked[-1].seq, turn_end(first.turn_id))
    assert events[-1].WhichOneof("payload") == "turn_completed"
    assert "denied" in final_text(events) and "not in this workspace" in final_text(events)
    assert not (workspace / "approved.txt").exists()

    second = await client.send_message(sid, "run: touch approved.txt")
    asked = await until(client, sid, second.seq, kind("interaction_requested"))
    await client.respond_to_interaction(sid, asked[-1].interaction_requested.interaction.interaction_id, allow=True)
    events = await until(client, sid, asked[-1].seq, turn_end(second.turn_id))
    assert events[-1].WhichOneof("payload") == "turn_completed"
    assert (workspace / "approved.txt").exists()


async def test_a_pending_interaction_survives_a_controlplane_restart(client, stack):
    session = await new_session(client, permission_mode="default")
    sid = session.session_id
    workspace = stack.host_workspace(await all_events(client, sid))
    sent = await client.send_message(sid, "run: touch after-restart.txt")
    asked = await until(client, sid, sent.seq, kind("interaction_requested"))

    stack.restart_controlplane()

    pending = await client.get_session(sid)  # the client reconnects by itself
    assert pending.state == session_pb2.SESSION_STATE_WAITING_FOR_INPUT
    assert pending.pending_interaction.interaction_id == asked[-1].interaction_requested.interaction.interaction_id
    await client.respond_to_interaction(sid, pending.pending_interaction.interaction_id, allow=True)
    events = await until(client, sid, asked[-1].seq, turn_end(sent.turn_id))
    assert events[-1].WhichOneof("payload") == "turn_completed"
    assert (workspace / "after-restart.txt").exists()


async def test_interrupt_during_a_long_tool_then_the_next_message_runs(client, stack):
    sid = (await new_session(client)).session_id
    sent = await client.send_message(sid, "sleep: 60")
    await until(
        client,
        sid,
        sent.seq,
        lambda e: (
            e.WhichOneof("payload") == "engine_message"
            and e.engine_message.type_name == "AssistantMessage"
            and "Bash" in e.engine_message.payload_json
        ),
    )
    interrupted_at = asyncio.get_running_loop().time()
    await client.interrupt_turn(sid)
    events = await until(client, sid, sent.seq, turn_end(sent.turn_id))
    elapsed = asyncio.get_running_loop().time() - interrupted_at
    assert events[-1].WhichOneof("payload") == "turn_interrupted"
    assert elapsed < 40  # the agent's deadline is 10 s; `sleep 60` did not run to its end
    assert any(e.WhichOneof("payload") == "interrupt_requested" for e in events)

    again = await client.send_message(sid, "run: echo still here")
    events = await until(client, sid, again.seq, turn_end(again.turn_id))
    assert events[-1].WhichOneof("payload") == "turn_completed" and "still here" in final_text(events)


async def test_three_messages_back_to_back_are_answered_in_order_each_once(client, stack):
    sid = (await new_session(client)).session_id
    sent = [await client.send_message(sid, f"run: echo message-{i}") for i in range(3)]
    events = await until(client, sid, sent[0].seq - 1, turn_end(sent[-1].turn_id))
    completed = [e for e in events if e.WhichOneof("payload") == "turn_completed"]
    assert [e.turn_id for e in completed] == [s.turn_id for s in sent]
    assert [f"message-{i}" in e.turn_completed.result for i, e in enumerate(completed)] == [True] * 3
    delivered = [e.turn_id for e in events if e.WhichOneof("payload") == "input_delivered"]
    assert delivered == [s.turn_id for s in sent]


async def test_a_background_task_finishes_after_the_turn(client, stack):
    sid = (await new_session(client)).session_id
    sent = await client.send_message(sid, "background: sleep 2; echo done > bg.txt")
    events = await until(client, sid, sent.seq, turn_end(sent.turn_id))
    assert events[-1].WhichOneof("payload") == "turn_completed"
    opened = await client.get_session(sid)
    workspace = stack.host_workspace(await all_events(client, sid))

    def task_closed(e):
        return (
            e.WhichOneof("payload") == "engine_message"
            and e.engine_message.type_name in ("TaskNotificationMessage", "TaskUpdatedMessage")
            and '"completed"' in e.engine_message.payload_json
        )

    later = await until(client, sid, events[-1].seq, task_closed)
    types = [e.engine_message.type_name for e in later if e.WhichOneof("payload") == "engine_message"]
    assert "TaskStartedMessage" in types or opened.background_tasks
    assert (workspace / "bg.txt").read_text().strip() == "done"
    async with asyncio.timeout(TIMEOUT):
        while (await client.get_session(sid)).background_tasks:
            await asyncio.sleep(0.2)
    # The engine answers the finished task in a turn of its own.
    own = await until(client, sid, later[-1].seq - 1, kind("engine_turn_started"))
    answer = await until(client, sid, own[-1].seq, turn_end(own[-1].turn_id))
    assert "Background task finished" in final_text(answer)


def destroy_behind_the_platforms_back(sandbox_dir: Path) -> None:
    """What an operator's `kill -9`, `umount` and `rm -rf` would do: the sandbox's processes and files are gone."""
    pids = (sandbox_dir / "run" / "pids").read_text().split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    release_mounts(sandbox_dir)
    shutil.rmtree(sandbox_dir)


async def test_a_sandbox_destroyed_behind_our_back_comes_back_with_its_conversation(client, stack):
    sid = (await new_session(client)).session_id
    first = await client.send_message(sid, "run: echo remember-me > note.txt")
    events = await until(client, sid, first.seq, turn_end(first.turn_id))
    workspace = stack.host_workspace(await all_events(client, sid))
    destroy_behind_the_platforms_back(workspace.parent)

    second = await client.send_message(sid, "run: echo back")
    events = await until(client, sid, second.seq, turn_end(second.turn_id))
    assert events[-1].WhichOneof("payload") == "turn_completed", events[-1]
    assert any(e.WhichOneof("payload") == "runtime_lost" for e in events)
    session = await client.get_session(sid)
    assert session.state == session_pb2.SESSION_STATE_READY and session.runtime_available
    # The engine resumed the same conversation: its id did not change.
    results = [
        e
        for e in await all_events(client, sid)
        if e.WhichOneof("payload") == "engine_message" and e.engine_message.type_name == "ResultMessage"
    ]
    ids = {json.loads(e.engine_message.payload_json)["session_id"] for e in results}
    assert len(ids) == 1 and session.engine_session_id in ids
