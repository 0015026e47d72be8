"""Refusals reported to the control plane, rate-limited per session.

Every refusal is answered to the sandbox, but a loop of refused requests must not flood the
session's journal: each session has a token bucket (BURST reports, then one per INTERVAL seconds);
refusals while it is empty are counted and carried in the next report's `suppressed`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

BURST = 10
INTERVAL_S = 10.0


@dataclass(slots=True)
class _Bucket:
    tokens: float
    stamp: float
    suppressed: int = 0


class RefusalReports:
    """Which refusals are reported, and how many were not in between."""

    def __init__(
        self, burst: int = BURST, interval: float = INTERVAL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._burst, self._interval, self._clock = burst, interval, clock
        self._buckets: dict[str, _Bucket] = {}

    def take(self, session_id: str) -> int | None:
        """For one refusal: the number of refusals suppressed before it when it is to be reported
        now, or None when it is only counted."""
        now = self._clock()
        bucket = self._buckets.get(session_id)
        if bucket is None:
            bucket = self._buckets[session_id] = _Bucket(float(self._burst), now)
        bucket.tokens = min(float(self._burst), bucket.tokens + (now - bucket.stamp) / self._interval)
        bucket.stamp = now
        if bucket.tokens < 1.0:
            bucket.suppressed += 1
            return None
        bucket.tokens -= 1.0
        suppressed, bucket.suppressed = bucket.suppressed, 0
        return suppressed

    def pending(self, session_id: str) -> int:
        """Refusals counted but not yet carried by a report."""
        bucket = self._buckets.get(session_id)
        return bucket.suppressed if bucket else 0

    def forget(self, session_id: str) -> None:
        self._buckets.pop(session_id, None)
