"""The SDK's session handle and typed views end to end, against a whole stack started by
`astrabox.testing.LocalStack` (the real bundled CLI in the local sandbox, the offline model)."""

from __future__ import annotations

import asyncio
import io
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import pytest_asyncio

from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from astrabox.events import Event
from astrabox.messages import (
    AssistantMessage,
    InitMessage,
    OtherMessage,
    ResultMessage,
    ToolUseBlock,
    UserMessage,
)
from astrabox.sessions import SessionHandle, Turn, TurnOutcome
from astrabox.testing import LocalStack

pytestmark = pytest.mark.e2e

TIMEOUT = 120


@pytest_asyncio.fixture(scope="module")
async def local_stack() -> AsyncIterator[LocalStack]:
    async with LocalStack() as stack:
        yield stack


@pytest.fixture
def client(local_stack: LocalStack) -> AstraBoxClient:
    return local_stack.client


async def events_until(turn: Turn, predicate) -> list[Event]:
    """The turn's events up to the first that satisfies `predicate` (which must come before its end)."""
    seen = []
    async with asyncio.timeout(TIMEOUT):
        async for event in turn.events():
            seen.append(event)
            if predicate(event):
                return seen
    raise AssertionError(f"the turn ended first: {[e.kind for e in seen]}")


async def test_a_turn_reads_as_typed_messages_and_ends_in_a_result_with_usage(client: AstraBoxClient) -> None:
    session = await client.start_session(ready_timeout=TIMEOUT)
    turn = await session.send("run: echo through-the-handle")
    async with asyncio.timeout(TIMEOUT):
        events = [event async for event in turn.events()]
        result = await turn.result()

    assert events[0].kind == "user_message_accepted" and events[0].seq == turn.seq
    assert events[-1].kind == "turn_completed" and [e.kind for e in events].count("turn_completed") == 1
    assert all(e.turn_id == turn.turn_id for e in events)
    messages = [e.message for e in events if e.kind == "engine_message"]
    assert messages and all(m is not None and not isinstance(m, OtherMessage) for m in messages), messages
    init = next(m for m in messages if isinstance(m, InitMessage))
    assert "Bash" in init.tools and init.model
    [call] = [u for m in messages if isinstance(m, AssistantMessage) for u in m.tool_uses]
    assert call == ToolUseBlock(call.id, "Bash", call.input) and call.input["command"] == "echo through-the-handle"
    [output] = [r for m in messages if isinstance(m, UserMessage) for r in m.tool_results]
    assert output.tool_use_id == call.id and output.content == "through-the-handle" and not output.is_error
    said = [m.text for m in messages if isinstance(m, AssistantMessage) and m.text]
    assert said[-1] == "The command `echo through-the-handle` printed:\nthrough-the-handle"
    [engine_result] = [m for m in messages if isinstance(m, ResultMessage)]

    assert result.outcome is TurnOutcome.COMPLETED and not result.is_error
    assert result.text == said[-1] == engine_result.result
    assert result.result == engine_result and result.events == tuple(events)
    assert result.usage is not None and result.usage.output_tokens > 0 and result.usage.input_tokens > 0
    assert result.total_cost_usd is not None and result.total_cost_usd > 0

    # A handle made from the id alone reads the same journal.
    again = client.session(session.id)
    stored = [e async for e in again.events(after_seq=turn.seq - 1)]
    assert [e.seq for e in stored] == [e.seq for e in events] and [e.message for e in stored] == [
        e.message for e in events
    ]


async def test_interactions_are_answered_through_the_handle(client: AstraBoxClient) -> None:
    session = await client.start_session(ready_timeout=TIMEOUT, permission_mode="default")

    denied = await session.send("run: touch approved.txt")
    asked = await events_until(denied, lambda e: e.interaction is not None)
    assert asked[-1].interaction.tool_name == "Bash" and "touch approved.txt" in asked[-1].interaction.input_json
    await session.respond(deny="not in this workspace")  # the pending one
    result = await asyncio.wait_for(denied.result(), TIMEOUT)
    assert result.outcome is TurnOutcome.COMPLETED and "not in this workspace" in result.text
    assert "approved.txt" not in [entry.name for entry in await session.list_files()]
    with pytest.raises(AstraBoxError) as nothing_pending:
        await session.respond(allow=True)
    assert nothing_pending.value.reason == "INTERACTION_NOT_PENDING"

    allowed = await session.send("run: touch approved.txt")
    asked = await events_until(allowed, lambda e: e.interaction is not None)
    await session.respond(asked[-1].interaction.interaction_id, allow=True)
    assert (await asyncio.wait_for(allowed.result(), TIMEOUT)).outcome is TurnOutcome.COMPLETED
    assert await session.read_file("approved.txt") == b""

    question = await session.send("ask: Which color? red|blue")
    asked = await events_until(question, lambda e: e.interaction is not None)
    assert [q.question for q in asked[-1].interaction.questions] == ["Which color?"]
    await session.respond(asked[-1].interaction.interaction_id, answers={"Which color?": "blue"})
    assert (await asyncio.wait_for(question.result(), TIMEOUT)).text == "You chose: blue."


async def test_a_turn_is_interrupted_through_the_handle_and_the_next_one_runs(client: AstraBoxClient) -> None:
    session = await client.start_session(ready_timeout=TIMEOUT)
    long = await session.send("sleep: 60")
    await events_until(long, lambda e: isinstance(e.message, AssistantMessage) and e.message.tool_uses)
    await session.interrupt()
    result = await asyncio.wait_for(long.result(), TIMEOUT)
    assert result.outcome is TurnOutcome.INTERRUPTED and result.is_error and result.text
    assert any(e.kind == "interrupt_requested" for e in result.events)

    after = await asyncio.wait_for((await session.send("run: echo still here")).result(), TIMEOUT)
    assert after.outcome is TurnOutcome.COMPLETED and "still here" in after.text


async def test_workspace_files_through_the_handle(client: AstraBoxClient, tmp_path: Path) -> None:
    session: SessionHandle = await client.start_session(ready_timeout=TIMEOUT)
    local = tmp_path / "local-repo"
    (local / "src").mkdir(parents=True)
    (local / "src" / "main.py").write_text("print('hi')\n")
    await session.upload_directory(local, path="repo")
    await session.write_file("repo/notes/todo.txt", "write tests\n")
    await session.write_file("/workspace/top.txt", b"\x00binary")
    assert await session.read_file("top.txt") == b"\x00binary"

    assert {(e.name, e.type) for e in await session.list_files("repo")} == {
        ("src", "directory"),
        ("notes", "directory"),
    }
    assert await session.read_file("repo/notes/todo.txt") == b"write tests\n"
    assert await session.read_file("/workspace/repo/src/main.py") == b"print('hi')\n"
    with pytest.raises(IsADirectoryError):
        await session.read_file("repo/src")
    with pytest.raises(AstraBoxError) as missing:
        await session.read_file("repo/nothing.txt")
    assert missing.value.code == grpc.StatusCode.NOT_FOUND and missing.value.reason == "PATH_NOT_FOUND"

    with tarfile.open(fileobj=io.BytesIO(await session.download_archive("repo"))) as archive:
        assert {"repo/src/main.py", "repo/notes/todo.txt"} <= set(archive.getnames())
    ran = await session.run_command("cat repo/notes/todo.txt && ls repo/src")
    assert (ran.exit_code, ran.stdout) == (0, b"write tests\nmain.py\n")

    # The engine sees what was written.
    result = await asyncio.wait_for((await session.send("run: cat repo/src/main.py")).result(), TIMEOUT)
    assert "print('hi')" in result.text
