"""Engine messages as a client reads them from a real control plane over gRPC on a real PostgreSQL:
agents' engine messages that are no JSON object are journaled without failing their commit."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from astrabox.sessionkernel.v1 import events_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as pb
from astrabox.sessionkernel.v1 import session_kernel_service_pb2_grpc as pb_grpc
from controlplane.kernel import CreateSession
from controlplane.server import RunningControlPlane
from tests.controlplane.conftest import Plane
from tests.support import auth


@pytest_asyncio.fixture
async def stub(running: RunningControlPlane) -> AsyncIterator[pb_grpc.SessionKernelServiceStub]:
    async with auth.channel(running.address) as channel:
        yield pb_grpc.SessionKernelServiceStub(channel)


async def ready_session(plane: Plane, name: str) -> str:
    session_id = (await plane.kernel.create_session(CreateSession(name, plane.project_id))).session_id
    await plane.runtime_started(session_id)
    return session_id


async def report_engine(plane: Plane, session_id: str, type_name: str, payload_json: str, turn_id: str = "t1") -> int:
    message = runner_pb2.EngineMessage(type_name=type_name, payload_json=payload_json)
    return await plane.report(session_id, turn_id, engine_message=message)


async def listed(
    stub: pb_grpc.SessionKernelServiceStub, session_id: str, **request: Any
) -> list[events_pb2.SessionEvent]:
    """Every event of the session through ListSessionEvents, page after page."""
    events: list[events_pb2.SessionEvent] = []
    token = ""
    while True:
        page = await stub.ListSessionEvents(
            pb.ListSessionEventsRequest(session_id=session_id, page_size=1000, page_token=token, **request)
        )
        events.extend(page.events)
        if not (token := page.next_page_token):
            return events


def engine_messages(events: list[events_pb2.SessionEvent]) -> list[events_pb2.EngineMessage]:
    return [e.engine_message for e in events if e.HasField("engine_message")]


async def test_engine_messages_that_are_no_json_object_are_journaled_and_change_nothing(plane: Plane, stub) -> None:
    session_id = await ready_session(plane, "non-object")
    sent = [
        ("ResultMessage", "[]"),
        ("SystemMessage", '"init"'),
        ("AssistantMessage", "7"),
        ("UserMessage", "null"),
        ("TaskNotificationMessage", '{"task_id": "task-1", "patch": 5}'),
        ("SystemMessage", '{"subtype": "init", "data": "not an object"}'),
        ("AssistantMessage", '{"content": 5}'),
        ("UserMessage", '{"content": {"type_name": "ToolResultBlock"}}'),
    ]
    for type_name, text in sent:
        await report_engine(plane, session_id, type_name, text)  # none fails its commit
    before = await plane.kernel.get_session(session_id)
    messages = engine_messages(await listed(stub, session_id))
    assert [(m.type_name, json.loads(m.payload_json)) for m in messages] == [(t, json.loads(j)) for t, j in sent]
    # The session goes on: its state is what it was, and the next output commits.
    assert before.state.value == "ready" and before.current_turn_id == ""
    await report_engine(plane, session_id, "AssistantMessage", json.dumps({"content": [], "message_id": "m"}))
    assert json.loads(engine_messages(await listed(stub, session_id))[-1].payload_json)["message_id"] == "m"
