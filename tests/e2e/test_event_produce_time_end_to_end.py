"""A real agent's outputs reach the journal with the time the agent produced them: every event that
records an agent output carries a produce_time no later than its commit time (SessionEvent.time),
through ListSessionEvents, WatchSessionEvents and the client's Event; the control plane's own events
carry none."""

from __future__ import annotations

import pytest

from astrabox.events import Event
from tests.e2e.test_conversation_end_to_end import all_events, new_session, turn_end, until

pytestmark = pytest.mark.e2e

# What the control plane journals on its own (or for a client's call) in a turn like this one.
_CONTROL_PLANE_KINDS = {"session_created", "startup_requested", "user_message_accepted", "turn_completed"}


async def test_agent_events_carry_their_produce_time(client, stack):
    sid = (await new_session(client)).session_id
    sent = await client.send_message(sid, "run: echo produced")
    watched = await until(client, sid, 0, turn_end(sent.turn_id))
    listed = await all_events(client, sid)
    assert [e.seq for e in listed][: len(watched)] == [e.seq for e in watched]

    for events in (watched, listed):
        engine = [e for e in events if e.WhichOneof("payload") == "engine_message"]
        assert engine, "the turn journaled no engine message"
        for event in engine + [e for e in events if e.WhichOneof("payload") == "runtime_ready"]:
            assert event.HasField("produce_time"), event.WhichOneof("payload")
            assert event.produce_time.ToDatetime() <= event.time.ToDatetime()
        for event in events:
            if event.WhichOneof("payload") in _CONTROL_PLANE_KINDS:
                assert not event.HasField("produce_time"), event.WhichOneof("payload")
    view = Event.from_proto(engine[-1])
    assert view.produce_time is not None and view.produce_time <= view.time
