"""The unix socket a route of the agent serves its sandboxes on (the model route, the egress proxy).

Each route has a directory of its own holding only its socket, bind-mounted into every sandbox.
Sandboxes enter with uids of their own, so the directory is 0755 and the socket 0666: the token a
sandbox presents, not the file mode, is what admits it. Every connection's task is tracked so that
stopping the route ends them all rather than leaving them to outlive it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

from serverkit.waits import bounded

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

_STOP_WAIT_S = 5.0


class SandboxSocket:
    """A route's listening socket at `directory/name` and the connections it has open."""

    def __init__(self, directory: Path, name: str, *, limit: int) -> None:
        self.directory = Path(directory)
        self.path = self.directory / name
        self._limit = limit  # the stream reader's buffer: the longest line or head it takes
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def open_connections(self) -> int:
        """How many connections are being served, the caller's own included."""
        return len(self._connections)

    async def start(self, handler: Handler) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o755)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

        async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self._connections.add(task)
            try:
                await handler(reader, writer)
            finally:
                self._connections.discard(task)

        listener = bind_unix(self.path)
        self._server = await asyncio.start_unix_server(tracked, sock=listener, limit=self._limit)
        os.chmod(self.path, 0o666)

    async def stop(self) -> bool:
        """Stop listening, end every connection and remove the socket; whether it was serving."""
        if self._server is None:
            return False
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(self._connections, timeout=_STOP_WAIT_S)
        with contextlib.suppress(asyncio.TimeoutError):
            await bounded(self._server.wait_closed(), _STOP_WAIT_S)
        self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        return True


def bind_unix(path: Path) -> socket.socket:
    """A listening unix socket at `path`, however long the path (through its directory's fd)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if len(os.fsencode(path)) < 100:
            listener.bind(str(path))
        else:
            directory = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
            try:
                listener.bind(f"/proc/self/fd/{directory}/{path.name}")
            finally:
                os.close(directory)
        listener.listen(128)
        listener.setblocking(False)
    except BaseException:
        listener.close()
        raise
    return listener
