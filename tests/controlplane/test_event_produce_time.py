"""An agent output's produce_time is journaled with the events that record it and served on
SessionEvent (ListSessionEvents, WatchSessionEvents, the client's Event); the control plane's own
events carry none."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest_asyncio

from astrabox.events import Event
from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from astrabox.sessionkernel.v1 import events_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as pb
from controlplane.api import SessionKernelServicer
from controlplane.quotas import Quotas
from controlplane.workspace import WorkspaceFiles, WorkspaceRouter
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.state_database import Database
from tests.controlplane.test_session_kernel_service import SERVICE, create
from tests.support.grpc_testing_bridge import ServicerHarness


@pytest_asyncio.fixture
async def api(plane) -> ServicerHarness:
    return ServicerHarness(
        SERVICE,
        SessionKernelServicer(
            plane.kernel, plane.conversation, WorkspaceFiles(plane.kernel, WorkspaceRouter(), Quotas(plane.pool))
        ),
        plane.caller,
    )


async def _agent_outputs(tmp_path: Path, session_id: str, bodies: list) -> list[runner_pb2.Output]:
    """The outputs as the agent's outbox stores (and stamps) them."""
    db = await Database.open(tmp_path / "agent.db")
    try:
        outbox = Outbox(db)
        for body in bodies:
            await outbox.append(session_id, "", body)
        return await outbox.pending({}, limit=100)
    finally:
        await db.close()


async def test_agent_events_carry_when_the_agent_produced_them(api, plane, tmp_path: Path) -> None:
    await plane.connect_agent()
    session = await create(api)
    message = runner_pb2.EngineMessage(type_name="SystemMessage", payload_json='{"subtype": "status"}')
    outputs = await _agent_outputs(
        tmp_path, session.session_id, [runner_pb2.RuntimeStarted(sandbox_id="sb", driver="local"), message]
    )
    assert all(o.HasField("produce_time") for o in outputs)
    result = await plane.committer.commit("agent-1", outputs)
    assert not result.refused

    page, code, _, _ = await api.unary("ListSessionEvents", pb.ListSessionEventsRequest(session_id=session.session_id))
    assert code is grpc.StatusCode.OK
    watched, _, _ = await api.server_stream(
        "WatchSessionEvents", pb.WatchSessionEventsRequest(session_id=session.session_id), count=len(page.events)
    )
    for events in (list(page.events), [r.event for r in watched]):
        by_kind = {e.kind: e for e in events}
        ready = by_kind[events_pb2.EVENT_KIND_RUNTIME_READY]
        engine = by_kind[events_pb2.EVENT_KIND_ENGINE_MESSAGE]
        # Exactly the agent's stamp, and never after the journal committed it.
        assert ready.produce_time == outputs[0].produce_time
        assert engine.produce_time == outputs[1].produce_time
        for event in (ready, engine):
            assert event.produce_time.ToDatetime() <= event.time.ToDatetime()
        # What the control plane made itself has none.
        for kind in (events_pb2.EVENT_KIND_SESSION_CREATED, events_pb2.EVENT_KIND_STARTUP_REQUESTED):
            assert not by_kind[kind].HasField("produce_time")

    view = Event.from_proto(engine)
    assert view.produce_time is not None and view.produce_time <= view.time
    assert view.produce_time == engine.produce_time.ToDatetime().replace(tzinfo=view.time.tzinfo)
    assert Event.from_proto(by_kind[events_pb2.EVENT_KIND_SESSION_CREATED]).produce_time is None


async def test_an_agent_stamp_no_timestamp_can_hold_is_left_out_not_refused(api, plane) -> None:
    await plane.connect_agent()
    session = await create(api)
    output = runner_pb2.Output(
        session_id=session.session_id, output_seq=1, runtime_started=runner_pb2.RuntimeStarted(sandbox_id="sb")
    )
    output.produce_time.seconds = 2**62  # far beyond year 9999
    result = await plane.committer.commit("agent-1", [output])
    assert not result.refused and result.committed[session.session_id] == 1

    page, _, _, _ = await api.unary("ListSessionEvents", pb.ListSessionEventsRequest(session_id=session.session_id))
    ready = next(e for e in page.events if e.kind == events_pb2.EVENT_KIND_RUNTIME_READY)
    assert not ready.HasField("produce_time")
