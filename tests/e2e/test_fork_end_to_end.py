"""ForkSession end to end: real PostgreSQL, control plane and agent processes, the real bundled CLI in
the local sandbox against the offline model (its `report: history` script says which prompts the
conversation it was given holds), and the real `astrabox` command.

A session runs two turns that write files; a fork at the end of the first turn resumes a
conversation that holds the first prompt only, with the files as the source has them; the source
is unchanged and goes on; the refusals carry their documented codes and reasons; a retry with the
same request_id returns the same fork.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import grpc
import pytest

from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from astrabox.sessionkernel.v1 import events_pb2, session_pb2
from tests.support.stack import Stack, StartStack

pytestmark = pytest.mark.e2e

TIMEOUT = 120
FIRST = "run: echo alpha-41 > fact1.txt && cat fact1.txt"
SECOND = "run: echo beta-42 > fact2.txt && cat fact2.txt"


def astrabox(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "astrabox", args[0], "--target", stack.address, *args[1:]],
        capture_output=True,
        text=True,
        timeout=TIMEOUT * 3,
        stdin=subprocess.DEVNULL,
    )


async def turn(client: AstraBoxClient, session_id: str, text: str) -> tuple[int, int, str]:
    """Send `text` and wait for its turn to complete: its accepted seq, the TURN_COMPLETED seq and result."""
    accepted = await client.send_message(session_id, text)
    async with asyncio.timeout(TIMEOUT):
        async for event in client.watch(session_id, after_seq=accepted.seq):
            if event.turn_id == accepted.turn_id and event.WhichOneof("payload") in ("turn_completed", "turn_failed"):
                assert event.WhichOneof("payload") == "turn_completed", event
                return accepted.seq, event.seq, event.turn_completed.result
    raise AssertionError("watch ended")


async def events(client: AstraBoxClient, session_id: str) -> list[events_pb2.SessionEvent]:
    return [e async for e in client.iter_events(session_id)]


async def refused(call) -> AstraBoxError:  # type: ignore[no-untyped-def]
    with pytest.raises(AstraBoxError) as caught:
        await call
    return caught.value


async def test_a_fork_at_a_turn_end_resumes_that_conversation_with_the_files_and_leaves_the_source(
    client: AstraBoxClient, stack: Stack
) -> None:
    source = await client.create_session()
    sid = (await client.wait_for_state(source.session_id, ["READY"], timeout=TIMEOUT)).session_id
    _, first_end, first_result = await turn(client, sid, FIRST)
    assert "alpha-41" in first_result
    second_accepted, second_end, _ = await turn(client, sid, SECOND)
    before = await events(client, sid)

    # Refusals: inside a turn, past the end, an unknown session, another project's session.
    mid = await refused(client.fork_session(sid, second_accepted))
    assert (mid.code, mid.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "FORK_POINT_NOT_AT_TURN_END")
    assert mid.metadata["kind"] == "user_message_accepted"
    beyond = await refused(client.fork_session(sid, before[-1].seq + 100))
    assert (beyond.code, beyond.reason) == (grpc.StatusCode.OUT_OF_RANGE, "FORK_POINT_BEYOND_END")
    unknown = await refused(client.fork_session("00000000-0000-4000-8000-000000000000"))
    assert (unknown.code, unknown.reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")
    team = await client.admin.create_project("fork-other")
    key = await client.admin.create_api_key("other-dev", role="developer", project_id=team.project_id)
    async with AstraBoxClient.connect(stack.address, api_key=key.secret) as other_project:
        foreign = await refused(other_project.fork_session(sid, first_end))
        assert (foreign.code, foreign.reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")
    assert [e.seq for e in await events(client, sid)] == [e.seq for e in before]  # refusals changed nothing

    # The fork, by the command line, at the end of the first turn.
    done = astrabox(stack, "session", "fork", sid, "--at", str(first_end), "--label", "branch=alpha")
    assert done.returncode == 0, done.stderr
    fork_id = done.stdout.split()[0]
    assert f"forked from {sid} at seq {first_end}" in done.stdout
    fork = await client.get_session(fork_id)
    assert fork.state == session_pb2.SESSION_STATE_READY
    assert (fork.forked_from.session_id, fork.forked_from.through_seq) == (sid, first_end)
    assert dict(fork.labels) == {"branch": "alpha"}
    created = (await events(client, fork_id))[0]
    assert created.WhichOneof("payload") == "session_created"
    assert (created.session_created.forked_from.session_id, created.session_created.forked_from.through_seq) == (
        sid,
        first_end,
    )
    shown = astrabox(stack, "session", "show", fork_id)
    assert f"forked from  session {sid} at seq {first_end}" in shown.stdout, shown.stdout

    # The files are the source's (as they are now: both turns' files), the conversation only the first turn.
    files = await client.run_command(fork_id, "cat fact1.txt fact2.txt")
    assert files.stdout.decode() == "alpha-41\nbeta-42\n"
    _, _, recalled = await turn(client, fork_id, "report: history")
    assert "alpha-41" in recalled and "beta-42" not in recalled, recalled

    # The source: its journal as it was, plus SESSION_FORKED; it goes on with its whole conversation.
    after = await events(client, sid)
    assert [e.SerializeToString() for e in after[: len(before)]] == [e.SerializeToString() for e in before]
    [forked] = after[len(before) :]
    assert forked.kind == events_pb2.EVENT_KIND_SESSION_FORKED
    assert (forked.session_forked.fork_session_id, forked.session_forked.through_seq) == (fork_id, first_end)
    _, _, whole = await turn(client, sid, "report: history")
    assert "alpha-41" in whole and "beta-42" in whole, whole
    # The fork's own turn wrote nothing into the source, nor the source's into the fork.
    await turn(client, fork_id, "run: echo gamma > fact3.txt")
    assert (await client.run_command(sid, "ls")).stdout.decode().split() == ["fact1.txt", "fact2.txt"]

    # Idempotent: the same request_id returns the same fork; with another point it is refused.
    again = await client.fork_session(sid, first_end, request_id="fork-once")
    assert (await client.fork_session(sid, first_end, request_id="fork-once")).session_id == again.session_id
    assert again.session_id != fork_id
    reused = await refused(client.fork_session(sid, second_end, request_id="fork-once"))
    assert (reused.code, reused.reason) == (grpc.StatusCode.ALREADY_EXISTS, "REQUEST_ID_REUSED")
    # By default: the last completed turn.
    latest = await client.fork_session(sid)
    assert latest.forked_from.through_seq == max(
        e.seq for e in await events(client, sid) if e.WhichOneof("payload") == "turn_completed"
    )


async def test_a_source_stopped_while_idle_is_refused_before_any_fork_exists(stacks: StartStack) -> None:
    stack = stacks(controlplane_args=("--idle-stop-after", "2"))
    async with AstraBoxClient.connect(stack.address) as client:
        source = await client.create_session()
        sid = (await client.wait_for_state(source.session_id, ["READY"], timeout=TIMEOUT)).session_id
        accepted, _, _ = await turn(client, sid, FIRST)
        async with asyncio.timeout(60):
            async for event in client.watch(sid, after_seq=accepted):
                if event.WhichOneof("payload") == "runtime_stopped":
                    break
        stopped = await refused(client.fork_session(sid))
        assert (stopped.code, stopped.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "RUNTIME_NOT_AVAILABLE")
        assert "stopped while idle" in str(stopped)
        assert [s.session_id for s in (await client.list_sessions()).sessions] == [sid]
