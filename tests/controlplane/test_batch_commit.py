"""One relay batch spanning several sessions commits as one transaction: each session's outputs are
journaled in order with contiguous seqs, exactly once (a resent batch adds nothing), an output that
changes the projection keeps its place among the plain ones, and a session with a gap is refused
alone while the others in the same batch go through."""

from __future__ import annotations

import json
import secrets

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane.kernel import CreateSession


def _text(session_id: str, seq: int) -> runner_pb2.Output:
    output = runner_pb2.Output(
        session_id=session_id,
        output_seq=seq,
        engine_message=runner_pb2.EngineMessage(
            type_name="AssistantMessage", payload_json=json.dumps({"content": [], "n": seq})
        ),
    )
    output.produce_time.FromSeconds(1_700_000_000 + seq)
    return output


async def _journal(plane, session_id: str) -> list[tuple[int, str, int | None]]:
    rows = await plane.pool.fetch(
        "SELECT seq, kind, output_seq FROM events WHERE session_id = $1 ORDER BY seq", session_id
    )
    return [(r["seq"], r["kind"], r["output_seq"]) for r in rows]


async def test_a_batch_of_several_sessions_journals_each_in_order_once(plane) -> None:
    await plane.connect_agent()
    sessions = [
        (await plane.kernel.create_session(CreateSession(request_id=secrets.token_hex(4), project_id=plane.project_id)))
        for _ in range(3)
    ]
    a, b, gapped = (s.session_id for s in sessions)
    before = {sid: await _journal(plane, sid) for sid in (a, b, gapped)}

    # Interleaved as an agent's outbox sends them: a's runtime starts in the middle of its text.
    started = runner_pb2.Output(
        session_id=a, output_seq=3, runtime_started=runner_pb2.RuntimeStarted(sandbox_id="sb", driver="local")
    )
    batch = [_text(a, 1), _text(b, 1), _text(a, 2), started, _text(b, 2), _text(a, 4), _text(gapped, 2)]
    result = await plane.committer.commit("agent-1", batch)

    assert result.committed == {a: 4, b: 2, gapped: 0}
    assert set(result.refused) == {gapped}
    journal_a = (await _journal(plane, a))[len(before[a]) :]
    assert [(kind, output_seq) for _, kind, output_seq in journal_a] == [
        ("engine_message", 1),
        ("engine_message", 2),
        ("runtime_ready", 3),
        ("engine_message", 4),
    ]
    first = len(before[a]) + 1
    assert [seq for seq, _, _ in journal_a] == list(range(first, first + 4))
    assert [output_seq for _, _, output_seq in (await _journal(plane, b))[len(before[b]) :]] == [1, 2]
    assert await _journal(plane, gapped) == before[gapped]
    state = await plane.pool.fetchval("SELECT state FROM sessions WHERE session_id = $1", a)
    assert state == "ready"  # the runtime_started output changed the projection
    produced = await plane.pool.fetchval("SELECT produce_time FROM events WHERE session_id = $1 AND output_seq = 4", a)
    assert produced.timestamp() == 1_700_000_004

    # The agent resends it all after a reconnect, with the gap filled: only the new output lands.
    again = await plane.committer.commit("agent-1", [*batch, _text(gapped, 1)])
    assert again.committed == {a: 4, b: 2, gapped: 2}
    assert not again.refused
    assert len(await _journal(plane, a)) == len(before[a]) + 4
    assert [o for _, _, o in (await _journal(plane, gapped))[len(before[gapped]) :]] == [1, 2]
    last_seq = await plane.pool.fetchval("SELECT last_seq FROM sessions WHERE session_id = $1", a)
    assert last_seq == len(before[a]) + 4
