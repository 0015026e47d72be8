"""Engine messages too large for the relay are sent with their longest strings elided: the rest of
the message (types, ids, tool calls, short texts) intact, the whole within the cap in UTF-8 bytes,
whatever shape a hostile or careless engine gives it; a message within the cap goes unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dataplane_agent.engines.base import EngineOutput
from dataplane_agent.turns.elision import ELIDED_KEY, fitted_json
from dataplane_agent.turns.ledger import TurnLimits
from tests.dataplane_agent.fakes import (
    DirectorySandboxDriver,
    ScriptedEngine,
    deliver,
    init,
    result,
    running_agent,
    start,
)

CAP = 1024 * 1024


def size(text: str) -> int:
    return len(text.encode())


def tool_result(content: object) -> dict:
    return {"content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": content, "is_error": False}]}


def test_a_message_within_the_cap_is_the_plain_json() -> None:
    payload = tool_result("x" * 1000)
    assert fitted_json(payload, CAP) == (json.dumps(payload), 0)


@pytest.mark.parametrize(
    "payload",
    [
        # One image a tool read: 3 MB of base64.
        tool_result([{"type": "image", "source": {"type": "base64", "data": "iVBORw0KGgo" * 300_000}}]),
        # Four-byte characters: 1.2 MB of UTF-8 in 300,000 characters, ASCII-escaped by json.dumps.
        tool_result("🚀" * 300_000),
        # Many middling strings, none alone over the cap.
        tool_result([{"type": "text", "text": str(n) * 300_000} for n in range(10)]),
        # Deep nesting, the long string at the bottom.
        {"content": [{"a": {"b": [{"c": [[["z" * 2_000_000]]]}]}}], "tool_use_id": "toolu_01"},
        # Countless small strings: eliding long ones cannot make it fit.
        {"content": ["ab"] * 500_000, "tool_use_id": "toolu_01", "subtype": "success"},
        # A huge key.
        {"k" * 2_000_000: 1, "tool_use_id": "toolu_01"},
        # A top-level list.
        ["y" * 2_000_000, "toolu_01"],
    ],
    ids=["image", "four-byte", "middling", "deep", "countless", "huge-key", "list"],
)
def test_a_message_over_the_cap_fits_and_keeps_what_is_short(payload: object) -> None:
    text, elided = fitted_json(payload, CAP)
    assert size(text) <= CAP
    assert elided > 0
    data = json.loads(text)
    if isinstance(data, dict):
        assert data[ELIDED_KEY] > 0
        assert data.get("tool_use_id", "toolu_01") == "toolu_01"
        if "content" in data and isinstance(data["content"], list) and isinstance(data["content"][0], dict):
            block = data["content"][0]
            assert block.get("tool_use_id", "toolu_01") == "toolu_01"  # what the control plane reads


def test_only_as_much_as_needed_is_elided() -> None:
    payload = {"content": [{"type": "text", "text": "a" * 900_000}, {"type": "text", "text": "b" * 600_000}]}
    data = json.loads(fitted_json(payload, CAP)[0])
    assert data["content"][0]["text"] == "[900002 bytes elided by AstraBox]"
    assert data["content"][1]["text"] == "b" * 600_000  # the longest went; this one fits beside the rest


async def test_the_agent_sends_an_oversized_engine_message_elided_and_the_turn_still_ends(tmp_path: Path) -> None:
    huge = EngineOutput(
        "UserMessage",
        tool_result([{"type": "image", "source": {"type": "base64", "data": "iVBORw0KGgo" * 300_000}}]),
    )
    engine = ScriptedEngine([init("eng-1"), huge, result("eng-1")])
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver, TurnLimits(engine_message_cap=CAP)) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        outputs = await agent.wait_for("s-1", "ResultMessage")
        [sent] = [o for o in outputs if o.HasField("engine_message") and o.engine_message.type_name == "UserMessage"]
        assert size(sent.engine_message.payload_json) <= CAP
        data = json.loads(sent.engine_message.payload_json)
        assert data["content"][0]["tool_use_id"] == "toolu_01"
        assert data["content"][0]["content"][0]["source"]["data"].endswith("bytes elided by AstraBox]")
        assert data[ELIDED_KEY] > 3_000_000
        assert sent.turn_id == "t-1"
