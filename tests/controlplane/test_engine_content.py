"""The typed view of engine messages (EngineMessage.content) and of an interaction's tool input
(Interaction.input), as a client reads them from a real control plane over gRPC on a real PostgreSQL:
the same view from ListSessionEvents and from both kinds of WatchSessionEvents; none when asked for
none; none, with the JSON intact and the read never failing, for payloads that cannot be read
safely; list pages that stay within what a gRPC client takes with their views; and agents' engine
messages that are no JSON object journaled without failing their commit."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from google.protobuf import json_format

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from astrabox.sessionkernel.v1 import events_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as pb
from astrabox.sessionkernel.v1 import session_kernel_service_pb2_grpc as pb_grpc
from controlplane import engine_content
from controlplane.conversation import SendMessage
from controlplane.kernel import CreateSession
from controlplane.server import RunningControlPlane
from tests.controlplane.conftest import Plane
from tests.support import auth

# What a gRPC client accepts by default.
CLIENT_LIMIT = 4 * 1024 * 1024

TOOL_INPUT = {"command": "ls -la /workspace", "timeout": 5000, "flags": ["-a", 2.5, True], "env": {"X": None}}

# One turn as the agent relays the SDK's messages (dataplane_agent.engines.sdk_messages).
TURN = [
    ("SystemMessage", {"subtype": "init", "data": {"model": "claude-sonnet-4-5", "cwd": "/workspace"}}),
    (
        "AssistantMessage",
        {
            "content": [
                {"type_name": "ThinkingBlock", "thinking": "The user wants a listing.", "signature": "s1"},
                {"type_name": "TextBlock", "text": "Listing <b>files</b> …"},
                {"type_name": "ToolUseBlock", "id": "toolu_1", "name": "Bash", "input": TOOL_INPUT},
                {"type_name": "ServerToolUseBlock", "id": "srv_1", "name": "web_search", "input": {"q": "x"}},
            ],
            "model": "claude-sonnet-4-5",
            "parent_tool_use_id": None,
            "error": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
            "message_id": "msg_1",
        },
    ),
    (
        "UserMessage",
        {
            "content": [
                {
                    "type_name": "ToolResultBlock",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "total 0"}, {"type": "text", "text": "drwx ."}],
                    "is_error": True,
                }
            ],
            "parent_tool_use_id": "toolu_task",
            "tool_use_result": {"stdout": "total 0"},
        },
    ),
    ("UserMessage", {"content": "a prompt as plain text", "parent_tool_use_id": None}),
    (
        "ResultMessage",
        {
            "subtype": "error_max_turns",
            "is_error": True,
            "result": "stopped early",
            "errors": ["max turns reached"],
            "duration_ms": 12,
            "num_turns": 3,
            "session_id": "engine-1",
        },
    ),
]


@pytest_asyncio.fixture
async def stub(running: RunningControlPlane) -> AsyncIterator[pb_grpc.SessionKernelServiceStub]:
    async with auth.channel(running.address) as channel:
        yield pb_grpc.SessionKernelServiceStub(channel)


async def ready_session(plane: Plane, name: str) -> str:
    session_id = (await plane.kernel.create_session(CreateSession(name, plane.project_id))).session_id
    await plane.runtime_started(session_id)
    return session_id


async def report_engine(plane: Plane, session_id: str, type_name: str, payload_json: str, turn_id: str = "t1") -> int:
    message = runner_pb2.EngineMessage(type_name=type_name, payload_json=payload_json)
    return await plane.report(session_id, turn_id, engine_message=message)


async def listed(
    stub: pb_grpc.SessionKernelServiceStub, session_id: str, **request: Any
) -> list[events_pb2.SessionEvent]:
    """Every event of the session through ListSessionEvents, page after page."""
    events: list[events_pb2.SessionEvent] = []
    token = ""
    while True:
        page = await stub.ListSessionEvents(
            pb.ListSessionEventsRequest(session_id=session_id, page_size=1000, page_token=token, **request)
        )
        events.extend(page.events)
        if not (token := page.next_page_token):
            return events


async def watched(
    stub: pb_grpc.SessionKernelServiceStub, session_id: str, last_seq: int, **request: Any
) -> list[events_pb2.SessionEvent]:
    """The session's events through WatchSessionEvents, up to `last_seq`."""
    call = stub.WatchSessionEvents(pb.WatchSessionEventsRequest(session_id=session_id, **request))
    events: list[events_pb2.SessionEvent] = []
    try:
        async with asyncio.timeout(10):
            async for response in call:
                events.extend(response.events or [response.event])
                if events[-1].seq >= last_seq:
                    return events
    finally:
        call.cancel()
    raise AssertionError("the watch ended")


def engine_messages(events: list[events_pb2.SessionEvent]) -> list[events_pb2.EngineMessage]:
    return [e.engine_message for e in events if e.HasField("engine_message")]


def as_dict(struct: Any) -> dict[str, Any]:
    return json_format.MessageToDict(struct)


async def test_a_client_reads_a_turn_as_typed_content_from_lists_and_watches(plane: Plane, stub) -> None:
    session_id = await ready_session(plane, "typed")
    for type_name, payload in TURN:
        await report_engine(plane, session_id, type_name, json.dumps(payload))
    last = (await plane.kernel.get_session(session_id)).last_seq

    views = {
        "list": engine_messages(await listed(stub, session_id)),
        "watch": engine_messages(await watched(stub, session_id, last)),
        "watch runs": engine_messages(await watched(stub, session_id, last, max_events_per_response=100)),
    }
    for messages in views.values():
        assert [json.loads(m.payload_json) for m in messages] == [payload for _, payload in TURN]  # raw JSON intact
        assert [m.content for m in messages] == [m.content for m in views["list"]]
    init, assistant, tool_result, prompt, result = [m.content for m in views["list"]]

    assert (init.kind, init.subtype, init.model) == (events_pb2.ENGINE_CONTENT_KIND_SYSTEM, "init", "claude-sonnet-4-5")

    assert assistant.kind == events_pb2.ENGINE_CONTENT_KIND_ASSISTANT
    assert assistant.model == "claude-sonnet-4-5" and assistant.error == "" and assistant.parent_tool_use_id == ""
    assert [b.WhichOneof("block") for b in assistant.blocks] == ["thinking", "text", "tool_use", "other"]
    thinking, text, tool_use, other = assistant.blocks
    assert thinking.thinking.thinking == "The user wants a listing."
    assert text.text.text == "Listing <b>files</b> …"
    assert (tool_use.tool_use.id, tool_use.tool_use.name) == ("toolu_1", "Bash")
    assert as_dict(tool_use.tool_use.input) == TOOL_INPUT
    assert other.other.type == "ServerToolUseBlock"
    assert json.loads(other.other.json) == {"id": "srv_1", "name": "web_search", "input": {"q": "x"}}

    assert tool_result.kind == events_pb2.ENGINE_CONTENT_KIND_USER
    assert tool_result.parent_tool_use_id == "toolu_task"
    (block,) = tool_result.blocks
    assert block.tool_result.tool_use_id == tool_use.tool_use.id  # folded onto the call it answers
    assert block.tool_result.is_error is True
    assert block.tool_result.content == "total 0\ndrwx ."

    assert [b.text.text for b in prompt.blocks] == ["a prompt as plain text"]

    assert result.kind == events_pb2.ENGINE_CONTENT_KIND_RESULT
    assert (result.subtype, result.is_error, result.result) == ("error_max_turns", True, "stopped early")
    assert list(result.errors) == ["max turns reached"]


async def test_a_client_that_omits_the_view_gets_the_json_alone(plane: Plane, stub) -> None:
    session_id = await ready_session(plane, "omitted")
    for type_name, payload in TURN:
        await report_engine(plane, session_id, type_name, json.dumps(payload))
    last = (await plane.kernel.get_session(session_id)).last_seq
    reads = [
        await listed(stub, session_id, omit_content=True),
        await watched(stub, session_id, last, omit_content=True),
        await watched(stub, session_id, last, omit_content=True, max_events_per_response=100),
    ]
    for events in reads:
        messages = engine_messages(events)
        assert [json.loads(m.payload_json) for m in messages] == [payload for _, payload in TURN]
        assert not any(m.HasField("content") for m in messages)
    assert all(m.HasField("content") for m in engine_messages(await listed(stub, session_id)))


async def test_an_interaction_carries_its_tool_input_as_a_struct(plane: Plane, stub) -> None:
    inputs = {"object": " " + json.dumps(TOOL_INPUT) + "\n", "array": "[1, 2]", "broken": "{not json", "deep": None}
    deep: dict[str, Any] = {"leaf": 1}
    for _ in range(25):
        deep = {"d": deep}
    inputs["deep"] = json.dumps(deep)
    got = {}
    for name, input_json in inputs.items():
        session_id = await ready_session(plane, f"asks-{name}")
        accepted = await plane.conversation.send_message(SendMessage(session_id, f"m-{name}", "run ls"))
        requested = runner_pb2.InteractionRequested(
            interaction_id=f"i-{name}", tool_name="Bash", input_json=input_json, tool_use_id=f"tu-{name}"
        )
        await plane.report(session_id, accepted.turn_id, interaction_requested=requested)
        session = (await stub.GetSession(pb.GetSessionRequest(session_id=session_id))).session
        (event,) = [e for e in await listed(stub, session_id) if e.HasField("interaction_requested")]
        got[name] = (session.pending_interaction, event.interaction_requested.interaction)

    pending, journaled = got["object"]
    assert as_dict(pending.input) == as_dict(journaled.input) == TOOL_INPUT
    assert json.loads(journaled.input_json) == json.loads(pending.input_json) == TOOL_INPUT
    # The journaled interaction holds the input as the agent sent it: not an object, no Struct.
    for name in ("array", "broken", "deep"):
        _, journaled = got[name]
        assert not journaled.HasField("input") and journaled.input_json == inputs[name]
    # The pending one holds it as the control plane keeps it, an object: the Struct says the same.
    pending, _ = got["array"]
    assert as_dict(pending.input) == json.loads(pending.input_json) == {"value": [1, 2]}
    pending, _ = got["broken"]
    assert as_dict(pending.input) == json.loads(pending.input_json) == {"unparsed": "{not json"}
    pending, _ = got["deep"]
    assert not pending.HasField("input") and json.loads(pending.input_json) == deep


def _deep_input(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": "x"}
    for _ in range(levels):
        value = {"d": value}
    return value


def _tool_use(tool_input: Any) -> str:
    block = {"type_name": "ToolUseBlock", "id": "toolu_h", "name": "Bash", "input": tool_input}
    return json.dumps({"content": [block], "model": "m"})


# Payloads a buggy or hostile agent may send, as JSON text: each journals as it came, and reads with
# no view.
HOSTILE = {
    "array": ("AssistantMessage", "[1, 2, 3]"),
    "string": ("UserMessage", '"just a string"'),
    "number": ("ResultMessage", "42"),
    "null": ("SystemMessage", "null"),
    # 21 levels from the message down (its content, a block, the input, 17 more).
    "too deep": ("AssistantMessage", _tool_use(_deep_input(17))),
    # A number no double holds (PostgreSQL keeps it, as 401 digits). In a UserMessage: the control
    # plane journals its text as it came (an AssistantMessage's tool call it decodes and writes again).
    "huge number": ("UserMessage", _tool_use({"n": 0}).replace('"n": 0', '"n": 1e400')),
    "too large": ("AssistantMessage", json.dumps({"content": [{"type_name": "TextBlock", "text": "x" * 1_100_000}]})),
    # Numbers take 3 bytes in the JSON as stored and 11 in a Struct.
    "blown up": ("AssistantMessage", _tool_use({"xs": [0] * 20_000})),
}


async def test_hostile_payloads_read_with_no_view_and_their_json_intact(plane: Plane, stub) -> None:
    session_id = await ready_session(plane, "hostile")
    fine = TURN[1]
    await report_engine(plane, session_id, fine[0], json.dumps(fine[1]))
    for type_name, text in HOSTILE.values():
        await report_engine(plane, session_id, type_name, text)
    await report_engine(plane, session_id, fine[0], json.dumps(fine[1]))
    last = (await plane.kernel.get_session(session_id)).last_seq

    for events in (
        await listed(stub, session_id),
        await watched(stub, session_id, last),
        await watched(stub, session_id, last, max_events_per_response=100),
    ):
        first, *hostile, after = engine_messages(events)
        assert first.HasField("content") and after.HasField("content")  # the reads around them are whole
        assert [m.HasField("content") for m in hostile] == [False] * len(HOSTILE)
        for name, message, (type_name, text) in zip(HOSTILE, hostile, HOSTILE.values(), strict=True):
            assert message.type_name == type_name
            if name == "huge number":
                assert json.loads(message.payload_json)["content"][0]["input"]["n"] == 10**400
            else:
                assert json.loads(message.payload_json) == json.loads(text), name


async def test_engine_messages_that_are_no_json_object_are_journaled_and_change_nothing(plane: Plane, stub) -> None:
    session_id = await ready_session(plane, "non-object")
    sent = [
        ("ResultMessage", "[]"),
        ("SystemMessage", '"init"'),
        ("AssistantMessage", "7"),
        ("UserMessage", "null"),
        ("TaskNotificationMessage", '{"task_id": "task-1", "patch": 5}'),
        ("SystemMessage", '{"subtype": "init", "data": "not an object"}'),
        ("AssistantMessage", '{"content": 5}'),
        ("UserMessage", '{"content": {"type_name": "ToolResultBlock"}}'),
    ]
    for type_name, text in sent:
        await report_engine(plane, session_id, type_name, text)  # none fails its commit
    before = await plane.kernel.get_session(session_id)
    messages = engine_messages(await listed(stub, session_id))
    assert [(m.type_name, json.loads(m.payload_json)) for m in messages] == [(t, json.loads(j)) for t, j in sent]
    assert [m.HasField("content") for m in messages[:4]] == [False] * 4
    # The session goes on: its state is what it was, and the next output commits.
    assert before.state.value == "ready" and before.current_turn_id == ""
    await report_engine(plane, session_id, *TURN[1][:1], json.dumps(TURN[1][1]))
    assert engine_messages(await listed(stub, session_id))[-1].content.kind == events_pb2.ENGINE_CONTENT_KIND_ASSISTANT


async def test_list_pages_with_their_views_stay_within_what_a_client_takes(plane: Plane, stub) -> None:
    # Tool inputs of short strings: PostgreSQL renders their JSON about 1.2 times as long as written
    # and the Struct takes about as much again, so a page of 2 MiB as written would be 4.6 MiB.
    session_id = await ready_session(plane, "large-views")
    tool_input = {f"k{i}": "v" for i in range(40_000)}
    for _ in range(8):
        text = json.dumps({"content": [{"type_name": "ToolUseBlock", "id": "t", "name": "N", "input": tool_input}]})
        await report_engine(plane, session_id, "AssistantMessage", text.replace(": ", ":").replace(", ", ","))
    last = (await plane.kernel.get_session(session_id)).last_seq
    pages = []
    token = ""
    while True:
        page = await stub.ListSessionEvents(
            pb.ListSessionEventsRequest(session_id=session_id, page_size=1000, page_token=token)
        )
        pages.append(page)
        if not (token := page.next_page_token):
            break
    events = [e for page in pages for e in page.events]
    assert [e.seq for e in events] == list(range(1, last + 1))
    assert all(page.ByteSize() < CLIENT_LIMIT for page in pages)
    messages = engine_messages(events)
    assert len(messages) == 8 and all(len(m.content.blocks[0].tool_use.input.fields) == 40_000 for m in messages)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"content": [{"type_name": "TextBlock", "text": "\\ud800"}]}', "a lone surrogate"),
        ('{"content": [{"type_name": "ToolUseBlock", "input": {"n": NaN}}]}', "NaN"),
        ('{"content": [{"type_name": "ToolUseBlock", "input": {"n": -Infinity}}]}', "an infinity"),
        ('{"content": []} trailing', "text after the JSON"),
        ('{"content": [', "JSON cut short"),
        ('{"content": [{"type_name": "Other", "data": {"x": NaN}}]}', "NaN in another block"),
        ('{"content": [{"type_name": "ToolUseBlock", "input": {"n": ' + "9" * 5000 + "}}]}", "5,000 digits"),
    ],
)
def test_what_the_journal_cannot_hold_gets_no_view_either(text: str, why: str) -> None:
    # PostgreSQL refuses these into the journal; the view stays safe should a read meet them anyway.
    message = events_pb2.EngineMessage(type_name="AssistantMessage", payload_json="{}")
    assert engine_content.set_engine_content(message, "AssistantMessage", text) == 0, why
    assert not message.HasField("content")
    assert engine_content.tool_input(text) is None
    assert engine_content.set_engine_content(message, "AssistantMessage", '{"content": "fine"}') > 0
    assert message.content.blocks[0].text.text == "fine"
