"""`astrabox session shell ID [--command CMD]`: your terminal, attached to a program in the session's sandbox.

Your terminal is put in raw mode while the program runs, so every key (Ctrl-C included) goes to
the program, and restored afterwards; its size follows yours (SIGWINCH). Without a terminal
(input from a pipe or a file) the input is sent as it is and its end as Ctrl-D, the end of input
for a program reading the terminal (a shell exits), once the program waits for more: `echo ls | astrabox session shell ID`. The
exit status is the program's (128+N for one ended by signal N).

Your input is read with os.read on its descriptor, left blocking: stdin and stdout are often the
same open terminal, and made non-blocking (as an asyncio pipe reader makes it) the output's writes
would fail with EAGAIN as soon as the terminal is busy.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import stat
import sys
import termios
import tty
from collections.abc import Iterator

from astrabox.client import AstraBoxClient
from astrabox.terminals import Terminal

__all__ = ["shell"]

_TERM = re.compile(r"[A-Za-z0-9._+-]{1,64}")
_READ_BYTES = 64 * 1024
# What the end of piped input is sent as: the terminal's end-of-file character (VEOF, Ctrl-D).
_END_OF_INPUT = b"\x04"
# How long the program's output is quiet before it counts as waiting for input.
_QUIET_S = 0.3
# What an exit code ended by signal N becomes, as a shell reports it.
_SIGNALLED = 128


async def shell(client: AstraBoxClient, session_id: str, command: str = "") -> int:
    """Attach this process's terminal (or its stdin and stdout) to a program in the session's sandbox."""
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    interactive = os.isatty(stdin)
    rows, columns = _size(stdout if os.isatty(stdout) else stdin)
    term = os.environ.get("TERM", "")
    opened = client.open_terminal(
        session_id, command=command, term=term if _TERM.fullmatch(term) else "", rows=rows, columns=columns
    )
    async with opened as terminal:
        with _raw(stdin, interactive), _following_size(terminal, stdout if os.isatty(stdout) else stdin):
            quiet = _Quiet()
            sending = asyncio.create_task(_send_input(terminal, stdin, quiet))
            try:
                async for output in terminal:
                    quiet.heard()
                    _write_all(stdout, output)
            finally:
                sending.cancel()
                await asyncio.wait((sending,))
    code = terminal.exit_code
    assert code is not None  # the output ends with it, or raises
    if code == -1:
        print("\r\nastrabox: the terminal was closed after 30 minutes idle", file=sys.stderr)
        return 1
    return code if code >= 0 else _SIGNALLED - code


class _Quiet:
    """When the program last wrote something."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.last = self._loop.time()

    def heard(self) -> None:
        self.last = self._loop.time()

    async def wait(self, seconds: float) -> None:
        """Until the program has written nothing for `seconds`."""
        while True:
            left = self.last + seconds - self._loop.time()
            if left <= 0:
                return
            await asyncio.sleep(left)  # a deadline that moves with the output, not an event


async def _send_input(terminal: Terminal, fd: int, quiet: _Quiet) -> None:
    pollable = not stat.S_ISREG(os.fstat(fd).st_mode)  # epoll refuses regular files: those are read in a thread
    loop = asyncio.get_running_loop()
    while True:
        if pollable:
            await _readable(loop, fd)
            data = os.read(fd, _READ_BYTES)
        else:
            data = await asyncio.to_thread(os.read, fd, _READ_BYTES)
        if not data:
            await _end_of_input(terminal, quiet)
            return
        await terminal.write(data)


async def _readable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


async def _end_of_input(terminal: Terminal, quiet: _Quiet) -> None:
    """The end of piped input, as a person would end it: Ctrl-D once the program waits (its output
    gone quiet), and again each time it waits again, until it ends. (Typed ahead while a command
    runs, Ctrl-D would be lost: a terminal in line mode keeps it as an end of line without data,
    which the shell's line editor then reads as nothing.)"""
    while True:
        await quiet.wait(_QUIET_S)
        await terminal.write(_END_OF_INPUT)
        quiet.heard()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _size(fd: int) -> tuple[int, int]:
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return 24, 80
    return max(1, min(size.lines, 1000)), max(1, min(size.columns, 1000))


@contextlib.contextmanager
def _raw(fd: int, interactive: bool) -> Iterator[None]:
    """The terminal in raw mode (no echo, no line editing, no signals: all of it is the program's)."""
    if not interactive:
        yield
        return
    saved = termios.tcgetattr(fd)
    tty.setraw(fd, termios.TCSANOW)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@contextlib.contextmanager
def _following_size(terminal: Terminal, fd: int) -> Iterator[None]:
    """Pass each new size of this terminal (SIGWINCH) on to the program's."""
    loop = asyncio.get_running_loop()
    resizes: set[asyncio.Task[None]] = set()

    def resized() -> None:
        task = asyncio.ensure_future(terminal.resize(*_size(fd)))
        resizes.add(task)
        task.add_done_callback(resizes.discard)

    loop.add_signal_handler(signal.SIGWINCH, resized)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGWINCH)
        for task in resizes:
            task.cancel()
