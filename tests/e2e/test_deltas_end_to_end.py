"""Text as it is written, end to end: the real CLI answering from the offline model (which streams
its replies in pieces) through a real agent and control plane. A watcher that asks for deltas sees a
message's text in pieces before the complete message, the pieces adding up to its text; deltas are
never journaled; a watcher that does not ask sees exactly the journal; `astrabox run` prints the
text once."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from astrabox.client import AstraBoxClient
from astrabox.events import Delta, Event
from astrabox.messages import AssistantMessage
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

WORDS = "streamed-" + "-".join(f"word{i}" for i in range(40))


async def test_a_watcher_with_deltas_sees_the_text_before_the_message_and_the_journal_holds_none(
    stack: Stack, client: AstraBoxClient
) -> None:
    created = await client.create_session()
    session = client.session(created.session_id)
    await session.wait_for_state(["READY"], timeout=120)
    with_deltas: list[Event | Delta] = []
    without: list[Event | Delta] = []
    following = [asyncio.Event(), asyncio.Event()]

    async def follow(deltas: bool, into: list[Event | Delta], started: asyncio.Event) -> None:
        async for item in session.watch(deltas=deltas):
            into.append(item)
            started.set()  # the watch has replayed the journal: it is live from here on
            if isinstance(item, Event) and item.ends_turn:
                return

    watchers = [
        asyncio.create_task(follow(True, with_deltas, following[0])),
        asyncio.create_task(follow(False, without, following[1])),
    ]
    await asyncio.wait_for(asyncio.gather(*(f.wait() for f in following)), 30)
    await session.send(f"run: echo {WORDS}")
    await asyncio.wait_for(asyncio.gather(*watchers), 180)

    answers = [
        (i, e.message)
        for i, e in enumerate(with_deltas)
        if isinstance(e, Event) and isinstance(e.message, AssistantMessage) and WORDS in e.message.text
    ]
    assert answers, with_deltas
    position, answer = answers[-1]
    message_id = answer.payload["message_id"]
    pieces = [d for d in with_deltas if isinstance(d, Delta) and d.message_id == message_id and d.kind == "text"]
    assert len(pieces) > 1  # in pieces, not the whole text at once
    assert all(with_deltas.index(p) < position for p in pieces)  # before the complete message
    assert "".join(p.text for p in pieces) == answer.text
    # The Bash call's input came as it was written too.
    assert any(isinstance(d, Delta) and d.kind == "tool_input" and "echo" in d.text for d in with_deltas)

    journal = [e async for e in session.events()]
    assert [e.seq for e in journal] == list(range(1, len(journal) + 1))  # no seq went to a delta
    assert not any(isinstance(e, Delta) for e in without)
    assert [e.proto for e in without if isinstance(e, Event)] == [e.proto for e in journal][: len(without)]
    assert [e.proto for e in with_deltas if isinstance(e, Event)] == [e.proto for e in journal][: len(without)]


def test_astrabox_run_prints_the_answer_as_it_is_written_and_only_once(stack: Stack) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "astrabox", "run", "--target", stack.address, f"run: echo {WORDS}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    text_lines = [line for line in run.stdout.splitlines() if "◆" in line]
    # The model's two texts (what it will run, what it printed), each once, as they were written (no
    # seq: not yet an event), and not again from the complete message (which would carry its seq).
    assert [line.split("`")[0] for line in text_lines] == ["       ◆ I'll run ", "       ◆ The command "], run.stdout
    assert run.stdout.count(f"◆ The command `echo {WORDS}` printed:") == 1
    assert "✓ turn completed" in run.stdout
