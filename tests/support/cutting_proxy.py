"""A TCP proxy on loopback that can cut or stall every connection through it: a network fault
between two real processes (an agent and its control plane) that neither of them can tell from
a real one.

It runs its own event loop in a thread, so a test may block (waiting for a process's log line)
while traffic still flows through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator


class CuttingProxy:
    """Forwards `host`:`port` (default 127.0.0.1 and a free port) to `target` ("host:port") until
    cut, stalled or closed."""

    def __init__(self, target: str, *, host: str = "127.0.0.1", port: int = 0) -> None:
        target_host, _, target_port = target.rpartition(":")
        self._target = (target_host, int(target_port))
        self._listen_on = (host, port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cutting-proxy", daemon=True)
        self._flowing: asyncio.Event
        self._server: asyncio.Server
        self._writers: set[asyncio.StreamWriter] = set()
        # The server runs each connection's `_accept` as a task of its own: kept to be ended at close.
        self._connections: set[asyncio.Task[None]] = set()
        self.connections = 0  # accepted so far
        self.address = ""

    def start(self) -> str:
        """Listen; returns the address ("127.0.0.1:<port>", "[::1]:<port>")."""
        self._thread.start()
        self._call(self._listen())
        return self.address

    def cut(self) -> None:
        """Abort every open connection (both ends see a reset); new ones are accepted."""
        self._call(self._cut())

    def stall(self) -> None:
        """Stop forwarding: connections stay open and bytes wait, as in a partition."""
        self._loop.call_soon_threadsafe(self._flowing.clear)

    def resume(self) -> None:
        self._loop.call_soon_threadsafe(self._flowing.set)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

    def _call(self, coroutine: object) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=10)  # type: ignore[arg-type]

    async def _listen(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        host, port = self._listen_on
        self._server = await asyncio.start_server(self._accept, host, port)
        bound = self._server.sockets[0].getsockname()[1]
        self.address = f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, upstream_writer}
        try:
            await asyncio.gather(self._pump(reader, upstream_writer), self._pump(upstream_reader, writer))
        finally:
            for end in (writer, upstream_writer):
                self._writers.discard(end)
                end.transport.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while data := await reader.read(65536):
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        writer.transport.abort()

    async def _cut(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()

    async def _shutdown(self) -> None:
        self._server.close()
        await self._cut()
        # The aborted ends let every connection's pumps return: wait for their tasks to end before
        # the loop stops, so that none is destroyed pending. (Not cancelled: in Python 3.11 the
        # stream server's own callback would then log the CancelledError as an error.)
        if self._connections:
            await asyncio.wait(set(self._connections), timeout=5)
        await self._server.wait_closed()


@contextlib.contextmanager
def cutting_proxy(target: str, *, host: str = "127.0.0.1", port: int = 0) -> Iterator[CuttingProxy]:
    proxy = CuttingProxy(target, host=host, port=port)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()
