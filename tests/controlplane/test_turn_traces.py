"""A message's turn is traced under the call that sent it: also a message that waits in the queue
and is dispatched later, by the settling of the turn before it (another call, in another trace)."""

from __future__ import annotations

from opentelemetry import trace

from controlplane.conversation import SendMessage
from controlplane.identity.callers import bind, unbind
from serverkit import tracing
from tests.controlplane.test_conversation import api as api
from tests.controlplane.test_conversation import commands, finish_turn, ok, ready


def trace_id_of(traceparent: str) -> str:
    """The trace id a W3C traceparent (version-traceid-spanid-flags) names."""
    return traceparent.split("-")[1]


async def test_a_queued_message_is_dispatched_in_the_trace_of_the_call_that_sent_it(api, plane):
    tracing.configure("astrabox-test")
    sid = await ready(api, plane)
    first = (await ok(api, "SendMessage", session_id=sid, client_message_id="m1", text="one")).turn_id
    token = bind(plane.caller)
    try:
        with tracing.tracer().start_as_current_span("the second send") as sending:
            second = await plane.conversation.send_message(SendMessage(sid, "m2", "two"))
        with tracing.tracer().start_as_current_span("an agent's report") as settling:
            await finish_turn(plane, sid, first)
    finally:
        unbind(token)
    sent, settled = (format(span.get_span_context().trace_id, "032x") for span in (sending, settling))
    assert trace.get_current_span().get_span_context().is_valid is False and sent != settled

    [delivered] = [c for c in await commands(plane, sid) if c.deliver_input.turn_id == second.turn_id]
    assert delivered.traceparent and trace_id_of(delivered.traceparent) == sent
