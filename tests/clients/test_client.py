"""AstraBoxClient against real in-process gRPC servers on 127.0.0.1.

The servicer below implements only what each test needs; its watch streams
misbehave on purpose (abort, end, skip, repeat, die with the server).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from astrabox.client import WATCH_ADMITTED, AstraBoxClient, Backoff
from astrabox.errors import AstraBoxError, SessionStateError
from astrabox.sessionkernel.v1 import events_pb2, session_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as api
from astrabox.sessionkernel.v1 import session_kernel_service_pb2_grpc as api_grpc

SID = "3b0c4a52-0000-4000-8000-000000000001"
FAST = Backoff(initial=0.01, maximum=0.05)
State = session_pb2.SessionState

# One watch stream's behaviour: given the request's after_seq, the seqs to
# send and what to do then: "abort" (UNAVAILABLE), "conflict" (ABORTED),
# "reset" (INTERNAL without an ErrorInfo, as a cut stream reads), "internal"
# (the service's own INTERNAL), "end", or "hang".
StreamPlan = Callable[[int], tuple[list[int], str]]


def event(seq: int) -> events_pb2.SessionEvent:
    return events_pb2.SessionEvent(session_id=SID, seq=seq)


async def abort(context: grpc.aio.ServicerContext, code: grpc.StatusCode, reason: str, message: str, **md: str) -> None:
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.ErrorInfo(reason=reason, domain="astrabox.dev", metadata=md))
    status = status_pb2.Status(code=code.value[0], message=message, details=[detail])
    await context.abort_with_status(rpc_status.to_status(status))


class Kernel(api_grpc.SessionKernelServiceServicer):
    def __init__(self, plans: list[StreamPlan] | None = None, batches: bool = True) -> None:
        self.plans = plans or []
        # Whether watches that ask for several events per response get them (two at a time here),
        # or one per response in `event`, as a server that predates `events` answers.
        self.batches = batches
        self.watch_requests: list[int] = []
        self.requests: list[tuple[Any, dict[str, str]]] = []
        self.states: list[int] = [State.SESSION_STATE_READY]
        self.sessions = [session_pb2.Session(session_id=f"s{i}") for i in range(5)]
        # How many GetSession calls, from now on, answer UNAVAILABLE with this reason.
        self.unavailable = 0
        self.unavailable_reason = "DATABASE_UNAVAILABLE"

    async def WatchSessionEvents(self, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        self.watch_requests.append(request.after_seq)
        if request.session_id != SID:
            await abort(context, grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND", "no such session")
        plan = self.plans[min(len(self.watch_requests), len(self.plans)) - 1]
        seqs, then = plan(request.after_seq)
        if self.batches and request.max_events_per_response > 1:
            for i in range(0, len(seqs), 2):
                yield api.WatchSessionEventsResponse(events=[event(seq) for seq in seqs[i : i + 2]])
        else:
            for seq in seqs:
                yield api.WatchSessionEventsResponse(event=event(seq))
        if then == "abort":
            await context.abort(grpc.StatusCode.UNAVAILABLE, "going away")
        elif then == "conflict":
            await abort(context, grpc.StatusCode.ABORTED, "DATABASE_CONFLICT", "read again")
        elif then == "reset":
            await context.abort(grpc.StatusCode.INTERNAL, "Received RST_STREAM with error code 2")
        elif then == "internal":
            await abort(context, grpc.StatusCode.INTERNAL, "INTERNAL", "internal error (ref 1)", ref="1")
        elif then == "hang":
            await asyncio.Event().wait()

    async def GetSession(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.requests.append((request, dict(context.invocation_metadata() or ())))
        if self.unavailable:
            self.unavailable -= 1
            await abort(context, grpc.StatusCode.UNAVAILABLE, self.unavailable_reason, "the database cannot be reached")
        if request.session_id == "busy":
            await abort(
                context, grpc.StatusCode.FAILED_PRECONDITION, "SESSION_NOT_READY", "a turn is running", turn_id="t1"
            )
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        return api.GetSessionResponse(
            session=session_pb2.Session(session_id=request.session_id, state=state, failure_reason="no sandbox")
        )

    async def CreateSession(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.requests.append((request, dict(context.invocation_metadata() or ())))
        return api.CreateSessionResponse(session=session_pb2.Session(session_id=SID, request_id=request.request_id))

    async def SendMessage(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.requests.append((request, dict(context.invocation_metadata() or ())))
        return api.SendMessageResponse(turn_id="t1", seq=7)

    async def DownloadWorkspaceArchive(self, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        # The first chunk, then (while `unavailable` lasts) the database goes away mid-download.
        self.requests.append((request, dict(context.invocation_metadata() or ())))
        yield api.DownloadWorkspaceArchiveResponse(chunk=b"tar-")
        if self.unavailable:
            self.unavailable -= 1
            await abort(context, grpc.StatusCode.UNAVAILABLE, self.unavailable_reason, "the database cannot be reached")
        if request.path == "hang":
            await asyncio.Event().wait()
        yield api.DownloadWorkspaceArchiveResponse(chunk=b"bytes")

    async def RunCommand(self, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        self.requests.append((request, dict(context.invocation_metadata() or ())))
        if self.unavailable:
            self.unavailable -= 1
            await abort(context, grpc.StatusCode.UNAVAILABLE, self.unavailable_reason, "the database cannot be reached")
        yield api.RunCommandResponse(stdout=b"started\n")
        if request.command == "sleep forever":
            await asyncio.Event().wait()
        yield api.RunCommandResponse(exit_code=0)

    async def ListSessions(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        start = int(request.page_token or 0)
        end = start + request.page_size
        token = str(end) if end < len(self.sessions) else ""
        return api.ListSessionsResponse(sessions=self.sessions[start:end], next_page_token=token)


Serve = Callable[..., Awaitable[tuple[grpc.aio.Server, int]]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Starts a server for a servicer on a given port (or a free one); all are stopped after the test."""
    servers: list[grpc.aio.Server] = []

    async def start(servicer: Kernel, port: int = 0) -> tuple[grpc.aio.Server, int]:
        server = grpc.aio.server()
        api_grpc.add_SessionKernelServiceServicer_to_server(servicer, server)
        bound = server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        servers.append(server)
        return server, bound

    yield start
    for server in servers:
        await server.stop(None)


async def take(events: AsyncIterator[events_pb2.SessionEvent], n: int) -> list[int]:
    seqs: list[int] = []
    async with asyncio.timeout(10):
        async for ev in events:
            seqs.append(ev.seq)
            if len(seqs) == n:
                break
    return seqs


async def test_watch_yields_each_seq_once_across_unavailable_aborts(serve: Serve) -> None:
    # Each stream repeats the last delivered event, sends three new ones, then aborts.
    kernel = Kernel([lambda after: ([*range(max(after, 1), after + 4)], "abort")])
    _, port = await serve(kernel)
    async with AstraBoxClient.connect(f"127.0.0.1:{port}", reconnect=FAST) as client:
        assert await take(client.watch(SID), 20) == list(range(1, 21))
    assert kernel.watch_requests[:7] == [0, 3, 6, 9, 12, 15, 18]


async def test_watch_reads_a_server_that_sends_one_event_per_response(serve: Serve) -> None:
    kernel = Kernel([lambda after: ([*range(max(after, 1), after + 4)], "abort")], batches=False)
    _, port = await serve(kernel)
    async with AstraBoxClient.connect(f"127.0.0.1:{port}", reconnect=FAST) as client:
        assert await take(client.watch(SID), 10) == list(range(1, 11))
    assert kernel.watch_requests[:4] == [0, 3, 6, 9]


async def test_watch_resumes_after_a_gap_and_after_a_stream_that_ends(serve: Serve) -> None:
    kernel = Kernel([
        lambda after: ([1, 2, 4, 5], "hang"),  # seq 3 is missing
        lambda after: ([3, 4, 5], "end"),
        lambda after: ([6], "hang"),
    ])  # fmt: skip
    _, port = await serve(kernel)
    async with AstraBoxClient.connect(f"127.0.0.1:{port}", reconnect=FAST) as client:
        assert await take(client.watch(SID), 6) == [1, 2, 3, 4, 5, 6]
    assert kernel.watch_requests == [0, 2, 5]


async def test_watch_continues_across_a_server_restart_on_the_same_port(serve: Serve) -> None:
    first = Kernel([lambda after: ([*range(after + 1, 6)], "hang")])
    server, port = await serve(first)
    async with AstraBoxClient.connect(f"127.0.0.1:{port}", reconnect=FAST) as client:
        watch = client.watch(SID, after_seq=1)
        assert await take(watch, 4) == [2, 3, 4, 5]
        await server.stop(None)
        await asyncio.sleep(0.1)  # the client retries against a closed port meanwhile
        second = Kernel([lambda after: ([*range(after + 1, 9)], "hang")])
        await serve(second, port)
        assert await take(watch, 3) == [6, 7, 8]
        await watch.aclose()
    assert second.watch_requests == [5]


async def test_watch_raises_errors_that_resuming_cannot_fix(serve: Serve) -> None:
    _, port = await serve(Kernel([lambda after: ([after + 1], "internal")]))
    async with AstraBoxClient.connect(f"127.0.0.1:{port}", reconnect=FAST) as client:
        with pytest.raises(AstraBoxError) as raised:
            await take(client.watch("gone"), 1)
        assert raised.value.code == grpc.StatusCode.NOT_FOUND
        assert raised.value.reason == "SESSION_NOT_FOUND"
        # The service's own INTERNAL (it carries an ErrorInfo) is no cut stream: raised, after what came.
        watch = client.watch(SID)
        assert await take(watch, 1) == [1]
        with pytest.raises(AstraBoxError) as failed:
            await take(watch, 1)
    assert (failed.value.code, failed.value.reason) == (grpc.StatusCode.INTERNAL, "INTERNAL")


async def test_watch_resumes_after_aborted_and_after_a_stream_reset(serve: Serve) -> None:
    kernel = Kernel([
        lambda after: ([1, 2], "conflict"),
        lambda after: ([3], "reset"),
        lambda after: ([4, 5], "hang"),
    ])  # fmt: skip
    _, port = await serve(kernel)
    async with AstraBoxClient.connect(f"127.0.0.1:{port}", reconnect=FAST) as client:
        assert await take(client.watch(SID), 5) == [1, 2, 3, 4, 5]
    assert kernel.watch_requests == [0, 2, 3]


class Flapping(Kernel):
    """Every watch fails with UNAVAILABLE until `fails` have; `admit`: each is admitted (its headers
    sent) before it fails, as a server whose database drops its streams; else refused at once, as one
    whose database is away. Then event 1."""

    def __init__(self, fails: int, admit: bool) -> None:
        super().__init__()
        self.fails, self.admit = fails, admit

    async def WatchSessionEvents(self, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        self.watch_requests.append(request.after_seq)
        if self.admit:
            await context.send_initial_metadata(((WATCH_ADMITTED, "admitted"),))
        if len(self.watch_requests) <= self.fails:
            await asyncio.sleep(0.02)
            await abort(context, grpc.StatusCode.UNAVAILABLE, "DATABASE_UNAVAILABLE", "the database cannot be reached")
        yield api.WatchSessionEventsResponse(event=event(1))
        await asyncio.Event().wait()


async def test_watch_gives_up_only_after_failing_to_resume_for_give_up_after_seconds(serve: Serve) -> None:
    never_admitted = Flapping(fails=1000, admit=False)
    _, port = await serve(never_admitted)
    async with AstraBoxClient.connect(f"127.0.0.1:{port}", reconnect=FAST) as client:
        with pytest.raises(AstraBoxError) as raised:
            await take(client.watch(SID, give_up_after=0.5), 1)
    assert (raised.value.code, raised.value.reason) == (grpc.StatusCode.UNAVAILABLE, "DATABASE_UNAVAILABLE")
    assert len(never_admitted.watch_requests) > 1  # it did try again before it gave up

    # Streams that were admitted each time, though none delivered an event: the watch goes on, past
    # many times give_up_after (twenty streams, each open 20 ms, with pauses of 10-50 ms between).
    admitted = Flapping(fails=20, admit=True)
    _, port = await serve(admitted)
    async with AstraBoxClient.connect(f"127.0.0.1:{port}", reconnect=FAST) as client:
        assert await take(client.watch(SID, give_up_after=0.1), 1) == [1]
    assert len(admitted.watch_requests) == 21


async def test_calls_that_may_be_repeated_are_retried_while_unavailable_until_their_deadline(serve: Serve) -> None:
    kernel = Kernel()
    _, port = await serve(kernel)
    async with AstraBoxClient.connect(f"127.0.0.1:{port}", reconnect=FAST, timeout=30) as client:
        kernel.unavailable = 3
        assert (await client.get_session(SID)).session_id == SID
        assert len(kernel.requests) == 4

        # An UNAVAILABLE that asks for a person, not patience, is answered at once.
        kernel.requests.clear()
        kernel.unavailable, kernel.unavailable_reason = 3, "NO_AGENT_AVAILABLE"
        with pytest.raises(AstraBoxError) as refused:
            await client.get_session(SID)
        assert refused.value.reason == "NO_AGENT_AVAILABLE" and len(kernel.requests) == 1

    async with AstraBoxClient.connect(f"127.0.0.1:{port}", reconnect=FAST, timeout=0.5) as client:
        kernel.unavailable, kernel.unavailable_reason = 1_000_000, "DATABASE_UNAVAILABLE"
        with pytest.raises(AstraBoxError) as gave_up:
            await client.get_session(SID)
    assert (gave_up.value.code, gave_up.value.reason) == (grpc.StatusCode.UNAVAILABLE, "DATABASE_UNAVAILABLE")


async def test_a_download_cut_while_the_database_is_away_starts_again_and_one_that_hangs_has_a_deadline(
    serve: Serve,
) -> None:
    kernel = Kernel()
    _, port = await serve(kernel)
    async with AstraBoxClient.connect(f"127.0.0.1:{port}", reconnect=FAST, timeout=30) as client:
        kernel.unavailable = 3
        assert await client.download_archive(SID) == b"tar-bytes"  # whole, not the cut attempts' chunks too
        assert len(kernel.requests) == 4

        kernel.requests.clear()
        with pytest.raises(AstraBoxError) as out_of_time:
            await client.download_archive(SID, "hang", timeout=0.5)
    assert out_of_time.value.code == grpc.StatusCode.DEADLINE_EXCEEDED and len(kernel.requests) == 1


async def test_a_command_is_never_run_twice_and_one_that_outlives_its_timeout_has_a_deadline(serve: Serve) -> None:
    kernel = Kernel()
    _, port = await serve(kernel)
    async with AstraBoxClient.connect(f"127.0.0.1:{port}", reconnect=FAST, timeout=0.5) as client:
        kernel.unavailable = 1
        with pytest.raises(AstraBoxError) as refused:
            await client.run_command(SID, "make deploy")
        assert (refused.value.code, refused.value.reason) == (grpc.StatusCode.UNAVAILABLE, "DATABASE_UNAVAILABLE")
        assert len(kernel.requests) == 1  # not retried: the command may have run

        assert (await client.run_command(SID, "true")).exit_code == 0
        with pytest.raises(AstraBoxError) as out_of_time:
            await client.run_command(SID, "sleep forever", timeout=0.5)
    assert out_of_time.value.code == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_errors_carry_code_reason_and_message_from_error_info(serve: Serve) -> None:
    _, port = await serve(Kernel())
    async with AstraBoxClient.connect(f"127.0.0.1:{port}") as client:
        with pytest.raises(AstraBoxError) as raised:
            await client.get_session("busy")
    error = raised.value
    assert (error.code, error.reason, error.message) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "SESSION_NOT_READY",
        "a turn is running",
    )
    assert (error.domain, error.metadata) == ("astrabox.dev", {"turn_id": "t1"})


async def test_an_unreachable_server_is_an_error_without_a_reason(serve: Serve) -> None:
    server, port = await serve(Kernel())
    await server.stop(None)
    async with AstraBoxClient.connect(f"127.0.0.1:{port}", timeout=1) as client:
        with pytest.raises(AstraBoxError) as raised:
            await client.get_session(SID)
    assert raised.value.code == grpc.StatusCode.UNAVAILABLE and raised.value.reason == ""


async def test_ids_default_to_uuid4_and_the_api_key_is_sent(serve: Serve) -> None:
    kernel = Kernel()
    _, port = await serve(kernel)
    client = await AstraBoxClient.connect(f"127.0.0.1:{port}", api_key="k-123")
    try:
        session = await client.create_session(engine="claude_code", labels={"team": "a"})
        await client.create_session("my-request")
        sent = await client.send_message(SID, "hello")
    finally:
        await client.close()
    (create, metadata), (explicit, _), (message, _) = kernel.requests
    assert uuid.UUID(create.request_id).version == 4 and session.request_id == create.request_id
    assert (create.engine, dict(create.labels)) == ("claude_code", {"team": "a"})
    assert explicit.request_id == "my-request"
    assert uuid.UUID(message.client_message_id).version == 4 and message.text == "hello"
    assert (sent.turn_id, sent.seq) == ("t1", 7)
    assert metadata["authorization"] == "Bearer k-123"


async def test_iter_sessions_walks_every_page(serve: Serve) -> None:
    kernel = Kernel()
    _, port = await serve(kernel)
    async with AstraBoxClient.connect(f"127.0.0.1:{port}") as client:
        ids = [s.session_id async for s in client.iter_sessions(page_size=2)]
    assert ids == ["s0", "s1", "s2", "s3", "s4"]


async def test_wait_for_state_returns_once_the_session_gets_there(serve: Serve) -> None:
    kernel = Kernel([lambda after: ([after + 1], "hang")])
    kernel.states = [State.SESSION_STATE_CREATING, State.SESSION_STATE_READY]
    _, port = await serve(kernel)
    async with AstraBoxClient.connect(f"127.0.0.1:{port}") as client:
        # A new event makes it look again long before the next poll.
        session = await client.wait_for_state(SID, ["READY", State.SESSION_STATE_RUNNING], timeout=5, poll_interval=60)
        assert session.state == State.SESSION_STATE_READY

        kernel.states = [State.SESSION_STATE_CREATING]
        with pytest.raises(TimeoutError, match="CREATING"):
            await client.wait_for_state(SID, "READY", timeout=0.2, poll_interval=0.05)

        kernel.states = [State.SESSION_STATE_FAILED]
        with pytest.raises(SessionStateError, match="FAILED: no sandbox"):
            await client.wait_for_state(SID, "READY", timeout=5)
