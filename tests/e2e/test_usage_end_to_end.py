"""Usage and cost with the real CLI: the tokens the model reported reach each turn's TURN_COMPLETED
and the session's totals, once each, also across an idle stop whose next CLI resumes the
conversation (and its running cost)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from astrabox.client import AstraBoxClient
from dataplane_agent.offline_model import OfflineModel
from tests.controlplane.test_quotas import astrabox
from tests.e2e.test_conversation_end_to_end import all_events, new_session, turn_end, until
from tests.support.stack import Stack, StartStack

pytestmark = pytest.mark.e2e

_FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


@pytest_asyncio.fixture
async def model() -> AsyncIterator[OfflineModel]:
    """The offline model in the test's own process, so the test reads what it reported."""
    async with OfflineModel() as offline:
        yield offline


@pytest.fixture
def metered_stack(stacks: StartStack, model: OfflineModel) -> Stack:
    return stacks(
        controlplane_args=("--idle-stop-after", "2"),
        env={"ASTRABOX_MODEL_BASE_URL": model.base_url, "ANTHROPIC_API_KEY": "sk-offline-test"},
    )


def added(reports: list[dict[str, int]]) -> tuple[int, ...]:
    return tuple(sum(r[name] for r in reports) for name in _FIELDS)


def tokens(usage) -> tuple[int, ...]:
    return tuple(getattr(usage, name) for name in _FIELDS)


async def test_usage_totals_are_the_sum_of_what_the_model_reported(metered_stack: Stack, model: OfflineModel) -> None:
    async with AstraBoxClient.connect(metered_stack.address) as client:
        session = await new_session(client, permission_mode="bypassPermissions")
        sid = session.session_id
        per_turn = []
        for key, text in [("m1", "run: echo one"), ("m2", "steps: 2"), ("stop", ""), ("m3", "run: echo three")]:
            if key == "stop":  # the CLI is stopped while idle; the next one resumes the conversation
                await until(client, sid, 0, lambda e: e.WhichOneof("payload") == "runtime_stopped")
                continue
            before = len(model.reported_usage)
            accepted = await client.send_message(sid, text, client_message_id=key)
            events = await until(client, sid, accepted.seq, turn_end(accepted.turn_id))
            assert events[-1].WhichOneof("payload") == "turn_completed", events[-1]
            per_turn.append((events[-1].turn_completed.usage, model.reported_usage[before:]))

        for usage, reports in per_turn:
            assert usage.turns == 1 and usage.cost_usd > 0
            assert tokens(usage) == added(reports), (usage, reports)
        assert any(usage.cache_read_input_tokens for usage, _ in per_turn)  # the prompt cache at work
        session = await client.get_session(sid)
        assert session.usage.turns == 3
        assert tokens(session.usage) == added([r for _, reports in per_turn for r in reports])
        assert session.usage.cost_usd == pytest.approx(sum(usage.cost_usd for usage, _ in per_turn), rel=1e-12)
        results = [
            json.loads(e.engine_message.payload_json)
            for e in await all_events(client, sid)
            if e.WhichOneof("payload") == "engine_message" and e.engine_message.type_name == "ResultMessage"
        ]
        # The resumed CLI carried on with the conversation's running cost: the session's is the same.
        assert session.usage.cost_usd == pytest.approx(results[-1]["total_cost_usd"], rel=1e-12)
        listed = await client.list_sessions()
        assert [tokens(s.usage) for s in listed.sessions] == [tokens(session.usage)]

        # `astrabox session list` shows it, filtered by state, label and creation time.
        other = await client.create_session(labels={"team": "blue"})
        target = ("--target", metered_stack.address)
        code, out, err = await astrabox("session", *target, "list", "--state", "ready,creating", "--since", "1h")
        assert code == 0, err
        [line] = [line for line in out.splitlines() if line.startswith(sid)]
        assert "3 turns" in line and f"${session.usage.cost_usd:.4f}" in line
        assert f"{tokens(session.usage)[1]:,} out" in line
        assert other.session_id in out
        code, out, err = await astrabox("session", *target, "list", "--label", "team=blue", "--label", "!gone")
        assert (code, [line.split()[0] for line in out.splitlines()]) == (0, [other.session_id]), err
        code, out, _ = await astrabox("session", *target, "list", "--state", "archived")
        assert (code, out) == (0, "")
        code, _, err = await astrabox("session", *target, "list", "--label", "team=blue,")
        assert code == 1 and "requirement 2" in err, err
        code, _, err = await astrabox("session", *target, "list", "--state", "sleeping")
        assert code == 2 and "'sleeping' is no session state" in err, err
