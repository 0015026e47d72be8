"""SessionKernelService rules, one RPC at a time, in-process through grpcio-testing
on a real PostgreSQL database."""

from __future__ import annotations

import grpc
import pytest
import pytest_asyncio

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from astrabox.sessionkernel.v1 import events_pb2, session_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as pb
from controlplane.api import SessionKernelServicer
from controlplane.quotas import Quotas
from controlplane.workspace import WorkspaceFiles, WorkspaceRouter
from tests.support.grpc_testing_bridge import ServicerHarness

SERVICE = pb.DESCRIPTOR.services_by_name["SessionKernelService"]
UNKNOWN_ID = "8c3e2a38-7f8b-4f7e-9d7b-9a0b6e0f0e0e"


@pytest_asyncio.fixture
async def api(plane) -> ServicerHarness:
    return ServicerHarness(
        SERVICE,
        SessionKernelServicer(
            plane.kernel, plane.conversation, WorkspaceFiles(plane.kernel, WorkspaceRouter(), Quotas(plane.pool))
        ),
        plane.caller,
    )


async def create(api: ServicerHarness, request_id: str = "req-1", **fields) -> session_pb2.Session:
    response, code, details, _ = await api.unary(
        "CreateSession", pb.CreateSessionRequest(request_id=request_id, **fields)
    )
    assert code is grpc.StatusCode.OK, details
    return response.session


async def ready_session(api, plane, request_id: str = "req-1") -> session_pb2.Session:
    session = await create(api, request_id)
    await plane.runtime_started(session.session_id)
    return session


async def queued_commands(plane, session_id: str) -> list[str]:
    rows = await plane.pool.fetch(
        "SELECT body FROM agent_commands WHERE session_id = $1 ORDER BY command_seq", session_id
    )
    return [runner_pb2.Command.FromString(r["body"]).WhichOneof("body") for r in rows]


async def test_create_without_agent_is_unavailable_and_stores_nothing(api, plane):
    _, code, details, info = await api.unary("CreateSession", pb.CreateSessionRequest(request_id="r"))
    assert code is grpc.StatusCode.UNAVAILABLE
    assert info.reason == "NO_AGENT_AVAILABLE"
    assert "astrabox agent" in details
    assert await plane.pool.fetchval("SELECT count(*) FROM sessions") == 0


async def test_create_is_idempotent_on_request_id(api, plane):
    await plane.connect_agent()
    first = await create(api, "same-id", model="m1")
    again = await create(api, "same-id", model="m1")
    assert again.session_id == first.session_id
    assert first.state == session_pb2.SESSION_STATE_CREATING
    assert await plane.pool.fetchval("SELECT count(*) FROM sessions") == 1
    assert await queued_commands(plane, first.session_id) == ["start_runtime"]

    _, code, _, info = await api.unary("CreateSession", pb.CreateSessionRequest(request_id="same-id", model="m2"))
    assert code is grpc.StatusCode.ALREADY_EXISTS
    assert info.reason == "REQUEST_ID_REUSED"
    assert info.metadata["session_id"] == first.session_id


@pytest.mark.parametrize(
    ("request_fields", "reason", "field"),
    [
        ({"request_id": ""}, "INVALID_ARGUMENT", "request_id"),
        ({"request_id": "has spaces"}, "INVALID_ARGUMENT", "request_id"),
        ({"request_id": "ok", "engine": "vim"}, "INVALID_ARGUMENT", "engine"),
        ({"request_id": "ok", "permission_mode": "yolo"}, "PERMISSION_MODE_INVALID", "permission_mode"),
    ],
)
async def test_create_rejects_bad_input(api, plane, request_fields, reason, field):
    await plane.connect_agent()
    _, code, details, info = await api.unary("CreateSession", pb.CreateSessionRequest(**request_fields))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert (info.reason, info.metadata["field"]) == (reason, field)
    if field == "permission_mode":
        assert "acceptEdits" in details  # names the valid modes


async def test_get_session_errors(api, plane):
    _, code, _, info = await api.unary("GetSession", pb.GetSessionRequest(session_id="not-a-uuid"))
    assert (code, info.reason, info.metadata["field"]) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
        "session_id",
    )
    _, code, _, info = await api.unary("GetSession", pb.GetSessionRequest(session_id=UNKNOWN_ID))
    assert (code, info.reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")


async def test_send_message_before_ready_is_refused(api, plane):
    await plane.connect_agent()
    session = await create(api)
    _, code, details, info = await api.unary(
        "SendMessage", pb.SendMessageRequest(session_id=session.session_id, client_message_id="m1", text="hi")
    )
    assert (code, info.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "SESSION_NOT_READY")
    assert "creating" in details


async def test_send_message_is_idempotent(api, plane):
    await plane.connect_agent()
    session = await ready_session(api, plane)
    request = pb.SendMessageRequest(session_id=session.session_id, client_message_id="m1", text="hello")
    first, code, _, _ = await api.unary("SendMessage", request)
    assert code is grpc.StatusCode.OK
    retry, code, _, _ = await api.unary("SendMessage", request)
    assert code is grpc.StatusCode.OK
    assert (retry.turn_id, retry.seq) == (first.turn_id, first.seq)

    accepted = await plane.pool.fetchval(
        "SELECT count(*) FROM events WHERE session_id = $1 AND kind = 'user_message_accepted'", session.session_id
    )
    assert accepted == 1
    assert await queued_commands(plane, session.session_id) == ["start_runtime", "deliver_input"]

    got, _, _, _ = await api.unary("GetSession", pb.GetSessionRequest(session_id=session.session_id))
    assert got.session.state == session_pb2.SESSION_STATE_RUNNING
    assert got.session.current_turn_id == first.turn_id

    _, code, _, info = await api.unary(
        "SendMessage", pb.SendMessageRequest(session_id=session.session_id, client_message_id="m1", text="other")
    )
    assert (code, info.reason) == (grpc.StatusCode.ALREADY_EXISTS, "REQUEST_ID_REUSED")


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"text": ""}, "text"),
        ({"text": "   \n"}, "text"),
        ({"text": "hi", "client_message_id": ""}, "client_message_id"),
        ({"text": "hi", "session_id": "xyz"}, "session_id"),
        ({"text": "hi", "permission_mode": "sudo"}, "permission_mode"),
    ],
)
async def test_send_message_rejects_bad_input(api, plane, fields, field):
    await plane.connect_agent()
    session = await ready_session(api, plane)
    request = pb.SendMessageRequest(session_id=session.session_id, client_message_id="m1")
    for name, value in fields.items():
        setattr(request, name, value)
    _, code, _, info = await api.unary("SendMessage", request)
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert info.metadata["field"] == field
    # Nothing was journaled past the runtime start, and the server still answers.
    got, code, _, _ = await api.unary("GetSession", pb.GetSessionRequest(session_id=session.session_id))
    assert code is grpc.StatusCode.OK and got.session.state == session_pb2.SESSION_STATE_READY


async def test_send_message_to_unknown_session(api, plane):
    _, code, _, info = await api.unary(
        "SendMessage", pb.SendMessageRequest(session_id=UNKNOWN_ID, client_message_id="m", text="hi")
    )
    assert (code, info.reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")


async def test_list_sessions_pages_newest_first(api, plane):
    await plane.connect_agent()
    created = [(await create(api, f"req-{i}")).session_id for i in range(5)]
    seen, token = [], ""
    while True:
        page, code, _, _ = await api.unary("ListSessions", pb.ListSessionsRequest(page_size=2, page_token=token))
        assert code is grpc.StatusCode.OK and len(page.sessions) <= 2
        seen += [s.session_id for s in page.sessions]
        token = page.next_page_token
        if not token:
            break
    assert seen == list(reversed(created))
    _, code, _, info = await api.unary("ListSessions", pb.ListSessionsRequest(page_token="garbage"))
    assert (code, info.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "PAGE_TOKEN_INVALID")
    _, code, _, info = await api.unary("ListSessions", pb.ListSessionsRequest(page_size=-1))
    assert code is grpc.StatusCode.INVALID_ARGUMENT


async def test_list_session_events_pages_in_seq_order(api, plane):
    await plane.connect_agent()
    session = await ready_session(api, plane)
    seqs, token = [], ""
    while True:
        page, code, _, _ = await api.unary(
            "ListSessionEvents",
            pb.ListSessionEventsRequest(session_id=session.session_id, page_size=1, page_token=token),
        )
        assert code is grpc.StatusCode.OK
        seqs += [e.seq for e in page.events]
        token = page.next_page_token
        if not token:
            break
    assert seqs == [1, 2, 3, 4]
    page, _, _, _ = await api.unary(
        "ListSessionEvents", pb.ListSessionEventsRequest(session_id=session.session_id, after_seq=2)
    )
    assert [e.kind for e in page.events] == [events_pb2.EVENT_KIND_STARTUP_PHASE, events_pb2.EVENT_KIND_RUNTIME_READY]
    assert page.events[0].startup_phase.phase == "placed"


async def test_watch_replays_from_cursor(api, plane):
    await plane.connect_agent()
    session = await ready_session(api, plane)
    responses, _, _ = await api.server_stream(
        "WatchSessionEvents", pb.WatchSessionEventsRequest(session_id=session.session_id, after_seq=1), count=3
    )
    assert [(r.event.seq, r.event.kind) for r in responses] == [
        (2, events_pb2.EVENT_KIND_STARTUP_REQUESTED),
        (3, events_pb2.EVENT_KIND_STARTUP_PHASE),
        (4, events_pb2.EVENT_KIND_RUNTIME_READY),
    ]
    assert responses[0].event.startup_requested.agent_id == "agent-1"


async def test_watch_unknown_session_is_not_found(api, plane):
    responses, code, info = await api.server_stream(
        "WatchSessionEvents", pb.WatchSessionEventsRequest(session_id=UNKNOWN_ID), count=1
    )
    assert responses == []
    assert (code, info.reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")


async def test_delete_hides_the_session_and_is_idempotent(api, plane):
    await plane.connect_agent()
    session = await ready_session(api, plane)
    for _ in range(2):
        deleted, code, _, _ = await api.unary("DeleteSession", pb.DeleteSessionRequest(session_id=session.session_id))
        assert code is grpc.StatusCode.OK
        assert deleted.session.state == session_pb2.SESSION_STATE_DELETED
    _, code, _, info = await api.unary("GetSession", pb.GetSessionRequest(session_id=session.session_id))
    assert (code, info.reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")
    listed, _, _, _ = await api.unary("ListSessions", pb.ListSessionsRequest())
    assert listed.sessions == []
    assert (await queued_commands(plane, session.session_id)).count("destroy_runtime") == 1


SESSION_RPCS = [
    ("GetSession", {}),
    ("SendMessage", {"client_message_id": "m", "text": "hi"}),
    ("ListSessionEvents", {}),
    ("InterruptTurn", {}),
    ("RespondToInteraction", {"interaction_id": "i", "deny": pb.DenyTool(message="no")}),
    ("SetPermissionMode", {"permission_mode": "plan"}),
    ("ArchiveSession", {}),
    ("DeleteSession", {}),
    ("StopBackgroundTask", {"task_id": "t"}),
    ("ListWorkspace", {"path": "src"}),
]


@pytest.mark.parametrize(("rpc", "fields"), SESSION_RPCS)
async def test_every_session_rpc_names_a_malformed_or_unknown_session(api, plane, rpc, fields):
    request_type = getattr(pb, f"{rpc}Request")
    _, code, _, info = await api.unary(rpc, request_type(session_id="not-a-uuid", **fields))
    assert (code, info.reason, info.metadata["field"]) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
        "session_id",
    )
    _, code, _, info = await api.unary(rpc, request_type(session_id=UNKNOWN_ID, **fields))
    assert (code, info.reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")


async def test_workspace_calls_need_a_runtime_and_a_connected_agent(api, plane):
    await plane.connect_agent()
    session = await create(api)
    _, code, _, info = await api.unary("ListWorkspace", pb.ListWorkspaceRequest(session_id=session.session_id))
    assert (code, info.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "RUNTIME_NOT_AVAILABLE")
    await plane.runtime_started(session.session_id)
    # The agent's stream is not attached to this (test) control plane.
    _, code, _, info = await api.unary("ListWorkspace", pb.ListWorkspaceRequest(session_id=session.session_id))
    assert (code, info.reason) == (grpc.StatusCode.UNAVAILABLE, "AGENT_NOT_CONNECTED")
    _, code, _, info = await api.unary(
        "ListWorkspace", pb.ListWorkspaceRequest(session_id=session.session_id, path="a/../../etc")
    )
    assert (code, info.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "PATH_OUTSIDE_WORKSPACE")
    responses, code, info = await api.server_stream(
        "RunCommand", pb.RunCommandRequest(session_id=session.session_id, command="  "), count=1
    )
    assert (responses, code, info.reason) == ([], grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
