"""Bounded exponential backoff with jitter: the pause before each retry, for the client and the server alike."""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["Backoff"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Bounded exponential backoff between attempts, in seconds."""

    initial: float = 0.1
    maximum: float = 5.0
    multiplier: float = 2.0
    # Each pause is spread by up to this fraction either way, so that many retrying callers part.
    jitter: float = 0.2

    def delay(self, attempt: int) -> float:
        """The pause before attempt `attempt` (0-based) after a failure."""
        base = min(self.maximum, self.initial * self.multiplier ** min(attempt, 64))
        return min(self.maximum, base * (1 + random.uniform(-self.jitter, self.jitter)))
