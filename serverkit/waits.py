"""Waiting with a deadline, without losing a cancellation.

`bounded` replaces `asyncio.wait_for` everywhere (ruff bans the latter, [tool.ruff.lint]): on
Python 3.11, a task cancelled just as the awaited call completes gets the call's result instead of
its cancellation, so a loop cancelled at shutdown carries on — waiting on a pipe, a socket or its
next wake-up — and whatever waits for it (a task group, the agent's stop) never finishes.
`asyncio.timeout` has no such gap (3.12 rebuilt `wait_for` on it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def bounded(call: Awaitable[T], seconds: float | None) -> T:
    """Await `call` for at most `seconds` (None: no limit); TimeoutError after that."""
    async with asyncio.timeout(seconds):
        return await call
