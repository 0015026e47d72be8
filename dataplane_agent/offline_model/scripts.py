r"""The offline model's script table: what it answers, decided from the conversation alone.

The model is stateless. "The prompt" is the newest user message holding real
text (not only tool results); the tool results after it tell how far the
script has got. The first row whose marker the prompt holds wins.

| prompt holds            | replies                                                                  |
|-------------------------|--------------------------------------------------------------------------|
| a task notification     | "Background task finished: <the CLI's summary>"                          |
| `run: <command>`        | Bash `<command>`, then a text quoting its output                         |
| `steps: N`              | N replies, each Bash `sleep 0.3; echo step <i>`, then "Finished N steps." |
| `sleep: N`              | Bash `echo sleeping; sleep N; echo slept` (to interrupt), then its output |
| `ask: <question>? A\|B` | AskUserQuestion with options A and B, then "You chose: <answer>."        |
| `background: <command>` | Bash `<command>` in the background, then "Started in the background."    |
| `report: setup`         | a text: `System prompt: <the system prompt it received>` and, on a line  |
|                         | of its own, `Tools: <the names of the tools it was offered, in order>`   |
| `report: history`       | a text: `Earlier prompts: <each user prompt before this one, oldest first,` |
|                         | `joined by " | ">` (what the conversation it was given holds)          |
| `tool: <Name> <JSON>`   | tool `<Name>` with that JSON object as input, then "<Name> returned: …"  |
| anything else           | Bash writing and reading hello.txt, then a text saying what it holds     |

A task notification is the note the CLI adds to the conversation when a
background task ends, and then asks the model about on its own. The `sleep:`
command does not start with `sleep`: the CLI refuses a long leading sleep
("Blocked: sleep 30 followed by: …").

`report: setup` lets a test see what an agent's configuration made of the request: the system
prompt (its blocks joined by newlines) verbatim, but only its first and last KiBs when it is longer
than REPORTED_PROMPT_MAX characters, and the tools (built-in and MCP) by name.

When the newest tool result is an error, every script stops there: "The
command failed: …" when Bash reports an exit code, else "The command was
denied: …" (the CLI hands the model a refusal's message as the result).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

HELLO_COMMAND = "printf 'Hello from AstraBox\\n' > hello.txt && cat hello.txt"
HELLO_CONTENT = "Hello from AstraBox\n"

_RUN = re.compile(r"^\s*run:\s*(?P<command>.+?)\s*$", re.MULTILINE)
_STEPS = re.compile(r"^\s*steps:\s*(?P<count>\d+)\s*$", re.MULTILINE)
_SLEEP = re.compile(r"^\s*sleep:\s*(?P<seconds>\d+(?:\.\d+)?)\s*$", re.MULTILINE)
_ASK = re.compile(r"^\s*ask:\s*(?P<question>.+?\?)\s*(?P<options>.+?)\s*$", re.MULTILINE)
_BACKGROUND = re.compile(r"^\s*background:\s*(?P<command>.+?)\s*$", re.MULTILINE)
_REPORT = re.compile(r"^\s*report:\s*setup\s*$", re.MULTILINE)
_HISTORY = re.compile(r"^\s*report:\s*history\s*$", re.MULTILINE)
_TOOL = re.compile(r"^\s*tool:\s*(?P<name>[A-Za-z0-9_.-]+)\s+(?P<input>\{.*\})\s*$", re.MULTILINE)
# A system prompt longer than this is reported by its head and tail only.
REPORTED_PROMPT_MAX = 16 * 1024
_REPORTED_HEAD = 4 * 1024
# How the CLI tells the model that a background task ended (a user message of its own).
_TASK_NOTIFICATION = re.compile(r"<task-notification>(?P<body>.*?)</task-notification>", re.DOTALL)
_SUMMARY = re.compile(r"<summary>(?P<summary>.*?)</summary>", re.DOTALL)
# A failed Bash command's result starts so; a refused tool's result is the refusal message alone.
_FAILED = re.compile(r"^Exit code \d+")


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    input: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Reply:
    """One assistant reply: some text and, optionally, one tool call."""

    text: str
    tool: ToolCall | None = None

    @property
    def stop_reason(self) -> str:
        return "tool_use" if self.tool is not None else "end_turn"

    @property
    def command(self) -> str | None:
        """The Bash command this reply runs, if it runs one."""
        if self.tool is None or self.tool.name != "Bash":
            return None
        return str(self.tool.input["command"])


@dataclass(frozen=True, slots=True)
class ToolResult:
    text: str
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class Offered:
    """What the model was given besides the messages: the system prompt and the tools' names."""

    system_prompt: str = ""
    tools: tuple[str, ...] = ()

    @classmethod
    def in_request(cls, body: Mapping[str, Any]) -> Offered:
        """From a Messages API request body (`system` is a string or a list of text blocks)."""
        system = body.get("system")
        prompt = system if isinstance(system, str) else _flatten(system)
        tools = tuple(str(t.get("name", "")) for t in body.get("tools") or () if isinstance(t, Mapping))
        return cls(prompt, tools)


@dataclass(frozen=True, slots=True)
class Conversation:
    """Where a conversation stands, as far as the scripts care."""

    prompt: str
    # Every tool result after the prompt, oldest first.
    tool_results: tuple[ToolResult, ...] = field(default_factory=tuple)
    offered: Offered = field(default_factory=Offered)
    # The user prompts before `prompt`, oldest first.
    earlier_prompts: tuple[str, ...] = ()

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(result.text for result in self.tool_results)


def bash(command: str, description: str, *, background: bool = False) -> ToolCall:
    tool_input: dict[str, Any] = {"command": command, "description": description}
    if background:
        tool_input["run_in_background"] = True
    return ToolCall("Bash", tool_input)


def reply_for(messages: Sequence[Mapping[str, Any]], offered: Offered | None = None) -> Reply:
    """The scripted reply to a Messages API conversation, given with `offered`."""
    conversation = read_conversation(messages)
    if offered is not None:
        conversation = dataclasses.replace(conversation, offered=offered)
    if conversation.tool_results and conversation.tool_results[-1].is_error:
        return _refused(conversation.tool_results[-1].text)
    if match := _TASK_NOTIFICATION.search(conversation.prompt):
        return _task_finished(match["body"])
    for pattern, script in _SCRIPTS:
        if match := pattern.search(conversation.prompt):
            return script(match, conversation)
    return _hello_script(conversation)


def _run_script(match: re.Match[str], conversation: Conversation) -> Reply:
    command = match["command"]
    if not conversation.tool_results:
        return Reply(f"I'll run `{command}`.", bash(command, "Run the requested command"))
    return Reply(f"The command `{command}` printed:\n{conversation.outputs[-1].rstrip()}")


def _steps_script(match: re.Match[str], conversation: Conversation) -> Reply:
    count, done = int(match["count"]), len(conversation.tool_results)
    if done < count:
        step = done + 1
        return Reply(f"Step {step} of {count}.", bash(f"sleep 0.3; echo step {step}", f"Step {step}"))
    return Reply(f"Finished {count} steps.")


def _sleep_script(match: re.Match[str], conversation: Conversation) -> Reply:
    seconds = match["seconds"]
    if not conversation.tool_results:
        return Reply(
            f"I'll sleep for {seconds}s.",
            bash(f"echo sleeping; sleep {seconds}; echo slept", f"Sleep {seconds} seconds"),
        )
    return Reply(f"Done sleeping: {conversation.outputs[-1].strip()}")


def _ask_script(match: re.Match[str], conversation: Conversation) -> Reply:
    question = match["question"].strip()
    if not conversation.tool_results:
        options = [
            {"label": label.strip(), "description": f"Choose {label.strip()}"} for label in match["options"].split("|")
        ]
        ask = {"questions": [{"question": question, "header": "Question", "options": options, "multiSelect": False}]}
        return Reply("I need to ask you something.", ToolCall("AskUserQuestion", ask))
    return Reply(f"You chose: {answer_in(conversation.outputs[-1], question)}.")


def _background_script(match: re.Match[str], conversation: Conversation) -> Reply:
    command = match["command"]
    if not conversation.tool_results:
        return Reply(
            f"I'll run `{command}` in the background.", bash(command, "Run in the background", background=True)
        )
    return Reply("Started in the background.")


def _report_script(match: re.Match[str], conversation: Conversation) -> Reply:
    prompt = conversation.offered.system_prompt
    if len(prompt) > REPORTED_PROMPT_MAX:
        tail = REPORTED_PROMPT_MAX - _REPORTED_HEAD
        omitted = len(prompt) - REPORTED_PROMPT_MAX
        prompt = f"{prompt[:_REPORTED_HEAD]}\n[… {omitted} characters …]\n{prompt[-tail:]}"
    return Reply(f"System prompt: {prompt}\nTools: {', '.join(conversation.offered.tools)}")


def _history_script(match: re.Match[str], conversation: Conversation) -> Reply:
    return Reply(f"Earlier prompts: {' | '.join(p.strip() for p in conversation.earlier_prompts)}")


def _tool_script(match: re.Match[str], conversation: Conversation) -> Reply:
    name = match["name"]
    if conversation.tool_results:
        return Reply(f"{name} returned: {conversation.outputs[-1].rstrip()}")
    try:
        tool_input = json.loads(match["input"])
    except json.JSONDecodeError as error:
        return Reply(f"The input for {name} is not JSON: {error}")
    if not isinstance(tool_input, dict):
        return Reply(f"The input for {name} is not a JSON object.")
    return Reply(f"I'll use {name}.", ToolCall(name, tool_input))


def _hello_script(conversation: Conversation) -> Reply:
    if not conversation.tool_results:
        return Reply("I'll create hello.txt in the workspace.", bash(HELLO_COMMAND, "Create hello.txt"))
    return Reply(f"I created hello.txt; it contains: {conversation.outputs[-1].strip()}")


def _task_finished(notification: str) -> Reply:
    summary = match["summary"].strip() if (match := _SUMMARY.search(notification)) else notification.strip()
    return Reply(f"Background task finished: {summary}")


def _refused(result: str) -> Reply:
    message = result.strip()
    if _FAILED.match(message):
        return Reply(f"The command failed: {message}")
    return Reply(f"The command was denied: {message}")


_SCRIPTS: tuple[tuple[re.Pattern[str], Callable[[re.Match[str], Conversation], Reply]], ...] = (
    (_RUN, _run_script),
    (_STEPS, _steps_script),
    (_SLEEP, _sleep_script),
    (_ASK, _ask_script),
    (_BACKGROUND, _background_script),
    (_REPORT, _report_script),
    (_HISTORY, _history_script),
    (_TOOL, _tool_script),
)


def answer_in(tool_result: str, question: str) -> str:
    """The answer to `question` in an AskUserQuestion result (`"<question>"="<answer>"`), else the whole result."""
    if match := re.search(re.escape(f'"{question}"="') + r'(?P<answer>[^"]*)"', tool_result):
        return match["answer"]
    return tool_result.strip()


def read_conversation(messages: Sequence[Mapping[str, Any]]) -> Conversation:
    """Find the prompt and the tool results that followed it."""
    prompt = ""
    results: list[ToolResult] = []
    earlier: list[str] = []
    for message in messages:
        if message.get("role") != "user":
            continue
        text, tool_results = _split_content(message.get("content"))
        if text.strip():
            # Tool results beside new text answer the reply before it (the CLI merges them
            # into one user message, e.g. after an interrupt): they belong to the old prompt.
            if prompt:
                earlier.append(prompt)
            prompt, results = text, []
        else:
            results.extend(tool_results)
    return Conversation(prompt=prompt, tool_results=tuple(results), earlier_prompts=tuple(earlier))


def _split_content(content: Any) -> tuple[str, list[ToolResult]]:
    """A user message's own text, and each tool result in it."""
    if isinstance(content, str):
        return content, []
    texts: list[str] = []
    results: list[ToolResult] = []
    for block in content or ():
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "text":
            text = str(block.get("text", ""))
            # The CLI wraps its own notes to the model in <system-reminder>; they are not the user's
            # words, except a task notification, which the model is meant to answer.
            if not text.lstrip().startswith("<system-reminder>") or _TASK_NOTIFICATION.search(text):
                texts.append(text)
        elif block.get("type") == "tool_result":
            results.append(ToolResult(_flatten(block.get("content")), bool(block.get("is_error"))))
    return "\n".join(texts), results


def _flatten(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(
        str(block.get("text", ""))
        for block in content or ()
        if isinstance(block, Mapping) and block.get("type") == "text"
    )
