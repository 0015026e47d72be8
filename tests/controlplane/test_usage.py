"""Usage and cost: each turn's tokens and dollars from the engine's result are journaled on the event
that ends it, and the session shows their sum, counted once, through moves, interrupts and late
results (controlplane.usage)."""

from __future__ import annotations

from decimal import Decimal

import grpc
import pytest

from astrabox.agents.v1 import agent_pb2 as apb
from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane.agent_definitions.definitions import AgentDefinitions
from controlplane.forwarding import read_cluster_secret
from controlplane.page_tokens import PageTokens
from tests.controlplane.test_conversation import api, engine, ok, ready, refused, session_of
from tests.controlplane.test_settles import history

__all__ = ["api"]  # the fixture, used by name


class Engine:
    """What Claude Code reports in its results: each turn's own tokens, and its conversation's
    running cost and token counts (which a new CLI in a new sandbox starts again)."""

    def __init__(self) -> None:
        self.cost = Decimal(0)
        self.tokens = 0

    def restart(self) -> None:
        self.cost, self.tokens = Decimal(0), 0

    def result(self, input_tokens: int, output_tokens: int, cost: str, cache_read: int = 0, **fields) -> dict:
        self.cost += Decimal(cost)
        self.tokens += input_tokens + output_tokens + cache_read
        return engine(
            "ResultMessage",
            subtype=fields.pop("subtype", "success"),
            is_error=False,
            duration_ms=5,
            result="ok",
            session_id="conv-1",
            usage={
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": cache_read,
                "service_tier": "standard",
            },
            total_cost_usd=float(self.cost),
            model_usage={
                "claude-opus-5-5": {
                    "inputTokens": self.tokens - output_tokens - cache_read,
                    "outputTokens": output_tokens,
                    "cacheReadInputTokens": cache_read,
                    "cacheCreationInputTokens": 0,
                    "costUSD": float(self.cost),
                }
            },
        )


async def send(api, sid: str, key: str) -> str:
    return (await ok(api, "SendMessage", session_id=sid, client_message_id=key, text=f"message {key}")).turn_id


def usage_of(event) -> tuple:
    u = getattr(event, event.WhichOneof("payload")).usage
    return (u.input_tokens, u.output_tokens, u.cache_read_input_tokens, round(u.cost_usd, 9), u.turns)


def totals(session) -> tuple:
    u = session.usage
    return (u.input_tokens, u.output_tokens, u.cache_read_input_tokens, round(u.cost_usd, 9), u.turns)


async def turn_ends(api, sid: str) -> list:
    ends = ("turn_completed", "turn_interrupted", "turn_failed")
    return [e for e in await history(api, sid) if e.WhichOneof("payload") in ends]


async def test_each_turn_journals_its_own_usage_and_the_session_shows_their_sum(api, plane):
    sid = await ready(api, plane)
    claude = Engine()
    for key, (tokens_in, tokens_out, cost, cached) in {
        "m1": (5473, 67, "0.023232", 0),
        "m2": (8740, 107, "0.0371", 1200),
        "m3": (6181, 69, "0.026104", 2400),
    }.items():
        turn = await send(api, sid, key)
        await plane.report(sid, turn, **claude.result(tokens_in, tokens_out, cost, cache_read=cached))

    ends = await turn_ends(api, sid)
    assert [usage_of(e) for e in ends] == [
        (5473, 67, 0, 0.023232, 1),
        (8740, 107, 1200, 0.0371, 1),  # the turn's share of the engine's running cost
        (6181, 69, 2400, 0.026104, 1),
    ]
    session = await session_of(api, sid)
    assert totals(session) == (5473 + 8740 + 6181, 67 + 107 + 69, 3600, 0.086436, 3)
    assert session.usage.cost_usd == float(claude.cost)  # what the engine says the conversation cost
    listed = (await ok(api, "ListSessions")).sessions
    assert totals(listed[0]) == totals(session)


async def test_a_result_sent_again_counts_once(api, plane):
    sid = await ready(api, plane)
    turn = await send(api, sid, "m1")
    output = runner_pb2.Output(session_id=sid, output_seq=plane.next_output[sid] + 1, turn_id=turn)
    output.engine_message.CopyFrom(Engine().result(100, 10, "0.5")["engine_message"])
    for _ in range(2):  # a resend after a reconnect
        assert not (await plane.committer.commit("agent-1", [output])).refused
    assert totals(await session_of(api, sid)) == (100, 10, 0, 0.5, 1)


async def test_a_session_moved_to_a_new_engine_keeps_its_totals_and_pays_each_turn_once(api, plane):
    sid = await ready(api, plane)
    claude = Engine()
    turn = await send(api, sid, "m1")
    await plane.report(sid, turn, **claude.result(1000, 10, "0.02"))
    # The agent goes away; the session moves to another, whose new CLI starts its totals again.
    await plane.pool.execute("UPDATE agents SET lease_expires_at = now() - interval '1 s'")
    await plane.sweeper.sweep()
    await plane.connect_agent("agent-2")
    turn = await send(api, sid, "m2")
    claude.restart()
    await plane.report(sid, agent_id="agent-2", runtime_started=runner_pb2.RuntimeStarted(sandbox_id="sb2"))
    # Its running cost (0.03) is above the old engine's (0.02): only the token count tells it started again.
    await plane.report(sid, turn, agent_id="agent-2", **claude.result(3000, 30, "0.03"))
    turn = await send(api, sid, "m3")
    await plane.report(sid, turn, agent_id="agent-2", **claude.result(500, 5, "0.01"))

    assert [usage_of(e)[3] for e in await turn_ends(api, sid)] == [0.02, 0.03, 0.01]
    assert totals(await session_of(api, sid)) == (4500, 45, 0, 0.06, 3)


async def test_a_turn_interrupted_by_its_result_counts_and_a_late_result_does_not(api, plane):
    sid = await ready(api, plane)
    claude = Engine()
    turn = await send(api, sid, "m1")
    await ok(api, "InterruptTurn", session_id=sid)
    await plane.report(sid, turn, **claude.result(200, 2, "0.004", subtype="error_during_execution"))
    # A turn nobody confirms stopping is settled at its deadline; its result comes later.
    late_turn = await send(api, sid, "m2")
    await ok(api, "InterruptTurn", session_id=sid)
    await plane.pool.execute("UPDATE sessions SET interrupt_deadline = now() - interval '1 s'")
    assert await plane.sweeper.sweep() == 1
    await plane.report(sid, late_turn, **claude.result(900, 9, "0.018"))
    turn = await send(api, sid, "m3")
    await plane.report(sid, turn, **claude.result(300, 3, "0.006"))

    ends = await turn_ends(api, sid)
    assert [(e.WhichOneof("payload"), usage_of(e)) for e in ends] == [
        ("turn_interrupted", (200, 2, 0, 0.004, 1)),
        ("turn_interrupted", (0, 0, 0, 0, 0)),  # settled by the deadline, with no result
        ("turn_completed", (300, 3, 0, 0.006, 1)),  # not charged for the late turn's 0.018
    ]
    late = [e for e in await history(api, sid) if e.turn_id == late_turn and e.engine_message.late]
    assert [e.engine_message.type_name for e in late] == ["ResultMessage"]  # kept for the record
    assert totals(await session_of(api, sid)) == (500, 5, 0, 0.01, 2)


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ({"usage": {"input_tokens": 7, "output_tokens": 3}}, (7, 3, 0, 0, 1)),  # no cost reported
        ({"usage": {"input_tokens": -5, "output_tokens": "3"}, "total_cost_usd": "a lot"}, (0, 0, 0, 0, 1)),
        ({"usage": None, "total_cost_usd": -1.5}, (0, 0, 0, 0, 1)),
        ({"usage": {"input_tokens": True}, "total_cost_usd": True}, (0, 0, 0, 0, 1)),
    ],
)
async def test_a_result_with_odd_usage_counts_what_makes_sense(api, plane, result, expected):
    sid = await ready(api, plane)
    turn = await send(api, sid, "m1")
    await plane.report(sid, turn, **engine("ResultMessage", subtype="success", result="ok", **result))
    assert totals(await session_of(api, sid)) == expected


async def test_a_session_that_spent_its_agents_budget_takes_no_more_messages(api, plane):
    definitions = AgentDefinitions(
        plane.pool, plane.agents, PageTokens.from_cluster_secret(await read_cluster_secret(plane.pool))
    )
    await plane.connect_agent()
    await definitions.create(
        plane.project_id, "a1", "thrifty", apb.AgentSpec(limits=apb.Limits(max_cost_usd_per_session=0.05))
    )
    sid = (await ok(api, "CreateSession", request_id="s1", agent="thrifty")).session.session_id
    await plane.runtime_started(sid)
    claude = Engine()
    turn = await send(api, sid, "m1")
    await plane.report(sid, turn, **claude.result(1000, 10, "0.03"))
    turn = await send(api, sid, "m2")  # 0.03 of 0.05: allowed
    await plane.report(sid, turn, **claude.result(1000, 10, "0.025"))

    code, reason, details = await refused(api, "SendMessage", session_id=sid, client_message_id="m3", text="more")
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "SESSION_BUDGET_EXHAUSTED")
    assert "$0.0550 of the $0.05" in details and "max_cost_usd_per_session" in details
    assert (await session_of(api, sid)).usage.turns == 2  # nothing was queued
    await send(api, sid, "m2")  # a retry of an accepted message still answers as before
    other = await ready(api, plane, request_id="s2")  # a session without the agent has no budget
    turn = await send(api, other, "m1")
    await plane.report(other, turn, **claude.result(1000, 10, "1.0"))
    await send(api, other, "m2")
