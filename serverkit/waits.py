"""Waiting with a deadline, without losing a cancellation.

`bounded` replaces `asyncio.wait_for` everywhere (ruff bans the latter, [tool.ruff.lint]): on
Python 3.11, a task cancelled just as the awaited call completes gets the call's result instead of
its cancellation, so a loop cancelled at shutdown carries on — waiting on a pipe, a socket or its
next wake-up — and whatever waits for it (a task group, the agent's stop) never finishes.
`asyncio.timeout` has no such gap (3.12 rebuilt `wait_for` on it).

`keep_cancellation` closes the same gap for task groups: on 3.11, a task group whose child fails
while its own task is being cancelled raises the child's error (an ExceptionGroup) and the
cancellation is gone, so a loop that logs errors and goes round again never ends.
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


def keep_cancellation(error: BaseException) -> None:
    """In a loop's `except Exception`: raise CancelledError (from `error`) when the running task was
    cancelled while the failed body ran, so the loop ends as it was asked to. The failed body's task
    group must have been awaiting in its body, not in its exit: on 3.11 a group that cancels its task
    from its exit leaves the count raised, and every failure would look like a stop."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError from error


async def stop(task: asyncio.Task[None]) -> None:
    """Cancel `task` and wait until it has ended; its error, if any, is taken (the caller raised it
    already, or it no longer matters) rather than logged as never retrieved."""
    task.cancel()
    await asyncio.wait((task,))
    if not task.cancelled():
        task.exception()


async def beside(call: Awaitable[T], companion: asyncio.Task[None], seconds: float | None) -> T:
    """Await `call` for at most `seconds` (TimeoutError after that) while `companion` runs beside it:
    should the companion fail first, its error is raised instead (and `call` dropped). A companion
    that ends well is simply no longer watched. For a stream's reader and the task writing its
    other side (a terminal's keystrokes, an upload's chunks)."""
    waiting = asyncio.ensure_future(call)
    try:
        async with asyncio.timeout(seconds):
            while not companion.done():
                await asyncio.wait((waiting, companion), return_when=asyncio.FIRST_COMPLETED)
                if waiting.done():
                    return waiting.result()
            companion.result()  # raises its error, if any
            return await asyncio.shield(waiting)
    finally:
        waiting.cancel()
