"""One call made again while the server, or its database, is away, never past the call's deadline.

Only a call that may be repeated is (a read, or a command whose request id makes a repeat take effect
once): after UNAVAILABLE without a reason (the server could not be reached) or with a reason saying
its database could not be (DATABASE_UNAVAILABLE, CREDENTIALS_UNVERIFIABLE). Any other UNAVAILABLE
(NO_AGENT_AVAILABLE, AGENT_NOT_CONNECTED) asks for a person or for time this call does not have, and
DEADLINE_EXCEEDED means the call's own deadline has passed: neither is retried. The pauses follow
the client's `Backoff` (exponential, with jitter), and the last error is raised once the deadline
leaves no room for the next pause.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from astrabox.backoff import Backoff
from astrabox.errors import AstraBoxError

__all__ = ["RETRIED_REASONS", "retried", "within_deadline"]

log = logging.getLogger(__name__)

R = TypeVar("R")

RETRIED_REASONS = frozenset({"", "DATABASE_UNAVAILABLE", "CREDENTIALS_UNVERIFIABLE"})
"""The UNAVAILABLE reasons a call that may be repeated is retried on: the server could not be reached
(no reason), or its database could not."""


def retried(error: AstraBoxError) -> bool:
    """Whether a call that may be repeated is made again after `error` (within its deadline)."""
    return error.code == grpc.StatusCode.UNAVAILABLE and error.reason in RETRIED_REASONS


async def within_deadline(
    attempt: Callable[[float], Awaitable[R]], *, timeout: float, backoff: Backoff, idempotent: bool = True
) -> R:
    """`attempt(seconds_left)` until it succeeds, fails in a way a repeat cannot help, or `timeout`
    seconds have passed; each attempt is given what is left of them as its gRPC deadline. A failed
    attempt raises `AstraBoxError`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    failures = 0
    while True:
        try:
            return await attempt(max(deadline - loop.time(), 0.0))
        except grpc.aio.AioRpcError as rpc_error:
            error = AstraBoxError.from_rpc_error(rpc_error)
            pause = backoff.delay(failures)
            if not (idempotent and retried(error)) or loop.time() + pause >= deadline:
                raise error from rpc_error
            log.info("call failed (%s); retrying in %.2fs", error, pause)
        await asyncio.sleep(pause)
        failures += 1
