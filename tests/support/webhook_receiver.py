"""A real HTTP receiver of webhook deliveries on loopback, for the webhook tests: it records every
request (headers and body) and answers from a script of statuses (then 200); a status of None holds
the request open until the test ends (an attempt in flight)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Received:
    headers: dict[str, str]
    body: str

    @property
    def message_id(self) -> str:
        return self.headers["webhook-id"]

    @property
    def payload(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    url: str = ""
    received: list[Received] = field(default_factory=list)
    statuses: list[int | None] = field(default_factory=list)
    arrived: asyncio.Condition = field(default_factory=asyncio.Condition)
    released: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        body = (await request.read()).decode()
        async with self.arrived:
            self.received.append(Received({k.lower(): v for k, v in request.headers.items()}, body))
            self.arrived.notify_all()
        status = self.statuses.pop(0) if self.statuses else 200
        if status is None:
            await self.released.wait()
            status = 200
        return web.Response(status=status, text=f"answered {status}")

    async def wait_for(self, count: int, timeout: float = 30.0) -> list[Received]:
        """The requests once there are at least `count`."""
        async with asyncio.timeout(timeout), self.arrived:
            await self.arrived.wait_for(lambda: len(self.received) >= count)
        return list(self.received)


async def serve_receiver(path: str = "/hooks") -> AsyncIterator[Receiver]:
    receiver = Receiver()
    app = web.Application()
    app.router.add_post(path, receiver.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    receiver.url = f"http://127.0.0.1:{port}{path}"
    try:
        yield receiver
    finally:
        receiver.released.set()
        await runner.cleanup()
