"""Terminals: an interactive program in a session's sandbox (SessionKernelService.OpenTerminal).

    async with client.open_terminal(session_id, rows=40, columns=120) as terminal:
        await terminal.write(b"python3\\n")
        async for output in terminal:       # bytes, as the program writes them
            ...
        print(terminal.exit_code)           # set once the output ended

The program (a login shell unless `command` names another) runs on a pseudo-terminal in the
workspace until it exits, or until the terminal is closed: leaving the `async with` block, or
`close()`, ends it with everything it started. `close_input()` says the client will write no
more and leaves the program running. A terminal has no deadline of its own; the server closes
it after 30 minutes with neither input nor output (exit code -1).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import grpc

from astrabox.errors import AstraBoxError
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as api

__all__ = ["MAX_INPUT_BYTES", "Terminal"]

MAX_INPUT_BYTES = 64 * 1024
"""The most input one message carries (the server's bound): `Terminal.write` splits longer input."""


class Terminal:
    """An open terminal: write keystrokes, read output; `exit_code` once the program ended."""

    def __init__(self, call: Any, first: api.OpenTerminalRequest) -> None:
        self._call = call
        self._first: api.OpenTerminalRequest | None = first
        self._closed = False
        self.exit_code: int | None = None
        """The program's exit code (negative: ended by that signal; -1: closed for idleness)."""

    async def __aenter__(self) -> Terminal:
        await self._send(self._take_first())
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()

    def _take_first(self) -> api.OpenTerminalRequest:
        first, self._first = self._first, None
        return first if first is not None else api.OpenTerminalRequest()

    async def write(self, data: bytes) -> None:
        """Send keystrokes (b"\\x03" is Ctrl-C, b"\\x04" Ctrl-D at a shell's prompt)."""
        for start in range(0, len(data), MAX_INPUT_BYTES):
            await self._send(api.OpenTerminalRequest(input=data[start : start + MAX_INPUT_BYTES]))

    async def resize(self, rows: int, columns: int) -> None:
        """Give the terminal a new size (each 1-1000): the program gets SIGWINCH."""
        await self._send(api.OpenTerminalRequest(size=api.TerminalSize(rows=rows, columns=columns)))

    async def close_input(self) -> None:
        """Write no more; the program goes on until it exits."""
        try:
            await self._call.done_writing()
        except grpc.aio.AioRpcError as error:
            raise AstraBoxError.from_rpc_error(error) from error

    async def close(self) -> None:
        """End the program (and whatever it started) unless it has ended already; its output ends."""
        if self._call.done():  # ended (cancelling a finished call upsets gRPC's interceptor tasks)
            return
        self._closed = True
        self._call.cancel()

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._output()

    async def _output(self) -> AsyncIterator[bytes]:
        try:
            while True:
                response = await self._call.read()
                if response is grpc.aio.EOF:
                    break
                which = response.WhichOneof("piece")
                if which == "output":
                    yield response.output
                elif which == "exit_code":
                    self.exit_code = response.exit_code
        except grpc.aio.AioRpcError as error:
            if self._closed:
                return
            raise AstraBoxError.from_rpc_error(error) from error
        except asyncio.CancelledError:
            if self._closed and not _cancelling():  # the call this terminal cancelled: its output is over
                return
            raise
        if self.exit_code is None:
            raise AstraBoxError(grpc.StatusCode.UNAVAILABLE, "the terminal's stream ended without an exit code")

    async def _send(self, request: api.OpenTerminalRequest) -> None:
        try:
            await self._call.write(request)
        except grpc.aio.AioRpcError as error:
            raise AstraBoxError.from_rpc_error(error) from error
        except asyncio.InvalidStateError:
            pass  # the program ended and the call with it: the output says how


def _cancelling() -> bool:
    """Whether the running task itself is being cancelled (not only the call)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
