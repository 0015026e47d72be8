"""`astrabox run` and `astrabox session …` as a person uses them, against real processes (the real
bundled CLI in the local sandbox, the offline model's scripts):

- `run` creates its session with --permission-mode, --model and --label;
- a turn waiting for a person: on a terminal (a real pseudo-terminal) `run` asks, taking a
  question's option by number and an approval allowed always (a scoped tool grant) or denied with a
  reason; off a terminal it prints the commands that answer, and one of them, run as printed, does;
- a custom tool's call reads as one, not as a permission prompt, and is answered with its result;
- `session show` (readable, and --json), `session grants`, `session revoke-grant`;
- `session list` tells an idle-stopped session from a ready one, and labels its total cost.
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import select
import shlex
import subprocess
import sys
import textwrap
import time

import pytest

from astrabox import agent_files
from astrabox.client import AstraBoxClient
from astrabox.sessionkernel.v1 import session_pb2
from tests.support.stack import Stack, StartStack

pytestmark = pytest.mark.e2e

ASTRABOX = [sys.executable, "-m", "astrabox"]
TIMEOUT = 120


def astrabox(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    """`astrabox COMMAND --target … ARGS…`, its output captured, stdin not a terminal."""
    return subprocess.run(
        [*ASTRABOX, args[0], "--target", stack.address, *args[1:]],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )


def printed_command(line: str) -> list[str]:
    """A command `astrabox` printed (`astrabox session … # what it does`) as this test runs it."""
    words = shlex.split(line.split("    # ")[0])
    assert words[0] == "astrabox", line
    return [*ASTRABOX, *words[1:]]


class Terminal:
    """`astrabox ARGS…` on a pseudo-terminal: what it shows, and what a person types."""

    def __init__(self, *args: str) -> None:
        self._master, slave = pty.openpty()
        self.process = subprocess.Popen(
            [*ASTRABOX, *args], stdin=slave, stdout=slave, stderr=slave, close_fds=True, env=os.environ.copy()
        )
        os.close(slave)
        self.screen = ""
        self._seen = 0

    def expect(self, text: str, timeout: float = TIMEOUT) -> str:
        """Waits until `text` shows after what the last expect matched; returns what showed up to it."""
        deadline = time.monotonic() + timeout
        while (found := self.screen.find(text, self._seen)) < 0:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._master], [], [], left)[0]:
                raise AssertionError(f"{text!r} never showed; the terminal shows:\n{self.screen}")
            try:
                chunk = os.read(self._master, 65536)
            except OSError:  # the program ended and closed the terminal
                chunk = b""
            if not chunk:
                raise AssertionError(f"{text!r} never showed before the end:\n{self.screen}")
            self.screen += chunk.decode(errors="replace").replace("\r\n", "\n")
        shown, self._seen = self.screen[self._seen : found + len(text)], found + len(text)
        return shown

    def type(self, line: str) -> None:
        os.write(self._master, line.encode() + b"\n")

    def wait(self) -> int:
        """Its exit status, once it ended (what it still printed is read first)."""
        while select.select([self._master], [], [], 5)[0]:
            try:
                chunk = os.read(self._master, 65536)
            except OSError:
                break
            if not chunk:
                break
            self.screen += chunk.decode(errors="replace").replace("\r\n", "\n")
        status = self.process.wait(timeout=TIMEOUT)
        os.close(self._master)
        return status


def session_id_of(screen: str) -> str:
    first = screen.lstrip().splitlines()[0]
    assert first.startswith("session "), screen
    return first.split()[1]


async def test_run_asks_on_a_terminal_a_question_by_number_and_an_approval_always_or_denied(
    stack: Stack, client: AstraBoxClient
) -> None:
    question = Terminal("run", "--target", stack.address, "--permission-mode", "default", "ask: Which colour? Red|Blue")
    question.expect("? Which colour? [Red | Blue]")
    shown = question.expect("your answer: a number, or your own words > ")
    assert "1) Red" in shown and "2) Blue" in shown, question.screen
    question.type("2")
    question.expect("↳ answered Which colour? → Blue")
    question.expect("You chose: Blue")
    question.expect("✓ turn completed")
    assert question.wait() == 0, question.screen
    assert "answer it from a shell" not in question.screen  # a terminal is asked, not told

    always = Terminal("run", "--target", stack.address, "--permission-mode", "default", "run: touch tty.txt")
    always.expect("? may Bash run: touch tty.txt")
    shown = always.expect("choose 1, 2 or 3 > ")
    assert "1) allow this call" in shown and "2) allow always" in shown and "3) deny it" in shown, always.screen
    always.type("2")
    always.expect("which later Bash calls? a pattern (* any run of characters, ? one), or empty for every call > ")
    always.type("touch *")
    always.expect("↳ allowed")
    always.expect("● granted: Bash runs without asking, calls matching 'touch *', for the rest of the session")
    always.expect("✓ turn completed")
    assert always.wait() == 0, always.screen
    session = await client.get_session(session_id_of(always.screen))
    assert [(g.tool_name, g.input_pattern) for g in session.tool_grants] == [("Bash", "touch *")]

    denied = Terminal("run", "--target", stack.address, "--permission-mode", "default", "run: rm -rf /workspace")
    denied.expect("? may Bash run: rm -rf /workspace")
    denied.expect("choose 1, 2 or 3 > ")
    denied.type("7")  # no such choice: asked again
    denied.expect("choose 1, 2 or 3 > ")
    denied.type("3")
    denied.expect("why? (the model reads it) > ")
    denied.type("not the workspace")
    denied.expect("↳ denied: not the workspace")
    denied.expect("The command was denied: not the workspace")
    denied.expect("✓ turn completed")
    assert denied.wait() == 0, denied.screen
    assert not (await client.get_session(session_id_of(denied.screen))).tool_grants


async def test_off_a_terminal_run_says_what_waits_and_the_printed_command_answers_it(
    stack: Stack, client: AstraBoxClient
) -> None:
    run = await asyncio.create_subprocess_exec(
        *ASTRABOX,
        "run",
        "--target",
        stack.address,
        "--permission-mode",
        "default",
        "--model",
        "claude-sonnet-4-5",
        "--label",
        "team=red",
        "--label",
        "tier=gold",
        "run: touch approved.txt",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert run.stdout is not None
    lines: list[str] = []
    async with asyncio.timeout(TIMEOUT):
        while not lines or "not on a terminal, so answer it from a shell" not in lines[-1]:
            lines.append((await run.stdout.readline()).decode())
            assert lines[-1], "".join(lines)
        commands = [(await run.stdout.readline()).decode().strip() for _ in range(4)]
    sid = session_id_of(lines[0])
    assert "? may Bash run: touch approved.txt" in "".join(lines)
    assert "engine connected (model claude-sonnet-4-5" in "".join(lines)  # --model reached the engine
    assert [c.split("    # ")[1] for c in commands] == [
        "allow this call",
        "allow it and later Bash calls matching it",
        "allow it and every later Bash call",
        "deny it; the model reads why",
    ]

    session = await client.get_session(sid)
    assert session.state == session_pb2.SESSION_STATE_WAITING_FOR_INPUT
    assert (session.permission_mode, session.model) == ("default", "claude-sonnet-4-5")
    assert dict(session.labels) == {"team": "red", "tier": "gold"}
    shown = astrabox(stack, "session", "show", sid)
    assert shown.returncode == 0, shown.stderr
    assert "  state        WAITING_FOR_INPUT\n" in shown.stdout
    assert "  engine       claude_code, model claude-sonnet-4-5, permission mode default\n" in shown.stdout
    assert "  labels       team=red, tier=gold\n" in shown.stdout
    assert "  pending\n    ? may Bash run: touch approved.txt  (approval " in shown.stdout
    assert commands[1] in shown.stdout  # the same way to answer
    assert "  tool grants  none\n" in shown.stdout

    answered = subprocess.run(printed_command(commands[1]), capture_output=True, text=True, timeout=TIMEOUT)
    assert answered.returncode == 0, answered.stderr
    assert "granted Bash (calls matching 'touch approved.txt', for the rest of the session)" in answered.stdout
    async with asyncio.timeout(TIMEOUT):
        rest, errors = await run.communicate()
    assert run.returncode == 0, errors.decode()
    out = "".join(lines) + rest.decode()
    assert "↳ allowed" in out
    assert (
        "● granted: Bash runs without asking, calls matching 'touch approved.txt', for the rest of the session" in out
    )
    assert "EVENT_KIND_" not in out
    [result] = [line for line in out.splitlines() if "● result:" in line]
    [done] = [line for line in out.splitlines() if "✓ turn completed" in line]
    assert " · conversation so far $" in result and " · this turn $" in done, out

    session = await client.get_session(sid)
    [grant] = session.tool_grants
    listed = astrabox(stack, "session", "grants", sid)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith(f"{grant.grant_id}  Bash  calls matching 'touch approved.txt'"), listed.stdout
    as_json = json.loads(astrabox(stack, "session", "show", sid, "--json").stdout)
    assert as_json["sessionId"] == sid and as_json["labels"] == {"team": "red", "tier": "gold"}
    assert [g["grantId"] for g in as_json["toolGrants"]] == [grant.grant_id]
    shown = astrabox(stack, "session", "show", sid).stdout
    assert "  state        READY: its runtime is up\n" in shown
    assert (
        f"  usage        1 turn · {session.usage.input_tokens + session.usage.cache_creation_input_tokens + session.usage.cache_read_input_tokens:,} in"
        in shown
    )
    assert f"total ${session.usage.cost_usd:.4f}\n" in shown
    assert f"  tool grants\n    {grant.grant_id}  Bash  calls matching 'touch approved.txt'" in shown

    revoked = astrabox(stack, "session", "revoke-grant", sid, grant.grant_id)
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stdout == (
        f"revoked {grant.grant_id} (Bash: calls matching 'touch approved.txt', for the rest of the session);"
        " 0 grants left\n"
    )
    assert not (await client.get_session(sid)).tool_grants
    assert astrabox(stack, "session", "grants", sid).stdout == (
        f"session {sid} has no tool grants: every approval is asked for\n"
    )
    events = astrabox(stack, "session", "events", sid).stdout
    assert f"● grant {grant.grant_id} revoked: its tool asks again" in events


async def test_session_create_takes_the_mode_the_model_and_labels(stack: Stack, client: AstraBoxClient) -> None:
    created = astrabox(
        stack, "session", "create", "--permission-mode", "plan", "--model", "claude-haiku-4-5", "--label", "a=1"
    )
    assert created.returncode == 0, created.stderr
    session = await client.get_session(created.stdout.split()[0])
    assert (session.permission_mode, session.model, dict(session.labels)) == ("plan", "claude-haiku-4-5", {"a": "1"})
    bad = astrabox(stack, "session", "create", "--label", "no-equals")
    assert bad.returncode == 2 and "'no-equals' is not KEY=VALUE" in bad.stderr
    wrong_mode = astrabox(stack, "session", "create", "--permission-mode", "sometimes")
    assert wrong_mode.returncode == 1 and "PERMISSION_MODE_INVALID" in wrong_mode.stderr


SHOP = textwrap.dedent(
    """\
    name: shop
    custom_tools:
      - name: lookup_order
        description: Looks an order up by its id and says where it is
        input_schema:
          type: object
          properties: {order_id: {type: string}}
          required: [order_id]
    """
)


async def test_a_custom_tool_call_reads_as_one_and_is_answered_with_its_result(
    stack: Stack, client: AstraBoxClient
) -> None:
    [agent] = agent_files.parse(SHOP)
    await client.agents.apply(agent.name, agent.spec)
    run = await asyncio.create_subprocess_exec(
        *ASTRABOX,
        "run",
        "--target",
        stack.address,
        "--agent",
        "shop",
        'tool: mcp__client__lookup_order {"order_id": "A-7"}',
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert run.stdout is not None
    lines: list[str] = []
    async with asyncio.timeout(TIMEOUT):
        while not lines or "answer it from a shell" not in lines[-1]:
            lines.append((await run.stdout.readline()).decode())
            assert lines[-1], "".join(lines)
        commands = [(await run.stdout.readline()).decode().strip() for _ in range(3)]
    out = "".join(lines)
    assert '⚒ custom tool lookup_order called with {"order_id": "A-7"}: your client runs it' in out, out
    assert "? may" not in out  # not a permission prompt
    assert "the result of custom tool lookup_order" in lines[-1]
    [with_result] = [c for c in commands if c.endswith("# the tool's result, which the model reads")]

    answer = printed_command(with_result.replace("'TEXT'", "'A-7 left Lyon on Monday'"))
    answered = subprocess.run(answer, capture_output=True, text=True, timeout=TIMEOUT)
    assert answered.returncode == 0, answered.stderr
    async with asyncio.timeout(TIMEOUT):
        rest, errors = await run.communicate()
    assert run.returncode == 0, errors.decode()
    assert "↳ tool result sent: A-7 left Lyon on Monday" in rest.decode()
    assert "A-7 left Lyon on Monday" in rest.decode().split("↳ tool result sent")[1]  # the model quoted it


async def test_session_list_and_show_tell_an_idle_stopped_session_from_a_ready_one(stacks: StartStack) -> None:
    stack = stacks(controlplane_args=("--idle-stop-after", "2"))
    async with AstraBoxClient.connect(stack.address) as client:
        stopped = (await client.create_session()).session_id
        async with asyncio.timeout(60):
            async for event in client.watch(stopped):
                if event.WhichOneof("payload") == "runtime_stopped":
                    break
        listed = astrabox(stack, "session", "list")
        assert listed.returncode == 0, listed.stderr
        [line] = [line for line in listed.stdout.splitlines() if line.startswith(stopped)]
        assert f"{stopped}  READY (idle-stopped)  " in line and line.endswith("total $0.0000"), line
        shown = astrabox(stack, "session", "show", stopped).stdout
        assert "  state        READY (idle-stopped): its runtime was stopped while idle" in shown, shown


def test_every_session_action_is_listed_with_what_it_does() -> None:
    helped = subprocess.run([*ASTRABOX, "session", "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0, helped.stderr
    for action, words in {
        "grants": "the session's tool grants",
        "revoke-grant": "revoke a tool grant",
        "show": "the session: state",
        "interrupt": "interrupt the running turn",
    }.items():
        assert any(line.split()[:1] == [action] and words in line for line in helped.stdout.splitlines()), helped.stdout
    run_help = subprocess.run([*ASTRABOX, "run", "--help"], capture_output=True, text=True, timeout=60).stdout
    for option in ("--permission-mode MODE", "--model MODEL", "--label KEY=VALUE"):
        assert option in run_help, run_help
