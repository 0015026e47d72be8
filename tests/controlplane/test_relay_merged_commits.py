"""An agent's output batches that queue up while the control plane commits are committed together in
the next transaction, in order, each output once, acknowledged by one cumulative OutputAck; a message
that came between them waits for the batches before it."""

from __future__ import annotations

import asyncio
import secrets

import structlog

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane.deltas import DeltaHub
from controlplane.environments.builds import BuildProgressHub
from controlplane.kernel import CreateSession
from controlplane.outputs import OutputCommitter
from controlplane.relay import _AgentStream
from controlplane.workspace import WorkspaceRouter


def _batch(session_id: str, *seqs: int) -> runner_pb2.ConnectRequest:
    outputs = [
        runner_pb2.Output(
            session_id=session_id,
            output_seq=seq,
            engine_message=runner_pb2.EngineMessage(type_name="AssistantMessage", payload_json=f'{{"n": {seq}}}'),
        )
        for seq in seqs
    ]
    return runner_pb2.ConnectRequest(output_batch=runner_pb2.OutputBatch(outputs=outputs))


async def test_batches_queued_during_a_commit_share_the_next_one(plane, monkeypatch) -> None:
    await plane.connect_agent()
    session = await plane.kernel.create_session(
        CreateSession(request_id=secrets.token_hex(4), project_id=plane.project_id)
    )
    sid = session.session_id
    await plane.runtime_started(sid)  # output 1

    # The real committer, held at its first commit until the test lets it go.
    calls: list[list[int]] = []
    release = asyncio.Event()
    original = OutputCommitter.commit

    async def held(committer, agent_id, outputs):
        calls.append([o.output_seq for o in outputs])
        if len(calls) == 1:
            await release.wait()
        return await original(committer, agent_id, outputs)

    monkeypatch.setattr(OutputCommitter, "commit", held)
    verdicts: list[int] = []

    class Verdicts:
        async def record(self, agent_id, command_seq, error, verdict) -> None:
            # By the time a command's acknowledgement is recorded, the outputs sent before it are.
            row = await plane.pool.fetchrow("SELECT committed_output_seq FROM sessions WHERE session_id = $1", sid)
            verdicts.append(row["committed_output_seq"])
            assert command_seq == 7

    stream = _AgentStream(
        "agent-1",
        None,  # the lease and its keeper: not this test's (only `_process` runs)
        plane.agents,
        None,
        plane.committer,
        Verdicts(),
        plane.live,
        WorkspaceRouter(),
        structlog.get_logger(),
        DeltaHub(),
        BuildProgressHub(),
    )
    inbox = stream._inbox
    inbox.put_nowait(_batch(sid, 2))
    processing = asyncio.create_task(stream._process())
    try:
        async with asyncio.timeout(10):
            while not calls:
                await asyncio.sleep(0.01)
        # While output 2 commits, the agent sends 3, then 4 and 5, then 6 and a resent 5, then a
        # command's acknowledgement, then 7.
        for request in (
            _batch(sid, 3),
            _batch(sid, 4, 5),
            _batch(sid, 5, 6),
            runner_pb2.ConnectRequest(command_ack=runner_pb2.CommandAck(command_seq=7)),
            _batch(sid, 7),
        ):
            inbox.put_nowait(request)
        release.set()
        async with asyncio.timeout(10):
            while len(calls) < 3:
                await asyncio.sleep(0.01)
            while (
                not inbox.empty()
                or (await plane.pool.fetchval("SELECT committed_output_seq FROM sessions WHERE session_id = $1", sid))
                < 7
            ):
                await asyncio.sleep(0.01)
    finally:
        processing.cancel()
        await asyncio.gather(processing, return_exceptions=True)

    assert calls == [[2], [3, 4, 5, 5, 6], [7]]
    assert verdicts == [6]
    events = await plane.journal.read(sid, 0, 100)
    assert [e.output_seq for e in events if e.output_seq is not None and e.output_seq > 1] == [2, 3, 4, 5, 6, 7]
    acks = []
    while not stream._outgoing.empty():
        acks.append(stream._outgoing.get_nowait().output_ack)
    assert [[(c.session_id, c.output_seq) for c in a.committed] for a in acks] == [[(sid, 2)], [(sid, 6)], [(sid, 7)]]
