"""The engine's plain messages take a short way into the journal (one statement, the agent's JSON stored
as written) and everything else the long way: a session's outputs committed one by one, a batch mixing
sessions, tool calls opened and answered, its turn's end and a late message after it, and the same
outputs in two batches, journal the same events and leave the same session behind."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane import outputs as outputs_module
from tests.controlplane.test_conversation import api, ok, ready

__all__ = ["api"]  # the fixture

_SESSION_COLUMNS = (
    "state, current_turn_id, committed_output_seq, last_seq, engine_session_id, usage_input_tokens, usage_output_tokens"
)


def _engine(type_name: str, payload_json: str) -> dict[str, Any]:
    return {"engine_message": runner_pb2.EngineMessage(type_name=type_name, payload_json=payload_json)}


def _turn_outputs(turn: str) -> list[tuple[str, dict[str, Any]]]:
    """A turn's outputs as an agent reports them (turn id, body); the split marks the batch boundary."""
    return [
        (turn, _engine("SystemMessage", json.dumps({"subtype": "init", "data": {"session_id": "conv-1"}}))),
        # Written with spaces and an escape: journaled as the same JSON value either way.
        (turn, _engine("AssistantMessage", '{ "content": [ {"type_name": "TextBlock", "text": "h\\u00e9llo\\n✓"} ] }')),
        (turn, _engine("RateLimitEvent", '{"rate_limit_info": {"status": "allowed"}}')),
        ("", {"startup_phase": runner_pb2.StartupPhase(phase="engine", duration_ms=12)}),
        (turn, _engine("AssistantMessage", json.dumps({"content": _tool_uses("tu-1", "tu-2")}))),
        (
            turn,
            _engine(
                "UserMessage",
                json.dumps({"content": [{"type_name": "ToolResultBlock", "tool_use_id": "tu-1", "content": "ok"}]}),
            ),
        ),
        (turn, _engine("UserMessage", json.dumps({"content": "a plain string"}))),
        (turn, _engine("TaskProgressMessage", json.dumps({"task_id": "t-1", "usage": {}}))),
        (turn, _engine("AssistantMessage", json.dumps({"content": [{"type_name": "TextBlock", "text": "done"}]}))),
    ]


def _turn_end(turn: str) -> list[tuple[str, dict[str, Any]]]:
    result = {"subtype": "success", "duration_ms": 5, "result": "ok", "session_id": "conv-1"}
    result["usage"] = {"input_tokens": 7, "output_tokens": 3}
    return [(turn, _engine("ResultMessage", json.dumps(result)))]


def _late(turn: str) -> list[tuple[str, dict[str, Any]]]:
    """What the engine still says of the turn once it has ended (committed after its end)."""
    return [(turn, _engine("AssistantMessage", json.dumps({"content": [{"type_name": "TextBlock", "text": "late"}]})))]


def _tool_uses(*ids: str) -> list[dict[str, Any]]:
    return [{"type_name": "ToolUseBlock", "id": i, "name": "Bash", "input": {"command": "ls"}} for i in ids]


def _outputs(session_id: str, first_seq: int, items: list[tuple[str, dict[str, Any]]]) -> list[runner_pb2.Output]:
    outputs = []
    for seq, (turn, body) in enumerate(items, first_seq):
        output = runner_pb2.Output(session_id=session_id, output_seq=seq, turn_id=turn, **body)
        output.produce_time.FromMilliseconds(1_700_000_000_000 + seq)
        outputs.append(output)
    return outputs


async def _started_turn(api, plane, request_id: str) -> tuple[str, str]:
    session_id = await ready(api, plane, request_id)
    turn = (await ok(api, "SendMessage", session_id=session_id, client_message_id="m1", text="go")).turn_id
    return session_id, turn


async def _journal(plane, session_id: str, turn: str) -> list[tuple[Any, ...]]:
    rows = await plane.pool.fetch(
        "SELECT seq, kind, turn_id, payload, output_seq, produce_time FROM events WHERE session_id = $1 ORDER BY seq",
        session_id,
    )
    columns = ("kind", "turn_id", "payload", "output_seq", "produce_time")
    return [tuple(("T" if r[c] == turn else r[c]) if c == "turn_id" else r[c] for c in ("seq", *columns)) for r in rows]


async def _state(plane, session_id: str, turn: str) -> tuple[dict[str, Any], list[str]]:
    row = dict(await plane.pool.fetchrow(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE session_id = $1", session_id))
    row["current_turn_id"] = "T" if row["current_turn_id"] == turn else row["current_turn_id"]
    calls = await plane.pool.fetch(
        "SELECT tool_use_id FROM open_tool_calls WHERE session_id = $1 ORDER BY tool_use_id", session_id
    )
    return row, [c["tool_use_id"] for c in calls]


async def test_a_mixed_batch_journals_what_one_output_per_commit_journals(api, plane) -> None:
    one_by_one, turn_a = await _started_turn(api, plane, "one-by-one")
    batched, turn_b = await _started_turn(api, plane, "batched")
    plain, _ = await _started_turn(api, plane, "plain")
    texts = [("", _engine("StreamEvent", json.dumps({"n": n}))) for n in range(3)]
    start = (await _state(plane, batched, turn_b))[0]["last_seq"]  # what the outputs come after

    for output in _outputs(one_by_one, 2, _turn_outputs(turn_a)):
        assert not (await plane.committer.commit("agent-1", [output])).refused
    # The same turn in one batch, interleaved with another session's plain messages.
    batch = _outputs(batched, 2, _turn_outputs(turn_b))
    result = await plane.committer.commit("agent-1", _outputs(plain, 2, texts) + batch[::-1])
    assert result.committed == {batched: 10, plain: 4} and not result.refused

    assert await _state(plane, batched, turn_b) == await _state(plane, one_by_one, turn_a)
    open_calls = (await _state(plane, batched, turn_b))[1]
    assert open_calls == ["tu-2"]  # tu-1 was answered in the same batch

    for output in _outputs(one_by_one, 11, _turn_end(turn_a)):
        assert not (await plane.committer.commit("agent-1", [output])).refused
    await plane.committer.commit("agent-1", _outputs(batched, 11, _turn_end(turn_b)))
    assert not (await plane.committer.commit("agent-1", _outputs(one_by_one, 12, _late(turn_a)))).refused
    late_batch = _outputs(batched, 12, _late(turn_b)) + _outputs(plain, 5, texts[:1])
    assert (await plane.committer.commit("agent-1", late_batch)).committed == {batched: 12, plain: 5}

    journal = [event for event in await _journal(plane, batched, turn_b) if event[0] > start]
    assert journal == [event for event in await _journal(plane, one_by_one, turn_a) if event[0] > start]
    assert await _state(plane, batched, turn_b) == await _state(plane, one_by_one, turn_a)
    engine_messages = [payload for _, kind, _, payload, _, _ in journal if kind == "engine_message"]
    assert engine_messages[1] == {
        "type_name": "AssistantMessage",
        "message": {"content": [{"type_name": "TextBlock", "text": "héllo\n✓"}]},
    }
    assert engine_messages[-1]["late"] is True  # its turn had ended
    row, _ = await _state(plane, batched, turn_b)
    assert (row["state"], row["current_turn_id"], row["committed_output_seq"]) == ("ready", None, 12)
    assert (row["engine_session_id"], row["usage_input_tokens"]) == ("conv-1", 7)

    plain_journal = await _journal(plane, plain, "")
    assert [(kind, payload, seq) for _, kind, _, payload, seq, _ in plain_journal[-4:]] == [
        ("engine_message", {"type_name": "StreamEvent", "message": {"n": n}}, 2 + n) for n in (0, 1, 2)
    ] + [("engine_message", {"type_name": "StreamEvent", "message": {"n": 0}}, 5)]
    resent = await plane.committer.commit("agent-1", _outputs(plain, 2, texts))
    assert resent.committed == {plain: 5} and await _journal(plane, plain, "") == plain_journal


async def test_a_session_watched_here_takes_the_short_way_too_and_is_handed_its_events(api, plane, monkeypatch) -> None:
    watched, _ = await _started_turn(api, plane, "watched")
    unwatched, _ = await _started_turn(api, plane, "unwatched")
    texts = [("", _engine("StreamEvent", json.dumps({"n": n}))) for n in range(3)]
    short_way: list[set[str]] = []
    append_outputs = plane.journal.append_outputs

    async def spy(agent_id: str, runs: Any) -> dict[str, int]:
        short_way.append(set(runs))
        return await append_outputs(agent_id, runs)

    monkeypatch.setattr(plane.journal, "append_outputs", spy)
    with plane.live.subscribe(watched) as subscription:
        cursor = (await _state(plane, watched, ""))[0]["last_seq"]
        assert subscription.take(cursor) is None  # a new watcher reads the journal first
        batch = _outputs(watched, 2, texts) + _outputs(unwatched, 2, texts)
        assert (await plane.committer.commit("agent-1", batch)).committed == {watched: 4, unwatched: 4}
        handed = subscription.take(cursor)

    assert short_way == [{watched, unwatched}]
    assert handed is not None, "the watcher would have to read the journal"
    assert [e.seq for e in handed] == [cursor + 1, cursor + 2, cursor + 3]
    assert [json.loads(e.message_json) for e in handed] == [{"n": n} for n in range(3)]
    assert [e.output_seq for e in handed] == [2, 3, 4]
    # Both ways journal the same rows.
    assert [r[1:] for r in (await _journal(plane, watched, ""))[-3:]] == [
        r[1:] for r in (await _journal(plane, unwatched, ""))[-3:]
    ]


async def test_a_turn_settled_while_the_one_statement_way_waits_for_its_session_leaves_the_outputs_to_the_long_way(
    api, plane
) -> None:
    # The statement reads the turns in the snapshot it started with, before it waits for the session's
    # lock. A settle committed meanwhile ends the turn: the statement must see the session's row has
    # changed (its xmin) and leave it, or it would journal the turn's output as if the turn went on.
    session_id, turn = await _started_turn(api, plane, "raced")
    outputs = _outputs(session_id, 2, _late(turn))
    run = outputs_module._plain_run(outputs)
    assert run is not None
    async with plane.pool.acquire() as settle:
        async with settle.transaction():
            await settle.execute("SELECT 1 FROM sessions WHERE session_id = $1 FOR UPDATE", session_id)
            appended = asyncio.create_task(plane.journal.append_outputs("agent-1", {session_id: run}))
            async with asyncio.timeout(30):
                while not await plane.pool.fetchval("SELECT count(*) FROM pg_locks WHERE NOT granted"):
                    await asyncio.sleep(0.01)  # the statement waits for the session's row
            await settle.execute(
                "UPDATE turns SET state = 'completed' WHERE session_id = $1 AND turn_id = $2", session_id, turn
            )
            await settle.execute(
                "UPDATE sessions SET state = 'ready', current_turn_id = NULL WHERE session_id = $1", session_id
            )
        assert await appended == {}  # left untouched
    before = await _journal(plane, session_id, turn)
    assert (await _state(plane, session_id, turn))[0]["committed_output_seq"] == 1
    # The long way journals it late, as it does any output of a turn that had ended.
    assert (await plane.committer.commit("agent-1", outputs)).committed == {session_id: 2}
    journal = await _journal(plane, session_id, turn)
    assert len(journal) == len(before) + 1
    assert journal[-1][3]["late"] is True
