"""The offline model's script table: what it answers, decided from the conversation alone.

The model is stateless. "The prompt" is the newest user message holding real
text (not only tool results); the number of tool results after it tells how
far the script has got.

| prompt contains   | replies                                                              |
|-------------------|----------------------------------------------------------------------|
| `run: <command>`  | Bash `<command>`, then a text quoting its output                     |
| `steps: N`        | N replies, each Bash `sleep 0.3; echo step <i>`, then "Finished N steps." |
| anything else     | Bash writing and reading hello.txt, then a text saying what it holds |
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

HELLO_COMMAND = "printf 'Hello from AstraBox\\n' > hello.txt && cat hello.txt"
HELLO_CONTENT = "Hello from AstraBox\n"

_RUN = re.compile(r"^\s*run:\s*(?P<command>.+?)\s*$", re.MULTILINE)
_STEPS = re.compile(r"^\s*steps:\s*(?P<count>\d+)\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Reply:
    """One assistant reply: some text and, optionally, one Bash command to run."""

    text: str
    command: str | None = None
    description: str = ""

    @property
    def stop_reason(self) -> str:
        return "tool_use" if self.command is not None else "end_turn"


@dataclass(frozen=True, slots=True)
class Conversation:
    """Where a conversation stands, as far as the scripts care."""

    prompt: str
    # Text of every tool result after the prompt, oldest first.
    tool_results: tuple[str, ...]


def reply_for(messages: Sequence[Mapping[str, Any]]) -> Reply:
    """The scripted reply to a Messages API conversation."""
    conversation = read_conversation(messages)
    if match := _RUN.search(conversation.prompt):
        return _run_script(match["command"], conversation.tool_results)
    if match := _STEPS.search(conversation.prompt):
        return _steps_script(int(match["count"]), conversation.tool_results)
    return _hello_script(conversation.tool_results)


def _run_script(command: str, results: tuple[str, ...]) -> Reply:
    if not results:
        return Reply(f"I'll run `{command}`.", command=command, description="Run the requested command")
    return Reply(f"The command `{command}` printed:\n{results[-1].rstrip()}")


def _steps_script(count: int, results: tuple[str, ...]) -> Reply:
    done = len(results)
    if done < count:
        step = done + 1
        return Reply(f"Step {step} of {count}.", command=f"sleep 0.3; echo step {step}", description=f"Step {step}")
    return Reply(f"Finished {count} steps.")


def _hello_script(results: tuple[str, ...]) -> Reply:
    if not results:
        return Reply("I'll create hello.txt in the workspace.", command=HELLO_COMMAND, description="Create hello.txt")
    return Reply(f"I created hello.txt; it contains: {results[-1].strip()}")


def read_conversation(messages: Sequence[Mapping[str, Any]]) -> Conversation:
    """Find the prompt and the tool results that followed it."""
    prompt = ""
    results: list[str] = []
    for message in messages:
        if message.get("role") != "user":
            continue
        text, tool_results = _split_content(message.get("content"))
        if text.strip():
            prompt, results = text, []
        results.extend(tool_results)
    return Conversation(prompt=prompt, tool_results=tuple(results))


def _split_content(content: Any) -> tuple[str, list[str]]:
    """A user message's own text, and the text of each tool result in it."""
    if isinstance(content, str):
        return content, []
    texts: list[str] = []
    results: list[str] = []
    for block in content or ():
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "text":
            text = str(block.get("text", ""))
            # The CLI wraps its own notes to the model in <system-reminder>; they are not the user's words.
            if not text.lstrip().startswith("<system-reminder>"):
                texts.append(text)
        elif block.get("type") == "tool_result":
            results.append(_flatten(block.get("content")))
    return "\n".join(texts), results


def _flatten(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(
        str(block.get("text", "")) for block in content or () if isinstance(block, Mapping) and block.get("type") == "text"
    )
