"""ForkSession in the control plane (real PostgreSQL, the servicer through grpcio-testing, agent outputs
committed as the relay does): which transcript a fork resumes, and when a fork point is refused.

The forks here never get a runtime (ready_timeout 0: the call returns the new session as it is), so
no files are copied; tests/e2e/test_fork_end_to_end.py copies them with a real agent."""

from __future__ import annotations

import uuid

import grpc
import pytest_asyncio

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as pb
from controlplane import store
from controlplane.api import SessionKernelServicer
from controlplane.forks import Forks
from controlplane.identity.callers import Caller, Role
from controlplane.journal import EventKind
from controlplane.quotas import Quotas
from controlplane.workspace import WorkspaceFiles, WorkspaceRouter
from tests.controlplane.test_conversation import commands, finish_turn, ok, ready, refused
from tests.controlplane.test_quotas import team
from tests.controlplane.test_web_api import KERNEL, bearer, create_session, http, reason, web  # noqa: F401
from tests.support.grpc_testing_bridge import ServicerHarness

SERVICE = pb.DESCRIPTOR.services_by_name["SessionKernelService"]


def harness(plane, caller: Caller) -> ServicerHarness:
    workspace = WorkspaceFiles(plane.kernel, WorkspaceRouter(), Quotas(plane.pool))
    forks = Forks(plane.pool, plane.kernel, plane.journal, workspace, ready_timeout=0)
    return ServicerHarness(SERVICE, SessionKernelServicer(plane.kernel, plane.conversation, workspace, forks), caller)


@pytest_asyncio.fixture
async def api(plane) -> ServicerHarness:
    return harness(plane, plane.caller)


async def completed_turn(api, plane, sid: str, text: str, transcript: bytes | None) -> int:
    """A turn that completes, then (unless None) the transcript snapshot the agent sends after it; the
    seq of its TURN_COMPLETED event."""
    turn = (await ok(api, "SendMessage", session_id=sid, client_message_id=text, text=text)).turn_id
    await finish_turn(plane, sid, turn)
    if transcript is not None:
        snapshot = runner_pb2.TranscriptSnapshot(engine_session_id="conv-1", content=transcript)
        await plane.report(sid, turn, transcript_snapshot=snapshot)
    events = await plane.journal.read(sid, 0, 1000)
    return next(e.seq for e in events if e.kind is EventKind.TURN_COMPLETED and e.turn_id == turn)


def start_of(fork_commands: list[runner_pb2.Command]) -> runner_pb2.StartRuntime:
    [start] = [c.start_runtime for c in fork_commands if c.HasField("start_runtime")]
    return start


async def test_a_fork_resumes_the_transcript_as_it_stood_when_its_turn_ended(api, plane):
    sid = await ready(api, plane)
    first = await completed_turn(api, plane, sid, "one", b'{"n": 1}\n')
    second = await completed_turn(api, plane, sid, "two", b'{"n": 1}\n{"n": 2}\n')

    at_first = (await ok(api, "ForkSession", session_id=sid, request_id="f1", through_seq=first)).session
    assert (at_first.forked_from.session_id, at_first.forked_from.through_seq) == (sid, first)
    start = start_of(await commands(plane, at_first.session_id))
    assert (start.resume_engine_session_id, start.transcript) == ("conv-1", b'{"n": 1}\n')
    async with plane.pool.acquire() as conn:  # its own, should its sandbox be lost before its first turn ends
        kept = await store.engine_transcripts.find(conn, at_first.session_id)
    assert kept is not None and kept.content == b'{"n": 1}\n'

    latest = (await ok(api, "ForkSession", session_id=sid, request_id="f2")).session
    assert latest.forked_from.through_seq == second
    assert start_of(await commands(plane, latest.session_id)).transcript == b'{"n": 1}\n{"n": 2}\n'
    # The source's journal says where each fork went.
    forked = [e.payload for e in await plane.journal.read(sid, 0, 1000) if e.kind is EventKind.SESSION_FORKED]
    assert [(f["fork_session_id"], f["through_seq"]) for f in forked] == [
        (at_first.session_id, first),
        (latest.session_id, second),
    ]


async def test_fork_points_without_the_transcript_of_their_turn_are_refused(api, plane):
    sid = await ready(api, plane)
    first = await completed_turn(api, plane, sid, "one", b'{"n": 1}\n')
    # The turn ended, its snapshot has not come yet: retry in a moment.
    pending = await completed_turn(api, plane, sid, "two", None)
    code, reason, details = await refused(api, "ForkSession", session_id=sid, request_id="f1", through_seq=pending)
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "FORK_POINT_NOT_AVAILABLE")
    assert "retry in a moment" in details
    # The engine started its transcript afresh: the first turn's is no longer in it.
    await completed_turn(api, plane, sid, "three", b'{"other": 1}\n')
    code, reason, _ = await refused(api, "ForkSession", session_id=sid, request_id="f2", through_seq=first)
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "FORK_POINT_NOT_AVAILABLE")
    # Nothing was created by the refusals.
    assert [s.session_id for s in (await ok(api, "ListSessions")).sessions] == [sid]


async def test_a_source_running_a_turn_or_of_another_project_is_refused(api, plane):
    sid = await ready(api, plane)
    first = await completed_turn(api, plane, sid, "one", b'{"n": 1}\n')
    await ok(api, "SendMessage", session_id=sid, client_message_id="m2", text="running")
    code, reason, _ = await refused(api, "ForkSession", session_id=sid, request_id="f1", through_seq=first)
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "FORK_SOURCE_BUSY")
    # The project is checked by the fork itself too (the edge's tenancy check is not in this harness).
    stranger = Caller(uuid.uuid4(), "other", Role.ADMIN, "testkey00000000b")
    code, reason, _ = await refused(
        harness(plane, stranger), "ForkSession", session_id=sid, request_id="f2", through_seq=first
    )
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")
    code, reason, _ = await refused(api, "ForkSession", session_id=sid, request_id="f3", through_seq=-1)
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")


async def test_the_web_api_serves_fork_session(web, http, api_key):
    """The web gateway forwards every SessionKernelService method, ForkSession too, with its refusals."""
    sid = await create_session(http, api_key)
    body = {"sessionId": sid, "requestId": "web-fork"}
    async with http.post(f"{KERNEL}/ForkSession", json=body, headers=bearer(api_key)) as response:
        error = await response.json()
    assert (response.status, error["code"]) == (400, "failed_precondition"), error
    assert reason(error) == "FORK_POINT_NOT_AT_TURN_END"
    _, developer, _ = await team(web.address)
    async with http.post(f"{KERNEL}/ForkSession", json=body, headers=bearer(developer)) as response:
        assert response.status == 404
        assert reason(await response.json()) == "SESSION_NOT_FOUND"
