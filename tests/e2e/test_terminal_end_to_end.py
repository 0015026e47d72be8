"""`astrabox session shell` on the real stack, driven through a pseudo-terminal as a person's
terminal would drive it: prompts, many lines, a program that asks, Ctrl-C, a resize, the exit
status, and the person's terminal given back as it was. Also piped input, and refusals."""

from __future__ import annotations

import asyncio
import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time

import grpc
import pytest

from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as api
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

WAIT_S = 60.0


class Screen:
    """The person's side of a pseudo-terminal the CLI runs on."""

    def __init__(self, rows: int, columns: int) -> None:
        self.controller, self.terminal = os.openpty()
        self.resize(rows, columns)
        self.output = b""

    def resize(self, rows: int, columns: int) -> None:
        fcntl.ioctl(self.controller, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))

    def type(self, keys: bytes) -> None:
        os.write(self.controller, keys)

    def expect(self, pattern: bytes, since: int = 0) -> re.Match[bytes]:
        deadline = time.monotonic() + WAIT_S
        while (found := re.search(pattern, self.output[since:])) is None:
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r} in {WAIT_S:g} s: {self.output[since:][-1500:]!r}"
            if select.select([self.controller], [], [], min(left, 1.0))[0]:
                try:
                    self.output += os.read(self.controller, 65536)
                except OSError:  # the CLI ended and closed its side
                    raise AssertionError(f"no {pattern!r}: {self.output[since:][-1500:]!r}") from None
        return found


async def ready_session(client: AstraBoxClient) -> str:
    session = await client.create_session()
    return (await client.wait_for_state(session.session_id, ["READY"], timeout=120)).session_id


def shell_command(stack: Stack, session_id: str) -> list[str]:
    return [sys.executable, "-m", "astrabox", "session", "--target", stack.address, "shell", session_id]


async def test_the_cli_runs_an_interactive_shell_in_a_terminal(client: AstraBoxClient, stack: Stack) -> None:
    session_id = await ready_session(client)
    screen = Screen(30, 100)
    before = termios.tcgetattr(screen.terminal)
    # setsid --ctty: the pseudo-terminal is the CLI's controlling terminal, so that a resize signals it.
    cli = subprocess.Popen(
        ["setsid", "--ctty", *shell_command(stack, session_id)],
        stdin=screen.terminal,
        stdout=screen.terminal,
        stderr=screen.terminal,
    )
    try:
        await asyncio.to_thread(run_the_shell, screen)
        code = await asyncio.to_thread(cli.wait, WAIT_S)
    finally:
        cli.kill()
    assert code == 5
    assert termios.tcgetattr(screen.terminal) == before, "the person's terminal was not given back as it was"


def run_the_shell(screen: Screen) -> None:
    screen.type(b"PS1='ready> '\n")
    screen.expect(rb"ready> $")
    screen.type(b"[ -t 0 ] && echo on-a-tty; stty size\n")
    screen.expect(rb"on-a-tty\r\n30 100\r\n")

    # Line after line, each typed once the last answered, as a person types.
    for line in range(12):
        mark = len(screen.output)
        screen.type(f"echo line-$(({line}*2))\n".encode())
        screen.expect(rf"[\r\n]line-{line * 2}\r\n".encode(), mark)

    mark = len(screen.output)
    screen.type(b"read -p 'name? ' name; echo \"hello, $name\"\n")
    screen.expect(rb"name\? ", mark)
    screen.type(b"Ada\r")
    screen.expect(rb"hello, Ada\r\n", mark)

    mark = len(screen.output)
    screen.type(b"sh -c 'echo sleeping; exec sleep 300'; echo not-interrupted\n")
    screen.expect(rb"[\r\n]sleeping\r\n", mark)
    screen.type(b"\x03")
    screen.expect(rb"ready> $", mark)
    assert not re.search(rb"[\r\n]not-interrupted", screen.output[mark:])

    screen.resize(45, 132)
    for _ in range(100):  # the new size travels beside the keystrokes: asked until it shows
        mark = len(screen.output)
        screen.type(b"stty size\n")
        if screen.expect(rb"[\r\n](\d+ \d+)\r\n", mark)[1] == b"45 132":
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the new size never reached the program")

    screen.type(b"exit 5\n")


async def test_piped_input_runs_and_ends_with_the_programs_status(client: AstraBoxClient, stack: Stack) -> None:
    session_id = await ready_session(client)
    done = await asyncio.to_thread(
        subprocess.run,
        shell_command(stack, session_id),
        input=b"echo piped-$((2+3)) > from-the-shell.txt; cat from-the-shell.txt; exit 4\n",
        capture_output=True,
        timeout=WAIT_S,
    )
    assert done.returncode == 4, done.stderr
    assert b"piped-5" in done.stdout
    listed = {entry.name for entry in await client.list_workspace(session_id, "")}
    assert "from-the-shell.txt" in listed

    # Without an `exit`: the end of the input is Ctrl-D, and the shell ends as it would for a person.
    done = await asyncio.to_thread(
        subprocess.run,
        shell_command(stack, session_id),
        input=b"echo done-$((1+1))\n",
        capture_output=True,
        timeout=WAIT_S,
    )
    assert done.returncode == 0, done.stderr
    assert b"done-2" in done.stdout


async def test_the_sdk_sees_output_and_exit_code_and_bad_input_is_refused(client: AstraBoxClient) -> None:
    session_id = await ready_session(client)
    async with client.open_terminal(session_id, command="read line; echo got:$line; exit 9") as terminal:
        await terminal.write(b"abc\r")
        output = b"".join([chunk async for chunk in terminal])
    assert b"got:abc" in output and terminal.exit_code == 9

    for opening, code, reason in (
        ({"term": "vt100; rm -rf /"}, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT"),
        ({"rows": 1001}, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT"),
    ):
        with pytest.raises(AstraBoxError) as refused:
            async with client.open_terminal(session_id, **opening) as terminal:  # type: ignore[arg-type]
                [chunk async for chunk in terminal]
        assert (refused.value.code, refused.value.reason) == (code, reason), refused.value
        assert len(str(refused.value)) < 500

    with pytest.raises(AstraBoxError) as refused:
        async with client.open_terminal("8d2f5c9e-0000-4000-8000-000000000000") as terminal:
            [chunk async for chunk in terminal]
    assert refused.value.code == grpc.StatusCode.NOT_FOUND

    with pytest.raises(AstraBoxError) as refused:
        async with client.open_terminal(session_id, command="cat") as terminal:
            await terminal.write(b"x" * (64 * 1024))  # split by the SDK: fine
            await terminal._send(api.OpenTerminalRequest(input=b"y" * (64 * 1024 + 1)))  # one message too large
            [chunk async for chunk in terminal]
    assert (refused.value.code, refused.value.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "FIELD_TOO_LONG")


async def test_a_killed_cli_ends_its_terminals_program(client: AstraBoxClient, stack: Stack) -> None:
    session_id = await ready_session(client)
    screen = Screen(24, 80)
    command = [*shell_command(stack, session_id), "--command", "echo started; exec sleep 4545"]
    cli = subprocess.Popen(command, stdin=screen.terminal, stdout=screen.terminal, stderr=screen.terminal)
    try:
        await asyncio.to_thread(screen.expect, rb"started")
        assert sleeping("sleep 4545")
    finally:
        cli.kill()
        cli.wait()
    async with asyncio.timeout(WAIT_S):  # the call is cancelled, the agent ends the program
        while sleeping("sleep 4545"):
            await asyncio.sleep(0.2)


def sleeping(command: str) -> bool:
    """Whether a process on this host (a sandbox's included: same kernel) runs `command`."""
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if cmdline.read().replace(b"\0", b" ").strip() == command.encode():
                    return True
        except OSError:
            continue
    return False
