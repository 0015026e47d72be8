"""Calls into an engine that neither hang nor raise past their caller.

An engine is a separate process behind a pipe: any call may stall, and a
stalled call must not hold up a turn, a stop or the agent's shutdown. So every
call is bounded by a deadline (`serverkit.waits.bounded`, which keeps a
cancellation that arrives as the call completes: a reader or input pump
cancelled by its task group must stop), closing an engine never raises
(`close_quietly`), and a failure reads as one line (`describe`) in the reasons
that turns and runtimes record.
"""

from __future__ import annotations

import structlog

from dataplane_agent.engines.base import EngineSession
from serverkit.waits import bounded

log = structlog.get_logger(__name__)


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
