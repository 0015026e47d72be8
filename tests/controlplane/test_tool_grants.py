"""Tool grants in the control plane: an approval's answer grants later calls of its tool, the
grant is journaled, listed on the session and sent to its agent; revoking it takes it back; a
session placed on another agent takes its grants along."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import grpc
import pytest_asyncio
from google.protobuf import timestamp_pb2

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as pb
from controlplane.journal import EventKind
from tests.controlplane.test_conversation import api as api
from tests.controlplane.test_conversation import commands, finish_turn, ok, ready, refused, session_of


def _at(moment: datetime) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(moment)
    return stamp


async def _ask(plane, sid: str, turn: str, interaction_id: str, tool: str = "Bash", **tool_input) -> None:
    await plane.report(
        sid,
        turn,
        interaction_requested=runner_pb2.InteractionRequested(
            interaction_id=interaction_id, tool_name=tool, input_json=json.dumps(tool_input), tool_use_id="tu"
        ),
    )


async def _grant_sets(plane, sid: str) -> list[list[tuple[str, str]]]:
    return [
        [(g.tool_name, g.input_pattern) for g in c.set_tool_grants.grants]
        for c in await commands(plane, sid)
        if c.HasField("set_tool_grants")
    ]


@pytest_asyncio.fixture
async def waiting(api, plane):
    """A session whose turn waits on a Bash approval (interaction i-1)."""
    sid = await ready(api, plane)
    turn = (await ok(api, "SendMessage", session_id=sid, client_message_id="m", text="run: make test")).turn_id
    await _ask(plane, sid, turn, "i-1", command="make test")
    return sid, turn


async def test_an_answer_grants_later_calls_and_a_revocation_takes_them_back(api, plane, waiting):
    sid, turn = waiting
    expires = datetime.now(UTC) + timedelta(hours=2)
    scope = pb.ToolGrantScope(input_pattern="make *", expire_time=_at(expires))
    answered = await ok(
        api,
        "RespondToInteraction",
        session_id=sid,
        interaction_id="i-1",
        request_id="r",
        allow=pb.AllowTool(grant=scope),
    )
    [grant] = answered.session.tool_grants
    assert (grant.tool_name, grant.input_pattern, grant.interaction_id) == ("Bash", "make *", "i-1")
    assert grant.expire_time.ToDatetime(tzinfo=UTC).replace(microsecond=0) == expires.replace(microsecond=0)
    # The same answer again is the same outcome: one grant.
    again = await ok(
        api,
        "RespondToInteraction",
        session_id=sid,
        interaction_id="i-1",
        request_id="r",
        allow=pb.AllowTool(grant=scope),
    )
    assert [g.grant_id for g in again.session.tool_grants] == [grant.grant_id]
    events = await plane.journal.read(sid, 0, 1000)
    granted = [e for e in events if e.kind is EventKind.TOOL_GRANTED]
    assert len(granted) == 1 and granted[0].payload["grant"]["grant_id"] == grant.grant_id
    answer_seq = next(e.seq for e in events if e.kind is EventKind.INTERACTION_ANSWERED)
    assert granted[0].seq > answer_seq
    assert await _grant_sets(plane, sid) == [[("Bash", "make *")]]
    [sent] = [c.set_tool_grants.grants[0] for c in await commands(plane, sid) if c.HasField("set_tool_grants")]
    assert sent.grant_id == grant.grant_id and sent.expire_time == grant.expire_time

    revoked = await ok(api, "RevokeToolGrant", session_id=sid, grant_id=grant.grant_id, request_id="x")
    assert not revoked.session.tool_grants
    # Revoking again changes nothing and sends nothing more.
    await ok(api, "RevokeToolGrant", session_id=sid, grant_id=grant.grant_id)
    assert await _grant_sets(plane, sid) == [[("Bash", "make *")], []]
    kinds = [e.kind for e in await plane.journal.read(sid, 0, 1000)]
    assert kinds.count(EventKind.TOOL_GRANT_REVOKED) == 1
    await finish_turn(plane, sid, turn)


async def test_bad_grants_are_refused_and_store_nothing(api, plane, waiting):
    sid, _ = waiting
    past = pb.ToolGrantScope(expire_time=_at(datetime.now(UTC) - timedelta(minutes=1)))
    far = pb.ToolGrantScope(expire_time=_at(datetime.now(UTC) + timedelta(days=400)))
    huge = pb.ToolGrantScope(input_pattern="x" * 5000)
    for scope in (past, far, huge):
        code, reason, details = await refused(
            api, "RespondToInteraction", session_id=sid, interaction_id="i-1", allow=pb.AllowTool(grant=scope)
        )
        assert code is grpc.StatusCode.INVALID_ARGUMENT, details
    assert not (await session_of(api, sid)).tool_grants
    assert (await session_of(api, sid)).HasField("pending_interaction")  # still waiting for a valid answer
    code, reason, _ = await refused(api, "RevokeToolGrant", session_id=sid, grant_id="no-such-grant")
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "TOOL_GRANT_NOT_FOUND")


async def test_a_question_cannot_grant(api, plane):
    sid = await ready(api, plane)
    turn = (await ok(api, "SendMessage", session_id=sid, client_message_id="m", text="ask")).turn_id
    questions = [{"question": "Which?", "header": "h", "options": [{"label": "A"}], "multiSelect": False}]
    await _ask(plane, sid, turn, "q-1", tool="AskUserQuestion", questions=questions)
    code, _, details = await refused(
        api, "RespondToInteraction", session_id=sid, interaction_id="q-1", allow=pb.AllowTool(grant=pb.ToolGrantScope())
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "tool approval" in details


async def test_a_session_placed_on_another_agent_takes_its_grants_along(api, plane, waiting):
    sid, turn = waiting
    await ok(
        api,
        "RespondToInteraction",
        session_id=sid,
        interaction_id="i-1",
        allow=pb.AllowTool(grant=pb.ToolGrantScope(input_pattern="make *")),
    )
    await finish_turn(plane, sid, turn)
    await plane.pool.execute("UPDATE agents SET lease_expires_at = now() - interval '1 s'")
    await plane.sweeper.sweep()
    await plane.connect_agent("agent-2")
    await ok(api, "SendMessage", session_id=sid, client_message_id="m2", text="again")
    rows = await plane.pool.fetch(
        "SELECT body FROM agent_commands WHERE session_id = $1 AND agent_id = 'agent-2' ORDER BY command_seq", sid
    )
    [start] = [runner_pb2.Command.FromString(r["body"]).start_runtime for r in rows][:1]
    assert [(g.tool_name, g.input_pattern) for g in start.tool_grants] == [("Bash", "make *")]


async def test_an_expired_grant_is_not_listed(api, plane, waiting):
    sid, _ = waiting
    await ok(
        api,
        "RespondToInteraction",
        session_id=sid,
        interaction_id="i-1",
        allow=pb.AllowTool(grant=pb.ToolGrantScope(expire_time=_at(datetime.now(UTC) + timedelta(minutes=5)))),
    )
    assert len((await session_of(api, sid)).tool_grants) == 1
    await plane.pool.execute("UPDATE tool_grants SET expires_at = now() - interval '1 s'")
    assert not (await session_of(api, sid)).tool_grants
