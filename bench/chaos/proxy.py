"""A TCP proxy on loopback that can cut or stall the connections through it.

Clients (watchers, the driver's calls, an agent's Runner stream) dial the
proxy instead of a control plane; each new connection goes to the first of the
proxy's upstreams (in a random order) that accepts it, so a control-plane
replica that was killed is simply skipped. The faults act on every connection
open at the time:

- `cut()` closes them at once (both sides see a reset stream and redial);
- `stall(seconds)` stops forwarding bytes in both directions for that long and
  keeps the sockets open, as a network partition that TCP does not notice: a
  stream stalled past the agent's lease makes its lease lapse while the agent
  still believes it is connected. New connections made during a stall stall too.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Sequence

_CHUNK = 64 * 1024
_CONNECT_TIMEOUT_S = 2.0


class CuttingProxy:
    """One listening socket on 127.0.0.1 forwarding to `upstreams` ("host:port")."""

    def __init__(self, name: str, upstreams: Sequence[str], rng: random.Random) -> None:
        self.name = name
        self.upstreams = list(upstreams)
        self._rng = rng
        self._server: asyncio.Server | None = None
        self._open: set[_Connection] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self.address = ""
        self.connections_made = 0

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.address = f"127.0.0.1:{port}"
        return self.address

    async def close(self) -> None:
        self._flowing.set()
        if self._server is not None:
            self._server.close()
        self.cut()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    def cut(self) -> int:
        """Close every open connection; how many there were."""
        cut = list(self._open)
        for connection in cut:
            connection.close()
        return len(cut)

    async def stall(self, seconds: float) -> None:
        """Forward nothing for `seconds`, then carry on where the bytes stopped."""
        self._flowing.clear()
        try:
            await asyncio.sleep(seconds)
        finally:
            self._flowing.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = await self._dial()
        if upstream is None:
            writer.close()
            return
        self.connections_made += 1
        connection = _Connection(writer, upstream[1])
        self._open.add(connection)
        try:
            await asyncio.gather(
                self._pump(reader, upstream[1], connection),
                self._pump(upstream[0], writer, connection),
            )
        finally:
            self._open.discard(connection)
            connection.close()

    async def _dial(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        for target in self._rng.sample(self.upstreams, len(self.upstreams)):
            host, _, port = target.rpartition(":")
            try:
                return await asyncio.wait_for(asyncio.open_connection(host, int(port)), _CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError):
                continue
        return None

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, connection: _Connection) -> None:
        try:
            while data := await source.read(_CHUNK):
                await self._flowing.wait()
                if connection.closed:
                    return
                sink.write(data)
                await sink.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            connection.close()


class _Connection:
    """Both sockets of one proxied connection; closing either end closes both."""

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self._writers = (client, upstream)
        self.closed = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for writer in self._writers:
            # An abort (RST), not a FIN: the peer sees the connection die, not a polite end.
            transport = writer.transport
            if not transport.is_closing():
                transport.abort()
