"""Client calls as a careful user makes them under faults: retried with the same request id while
the answer says the platform is briefly away, and every error counted.

UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED and ABORTED are retried (the ids make retries safe).
UNKNOWN and INTERNAL must never reach a client (issue 11, item 8): each is recorded with its
message, then retried as a user would. Any other code goes to the caller.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from astrabox.backoff import Backoff
from astrabox.errors import AstraBoxError
from chaos.records import Round

T = TypeVar("T")

RETRIED = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED, grpc.StatusCode.ABORTED}
)
FORBIDDEN = frozenset({grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL})
# A call is given up after this long of retryable answers (the platform is down for longer than any fault).
CALL_DEADLINE_S = 180.0
_BACKOFF = Backoff(initial=0.2, maximum=3.0)


class Calls:
    """Makes the calls and records what they answered in `round.errors`."""

    def __init__(
        self, round: Round, capacity_free: Callable[[], bool], free_capacity: Callable[[], Awaitable[None]]
    ) -> None:
        self._round = round
        # Whether an agent's refusal for capacity would be wrong now: every agent has run
        # unharmed for a while and the sessions holding runtimes are fewer than the capacity.
        self._capacity_free = capacity_free
        # What the user does about such a refusal, so the round goes on: delete an archived session.
        self._free_capacity = free_capacity

    async def __call__(self, name: str, session_id: str, call: Callable[[], Awaitable[T]]) -> T:
        deadline = time.monotonic() + CALL_DEADLINE_S
        attempt = 0
        while True:
            try:
                return await call()
            except AstraBoxError as error:
                wrongly_refused = self.record(name, session_id, error.code, error.reason, error.message)
                if error.code not in RETRIED | FORBIDDEN and not _refused_for_capacity(error):
                    raise
                if wrongly_refused:
                    await self._free_capacity()
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(_BACKOFF.delay(attempt))
            attempt += 1

    def record(self, name: str, session_id: str, code: grpc.StatusCode, reason: str, message: str) -> bool:
        """Count the error; whether it refused for capacity while capacity was free."""
        errors = self._round.errors
        errors.counts[(name, code.name, reason)] += 1
        if code in FORBIDDEN:
            errors.forbidden.append((name, code.name, message[:300], session_id))
        if _is_capacity_refusal(code, reason) and self._capacity_free():
            errors.refused_with_agents_up.append((f"{name}: {code.name} {reason}: {message[:200]}", session_id))
            return True
        return False


def _is_capacity_refusal(code: grpc.StatusCode, reason: str) -> bool:
    return reason == "NO_AGENT_AVAILABLE" or (code == grpc.StatusCode.RESOURCE_EXHAUSTED and reason != "QUOTA_EXCEEDED")


def _refused_for_capacity(error: AstraBoxError) -> bool:
    """Retried too: capacity comes back as sessions are released."""
    return _is_capacity_refusal(error.code, error.reason)
