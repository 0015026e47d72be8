"""A PostgreSQL of a test's own that the test stops and starts while it serves.

The cluster is driven from a helper process (`python -m tests.support.restartable_postgres DIR MAX_CONNECTIONS`,
one command per line on its stdin: `start`, `stop fast`, `stop immediate`; it answers `ok <dsn>` or
`error <text>`). Run as root, `EmbeddedPostgres` runs pg_ctl as the `postgres` user, which makes
Python fork() rather than vfork(); forked from a process whose gRPC threads are busy (an in-process
control plane and its clients), the child crashes before it runs pg_ctl. The helper runs no gRPC.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

import structlog

from controlplane.embedded_postgres import EmbeddedPostgres

ROOT = Path(__file__).resolve().parents[2]


class RestartablePostgres:
    """`start()` once; then `restart(mode)` as often as the test likes; `close()` at the end."""

    def __init__(self, max_connections: int = 100) -> None:
        self.max_connections = max_connections
        # A directory of its own under /tmp: its parents must be searchable by the `postgres` user.
        self.data_dir = Path(tempfile.mkdtemp(prefix="astrabox-restartable-pg-"))
        self.dsn = ""
        self._helper: asyncio.subprocess.Process | None = None

    @property
    def port(self) -> int:
        return int(self.dsn.rsplit(":", 1)[1].split("/", 1)[0])

    async def start(self) -> str:
        if self._helper is None:
            self._helper = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "tests.support.restartable_postgres", str(self.data_dir), str(self.max_connections),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=ROOT,
            )  # fmt: skip
        self.dsn = await self._command("start")
        return self.dsn

    async def stop(self, mode: str = "fast") -> None:
        await self._command(f"stop {mode}")

    async def restart(self, mode: str = "fast", down_for: float = 1.0) -> None:
        """Stop the server (`immediate`: as a crash would), leave it down `down_for` seconds, start it."""
        await self.stop(mode)
        await asyncio.sleep(down_for)
        await self.start()

    async def close(self) -> None:
        if self._helper is not None:
            helper, self._helper = self._helper, None
            try:
                await self._send(helper, "stop fast")
            finally:
                assert helper.stdin is not None
                helper.stdin.close()
                await asyncio.wait_for(helper.wait(), 60)
        shutil.rmtree(self.data_dir, ignore_errors=True)

    async def _command(self, line: str) -> str:
        assert self._helper is not None, "start() first"
        return await self._send(self._helper, line)

    @staticmethod
    async def _send(helper: asyncio.subprocess.Process, line: str) -> str:
        assert helper.stdin is not None and helper.stdout is not None
        helper.stdin.write(f"{line}\n".encode())
        await helper.stdin.drain()
        answer = (await asyncio.wait_for(helper.stdout.readline(), 120)).decode().strip()
        status, _, rest = answer.partition(" ")
        if status != "ok":
            raise RuntimeError(f"PostgreSQL helper: {line!r} failed: {rest or 'it exited'}")
        return rest


async def _serve(data_dir: Path, max_connections: str) -> None:
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))  # stdout answers
    # Durable (not `fast`): an immediate stop is a crash, and must lose no committed transaction.
    cluster = EmbeddedPostgres(data_dir, settings={"max_connections": max_connections})
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := (await reader.readline()).decode().strip():
        command, _, mode = line.partition(" ")
        try:
            answer = await cluster.start() if command == "start" else await cluster.stop(mode or "fast")
        except Exception as error:
            print("error", str(error).replace("\n", " | "), flush=True)
        else:
            print("ok", answer or "", flush=True)
    await cluster.stop()


if __name__ == "__main__":
    asyncio.run(_serve(Path(sys.argv[1]), sys.argv[2]))
