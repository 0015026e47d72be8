"""Answering what a turn waits on: a question, a tool approval or a custom tool's call.

On a terminal `astrabox run` asks the person (`TerminalPrompter`): a question's options by number
or an answer in their own words; an approval allowed once, allowed always (a tool grant, for every
call of the tool or those matching a pattern) or denied with a reason; a custom tool's result, its
error, or a refusal. Off a terminal it prints the `astrabox session respond` commands that answer it
(`answer_commands`) and goes on waiting, so a script's run never waits without saying why.
"""

from __future__ import annotations

import asyncio
import os
import shlex
from collections.abc import Sequence
from typing import Any, TextIO

from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from astrabox.render import tool_input
from astrabox.sessionkernel.v1 import session_pb2

__all__ = ["TerminalPrompter", "answer_commands", "waiting_note"]

_PROMPT = "> "


def answer_commands(session_id: str, interaction: session_pb2.Interaction, connection: Sequence[str] = ()) -> list[str]:
    """The commands that answer `interaction` from a shell, each with what it does as a comment;
    `connection` are the flags that reach the same control plane (`--target …`)."""
    respond = shlex.join(["astrabox", "session", *connection, "respond", session_id])
    if interaction.kind == session_pb2.INTERACTION_KIND_CUSTOM_TOOL:
        return [
            f"{respond} --tool-result 'TEXT'    # the tool's result, which the model reads",
            f"{respond} --tool-result 'TEXT' --tool-error    # the tool failed: TEXT is its error",
            f"{respond} --deny 'WHY'    # refuse the call",
        ]
    if interaction.kind == session_pb2.INTERACTION_KIND_SUBAGENT:
        interrupt = shlex.join(["astrabox", "session", *connection, "interrupt", session_id])
        return [f"{interrupt}    # nothing to answer: the sub-agent's session answers; this stops the turn and it"]
    if interaction.questions:
        answers = " ".join(
            f"--answer {shlex.quote(q.question + '=' + (q.options[0] if q.options else 'ANSWER'))}"
            for q in interaction.questions
        )
        options = "; ".join(f"{q.question} {' | '.join(q.options)}" for q in interaction.questions if q.options)
        return [f"{respond} {answers}    # or another option ({options}) or your own words"]
    call = tool_input(interaction.tool_name, interaction.input_json)
    return [
        f"{respond}    # allow this call",
        f"{respond} --grant {shlex.quote(call)}    # allow it and later {interaction.tool_name} calls matching it",
        f"{respond} --grant    # allow it and every later {interaction.tool_name} call",
        f"{respond} --deny 'WHY'    # deny it; the model reads why",
    ]


def waiting_note(session_id: str, interaction: session_pb2.Interaction, connection: Sequence[str] = ()) -> list[str]:
    """What `astrabox run` prints off a terminal when its turn parks: that it waits, and how to answer."""
    what = {
        session_pb2.INTERACTION_KIND_CUSTOM_TOOL: f"the result of custom tool {interaction.tool_name}",
        session_pb2.INTERACTION_KIND_QUESTION: "an answer to its question",
    }.get(interaction.kind, f"approval of the {interaction.tool_name} call")
    # Indented under the events' text ("[seq] "), so the note reads as part of the turn.
    return [
        f"       … the turn waits for {what} (interaction {interaction.interaction_id});"
        " not on a terminal, so answer it from a shell with one of:",
        *(f"           {command}" for command in answer_commands(session_id, interaction, connection)),
    ]


class _Lines:
    """Lines typed on a terminal, read without blocking the event loop (the watch goes on)."""

    def __init__(self, stdin: TextIO) -> None:
        self._fd = stdin.fileno()
        self._buffer = b""
        self._eof = False

    async def read(self) -> str:
        """The next line, without its newline; EOFError once the input has ended."""
        while b"\n" not in self._buffer and not self._eof:
            await self._readable()
            chunk = os.read(self._fd, 4096)
            self._eof = not chunk
            self._buffer += chunk
        if b"\n" not in self._buffer:
            if not self._buffer:
                raise EOFError
            self._buffer += b"\n"
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode(errors="replace").rstrip("\r")

    async def _readable(self) -> None:
        loop = asyncio.get_running_loop()
        readable: asyncio.Future[None] = loop.create_future()

        def ready() -> None:
            if not readable.done():
                readable.set_result(None)

        loop.add_reader(self._fd, ready)
        try:
            await readable
        finally:
            loop.remove_reader(self._fd)


class TerminalPrompter:
    """Asks a person at a terminal to answer a turn's interaction, and sends the answer."""

    def __init__(self, stdin: TextIO, out: TextIO) -> None:
        self._lines = _Lines(stdin)
        self._out = out

    async def answer(self, client: AstraBoxClient, session_id: str, interaction: session_pb2.Interaction) -> bool:
        """Asks until the person gives an answer the control plane takes, and sends it. False when the
        input ended first (nothing was sent); True when it was answered (by this answer or another)."""
        while True:
            try:
                answer = await self._ask(interaction)
            except EOFError:
                return False
            try:
                await client.respond_to_interaction(session_id, interaction.interaction_id, **answer)
            except AstraBoxError as error:
                if error.reason in ("INTERACTION_NOT_PENDING", "INTERACTION_NOT_FOUND"):
                    self._say("  (it was already answered or closed)")
                    return True
                if error.code.name != "INVALID_ARGUMENT":
                    raise
                self._say(f"  ✗ not taken: {error.message}; again")
                continue
            return True

    async def _ask(self, interaction: session_pb2.Interaction) -> dict[str, Any]:
        if interaction.kind == session_pb2.INTERACTION_KIND_CUSTOM_TOOL:
            return await self._custom_tool(interaction)
        if interaction.questions:
            several = len(interaction.questions) > 1  # the event's line names one; several need their names
            return {"answers": {q.question: await self._question(q, several) for q in interaction.questions}}
        return await self._approval(interaction)

    async def _question(self, question: session_pb2.Question, named: bool) -> str:
        if named:
            self._say(f"  {question.question}")
        for number, option in enumerate(question.options, 1):
            self._say(f"    {number}) {option}")
        several = "numbers separated by commas" if question.multi_select else "a number"
        while True:
            text = (await self._prompt(f"  your answer: {several}, or your own words {_PROMPT}")).strip()
            if not text:
                continue
            picked = [part.strip() for part in text.split(",")] if question.multi_select else [text]
            if not all(part.isdigit() for part in picked):
                return text  # the person's own words
            if all(1 <= int(part) <= len(question.options) for part in picked):
                return ", ".join(question.options[int(part) - 1] for part in picked)
            self._say(f"  there are options 1 to {len(question.options)}")

    async def _approval(self, interaction: session_pb2.Interaction) -> dict[str, Any]:
        tool = interaction.tool_name
        choice = await self._choose(
            "allow this call",
            f"allow always: this and later {tool} calls run without asking (a tool grant)",
            "deny it",
        )
        if choice == 1:
            return {"allow": True}
        if choice == 2:
            pattern = await self._prompt(
                f"  which later {tool} calls? a pattern (* any run of characters, ? one),"
                f" or empty for every call {_PROMPT}"
            )
            return {"allow": True, "grant": True, "grant_pattern": pattern.strip()}
        return {"deny": await self._reason()}

    async def _custom_tool(self, interaction: session_pb2.Interaction) -> dict[str, Any]:
        choice = await self._choose(
            "answer with its result", "answer that it failed (the model reads the error)", "deny the call"
        )
        if choice == 3:
            return {"deny": await self._reason()}
        label = "result" if choice == 1 else "error"
        text = await self._prompt(f"  the tool's {label} (one line) {_PROMPT}")
        return {"tool_result": text, "is_error": choice == 2}

    async def _choose(self, *options: str) -> int:
        for number, option in enumerate(options, 1):
            self._say(f"    {number}) {option}")
        numbers = ", ".join(str(n) for n in range(1, len(options)))
        while True:
            text = (await self._prompt(f"  choose {numbers} or {len(options)} {_PROMPT}")).strip()
            if text.isdigit() and 1 <= int(text) <= len(options):
                return int(text)

    async def _reason(self) -> str:
        reason = (await self._prompt(f"  why? (the model reads it) {_PROMPT}")).strip()
        return reason or "denied at the terminal"

    async def _prompt(self, text: str) -> str:
        self._out.write(text)
        self._out.flush()
        return await self._lines.read()

    def _say(self, line: str) -> None:
        print(line, file=self._out, flush=True)
