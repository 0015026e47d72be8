"""Terminals: an interactive program on a pseudo-terminal in a session's sandbox.

The agent opens the pseudo-terminal on the host and gives its terminal side to the sandbox's
launcher as stdin, stdout and stderr; the driver makes it the program's controlling terminal
inside (`SandboxDriver.launcher(..., terminal=True)`), so the program's job control, Ctrl-C and
line editing are the sandbox's own: the host never interprets a byte of it. The agent keeps the
other side, writes the client's keystrokes there and reads the program's output back.

Everything is bounded: input waiting for the program to read it (MAX_PENDING_INPUT, else the
terminal is closed with TERMINAL_INPUT_OVERFLOW), output read in chunks, a terminal with neither
input nor output for IDLE_S closed (exit code -1). A terminal with nothing to say sends a
keepalive reply every KEEPALIVE_S, so that the control plane does not count the agent silent.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import signal
import struct
import termios
import time
import tty
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from astrabox.runner.v1 import runner_service_pb2 as pb

CHUNK_BYTES = 64 * 1024
# Keystrokes the program has not read yet, at most.
MAX_PENDING_INPUT = 1024 * 1024
# Closed after this long with neither input nor output.
IDLE_S = 30 * 60.0
KEEPALIVE_S = 60.0
# How long output still drains once the program has ended (its last words; whatever it left
# holding the terminal is ended with it).
DRAIN_S = 5.0
# The exit code of a terminal closed for being idle.
IDLE_EXIT_CODE = -1

Send = Callable[[bytes], Awaitable[None]]


class TerminalOverflow(Exception):
    """More than MAX_PENDING_INPUT of input waited for the program."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    reason = "TERMINAL_INPUT_OVERFLOW"


class Terminal:
    """One pseudo-terminal: made when the request arrives, so that input sent right behind it
    waits here rather than being lost; `close` releases it."""

    def __init__(self, rows: int, columns: int, *, raw: bool = False) -> None:
        self._controller, self.terminal_fd = os.openpty()
        if raw:  # a driver's relay (`SandboxDriver.relays_terminal`): no echo, no signals, nothing cooked
            tty.setraw(self.terminal_fd)
        os.set_blocking(self._controller, False)
        _set_size(self._controller, rows, columns)
        self._pending = bytearray()
        self._overflowed = False
        self._input = asyncio.Event()
        self._active = time.monotonic()
        self._group: int | None = None

    def feed(self, given: pb.TerminalInput) -> None:
        """Take a client's keystrokes or new size (called as they arrive, never blocks)."""
        if given.rows and given.columns:
            _set_size(self._controller, given.rows, given.columns)
            if self._group is not None:  # the launcher's side passes it on (`docker exec -t`)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self._group, signal.SIGWINCH)
        if given.data:
            self._active = time.monotonic()
            if len(self._pending) + len(given.data) > MAX_PENDING_INPUT:
                self._overflowed = True
            else:
                self._pending += given.data
            self._input.set()

    def started(self, group: int) -> None:
        """The launcher runs, as process group `group`, with its own copy of the terminal side."""
        self._group = group
        os.close(self.terminal_fd)
        self.terminal_fd = -1

    async def serve(
        self, process: asyncio.subprocess.Process, send: Send, keepalive: Callable[[], Awaitable[None]]
    ) -> int:
        """Relay until the program ends: its exit code (IDLE_EXIT_CODE when closed for idleness).
        TerminalOverflow when the program leaves too much input unread."""
        reading = asyncio.create_task(self._read(send))
        tasks = [asyncio.create_task(self._write()), asyncio.create_task(self._watch(keepalive))]
        ended = asyncio.create_task(process.wait())
        try:
            await asyncio.wait([ended, *tasks], return_when=asyncio.FIRST_COMPLETED)
            for task in tasks:
                if task.done():
                    task.result()  # the overflow, or idleness
            code = await ended
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(DRAIN_S):
                    await asyncio.shield(reading)
            return code
        except _Idle:
            return IDLE_EXIT_CODE
        finally:
            every: list[asyncio.Task[Any]] = [reading, ended, *tasks]
            for task in every:
                task.cancel()
            await asyncio.wait(every)
            if reading.done() and not reading.cancelled():
                reading.exception()  # a send that failed: the call is gone already

    def close(self) -> None:
        for fd in (self._controller, self.terminal_fd):
            if fd >= 0:
                os.close(fd)
        self._controller = self.terminal_fd = -1

    async def _read(self, send: Send) -> None:
        while True:
            try:
                chunk = os.read(self._controller, CHUNK_BYTES)
            except BlockingIOError:
                await _ready(self._controller, writing=False)
                continue
            except OSError as error:
                if error.errno == errno.EIO:  # every holder of the terminal side closed it
                    return
                raise
            if not chunk:
                return
            self._active = time.monotonic()
            await send(chunk)

    async def _write(self) -> None:
        while True:
            await self._input.wait()
            self._input.clear()
            if self._overflowed:
                raise TerminalOverflow(
                    f"more than {MAX_PENDING_INPUT // 1024} KiB of input waited for the program to read it; "
                    "the terminal was closed"
                )
            while self._pending:
                try:
                    written = os.write(self._controller, self._pending[:CHUNK_BYTES])
                except BlockingIOError:
                    await _ready(self._controller, writing=True)
                    continue
                del self._pending[:written]

    async def _watch(self, keepalive: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(KEEPALIVE_S)
            if time.monotonic() - self._active > IDLE_S:
                raise _Idle
            await keepalive()


class _Idle(Exception):
    """Neither input nor output for IDLE_S."""


def _set_size(fd: int, rows: int, columns: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


async def _ready(fd: int, *, writing: bool) -> None:
    """Until `fd` can be read (or written) without blocking."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    (loop.add_writer if writing else loop.add_reader)(fd, wake)
    try:
        await ready
    finally:
        (loop.remove_writer if writing else loop.remove_reader)(fd)
