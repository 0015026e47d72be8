"""The egress proxy tests' fixtures: an origin server on loopback that records what reaches it, local
sandboxes (bubblewrap), and the refusals the proxy reports."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dataplane_agent.sandboxes.local import LocalSandboxDriver
from tests.support.egress import Origin, Reports


@pytest.fixture
async def origin() -> AsyncIterator[Origin]:
    record = Origin(0)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            chunk = await reader.read(4096)
            if not chunk:
                break
            head += chunk
        record.heads.append(head.decode("latin-1"))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\nconnection: close\r\n\r\nhello origin")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    record.port = server.sockets[0].getsockname()[1]
    try:
        yield record
    finally:
        server.close()


@pytest.fixture
def driver(sandbox_root: Path, bwrap: str) -> LocalSandboxDriver:
    return LocalSandboxDriver(sandbox_root, bwrap=bwrap)


@pytest.fixture
def reports() -> Reports:
    return Reports()
