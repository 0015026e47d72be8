"""Client-executed custom tools end to end: an agent file declaring one, applied through AgentService,
a session from it on the real bundled CLI in the local sandbox (separate processes, the offline
model). The model calls `mcp__client__<name>`; the turn parks as a CUSTOM_TOOL interaction carrying
the input; the client's `tool_result` is what the model reads and quotes. The parked call outlives a
SIGKILL of the control plane: the client answers the restarted one and the turn completes."""

from __future__ import annotations

import json
import textwrap

import pytest

from astrabox import agent_files
from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from astrabox.sessionkernel.v1 import session_pb2
from tests.e2e.test_conversation_end_to_end import final_text, kind, new_session, turn_end, until
from tests.e2e.test_session_end_to_end import engine_messages

pytestmark = pytest.mark.e2e

AGENT_FILE = textwrap.dedent(
    """\
    name: shop
    description: Answers questions about orders
    custom_tools:
      - name: lookup_order
        description: Looks an order up by its id and says where it is
        input_schema:
          type: object
          properties: {order_id: {type: string}}
          required: [order_id]
    """
)
CALL = 'tool: mcp__client__lookup_order {"order_id": "A-7"}'


async def _agent_session(client: AstraBoxClient) -> str:
    [agent] = agent_files.parse(AGENT_FILE)
    await client.agents.apply(agent.name, agent.spec)
    # "default" mode: the CLI would ask can_use_tool for an MCP tool; a custom tool must not be asked twice.
    session = await new_session(client, agent="shop", permission_mode="default")
    return session.session_id


async def _parked(client: AstraBoxClient, session_id: str, after_seq: int) -> session_pb2.Interaction:
    asked = await until(client, session_id, after_seq, kind("interaction_requested"))
    return asked[-1].interaction_requested.interaction


async def test_a_custom_tool_call_is_answered_by_the_client_and_the_model_quotes_its_result(
    client: AstraBoxClient, stack
) -> None:
    sid = await _agent_session(client)

    sent = await client.send_message(sid, CALL)
    interaction = await _parked(client, sid, sent.seq)

    assert interaction.kind == session_pb2.INTERACTION_KIND_CUSTOM_TOOL
    assert (interaction.tool_name, json.loads(interaction.input_json)) == ("lookup_order", {"order_id": "A-7"})
    waiting = await client.get_session(sid)
    assert waiting.state == session_pb2.SESSION_STATE_WAITING_FOR_INPUT
    with pytest.raises(AstraBoxError) as refused:  # an approval is not a result
        await client.respond_to_interaction(sid, interaction.interaction_id, allow=True)
    assert refused.value.reason == "INVALID_ARGUMENT" and "tool_result" in str(refused.value)

    await client.respond_to_interaction(sid, interaction.interaction_id, tool_result="A-7 left Lyon on Monday")
    events = await until(client, sid, sent.seq, turn_end(sent.turn_id))

    assert events[-1].WhichOneof("payload") == "turn_completed", events[-1]
    assert "A-7 left Lyon on Monday" in final_text(events)
    # One interaction for the call: the CLI's permission check did not ask for an approval as well.
    assert [e.interaction_requested.interaction.kind for e in events if kind("interaction_requested")(e)] == [
        session_pb2.INTERACTION_KIND_CUSTOM_TOOL
    ]
    init = next(p for t, p in engine_messages(events) if t == "SystemMessage" and p["subtype"] == "init")
    assert "mcp__client__lookup_order" in init["data"]["tools"]

    # The tool's failure: the model reads the client's text as its error.
    failed = await client.send_message(sid, CALL)
    interaction = await _parked(client, sid, failed.seq)
    await client.respond_to_interaction(sid, interaction.interaction_id, tool_result="no such order", is_error=True)
    events = await until(client, sid, failed.seq, turn_end(failed.turn_id))
    assert events[-1].WhichOneof("payload") == "turn_completed"
    assert "no such order" in final_text(events) and "returned" not in final_text(events)


async def test_a_parked_custom_tool_call_survives_a_controlplane_sigkill(client: AstraBoxClient, stack) -> None:
    sid = await _agent_session(client)
    sent = await client.send_message(sid, CALL)
    interaction = await _parked(client, sid, sent.seq)

    stack.restart_controlplane()

    pending = await client.get_session(sid)  # the client reconnects by itself
    assert pending.state == session_pb2.SESSION_STATE_WAITING_FOR_INPUT
    assert pending.pending_interaction.interaction_id == interaction.interaction_id
    assert pending.pending_interaction.kind == session_pb2.INTERACTION_KIND_CUSTOM_TOOL
    await client.respond_to_interaction(sid, interaction.interaction_id, tool_result="A-7 is in Paris")
    events = await until(client, sid, sent.seq, turn_end(sent.turn_id))

    assert events[-1].WhichOneof("payload") == "turn_completed", events[-1]
    assert "A-7 is in Paris" in final_text(events)
