"""Calls into an engine that neither hang nor raise past their caller.

An engine is a separate process behind a pipe: any call may stall, and a
stalled call must not hold up a turn, a stop or the agent's shutdown. So every
call is bounded by a deadline (`bounded`), closing an engine never raises
(`close_quietly`), and a failure reads as one line (`describe`) in the reasons
that turns and runtimes record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

import structlog

from dataplane_agent.engines.base import EngineSession

log = structlog.get_logger(__name__)

T = TypeVar("T")


async def bounded(call: Awaitable[T], seconds: float) -> T:
    """Await `call` for at most `seconds`; TimeoutError after that.

    Not `asyncio.wait_for`: on Python 3.11 a caller cancelled just as `call`
    completes gets the result instead of its cancellation. A reader or input
    pump cancelled by its task group then carries on and waits on the engine
    forever, and the task group (so the agent's shutdown) never finishes."""
    async with asyncio.timeout(seconds):
        return await call


async def close_quietly(engine: EngineSession, timeout: float) -> None:
    """Close `engine` within `timeout`, logging a failure: its caller is done with it either way."""
    try:
        await bounded(engine.close(), timeout)
    except Exception as exc:
        log.warning("engine_close_failed", error=describe(exc))


def describe(exc: BaseException) -> str:
    """The failure as one line for a recorded reason: its type and message, or "timed out"."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
