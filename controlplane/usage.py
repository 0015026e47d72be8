"""What a session's turns used: each turn's tokens and cost from the engine's result, and the
session's running totals.

A turn's usage is journaled on the event that ends it at the engine's result (TURN_COMPLETED, or
TURN_INTERRUPTED when the result ends a turn being interrupted), and the session's totals move by
it in the same transaction: `Session.usage` is always the sum of the usage in its journal, through
recoveries and moves (the totals live on the session's row, not with any runtime).

Tokens come from the result's `usage`, which covers the turn alone. The cost does not: Claude Code's
`total_cost_usd` is the running cost of its whole conversation, restored when a new CLI resumes it
in the same sandbox and started again from zero in a new one. So the session keeps the engine's
running totals at its newest result (`EngineTotals`), and a turn costs the difference from them,
unless the engine's totals started again: then its total is the turn's. They started again when
its cost went down, or when its running token count (the result's `model_usage`) grew by less than
the turn's own tokens.

A result whose turn had already ended (the control plane settled it on its own: a lapsed lease, a
deadline, a deletion; EngineMessage.late) or that ends no running turn counts in no total: its turn
is settled already and the journal says how, and a late message changes nothing of the session. The
engine's running totals still move past it, so that the next turn is charged for itself only.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from controlplane.errors import SessionBudgetExhausted

# The token counts of one model in the result's `model_usage` (the CLI's running totals).
_MODEL_TOKEN_FIELDS = ("inputTokens", "outputTokens", "cacheReadInputTokens", "cacheCreationInputTokens")


@dataclasses.dataclass(frozen=True, slots=True)
class Usage:
    """Tokens and dollars used by some turns (`turns` of them)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cost_usd: Decimal = Decimal(0)
    turns: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    def payload(self) -> dict[str, Any]:
        """As a journal event carries it (the Usage message's JSON; dollars as its double)."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cost_usd": float(self.cost_usd),
            "turns": self.turns,
        }

    @classmethod
    def totals_of(cls, row: Mapping[str, Any]) -> Usage:
        """The session's totals, from its row."""
        return cls(
            input_tokens=row["usage_input_tokens"],
            output_tokens=row["usage_output_tokens"],
            cache_creation_input_tokens=row["usage_cache_creation_input_tokens"],
            cache_read_input_tokens=row["usage_cache_read_input_tokens"],
            cost_usd=row["usage_cost_usd"],
            turns=row["usage_turns"],
        )


@dataclasses.dataclass(frozen=True, slots=True)
class EngineTotals:
    """The engine's running totals at its newest result: dollars, and tokens of every model."""

    cost_usd: Decimal = Decimal(0)
    tokens: int = 0

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> EngineTotals:
        """As the session's row keeps them."""
        return cls(row["engine_cost_usd"], row["engine_tokens"])


def of_result(result: Mapping[str, Any], before: EngineTotals) -> tuple[Usage, EngineTotals]:
    """The turn's usage by the engine's ResultMessage `result`, and the engine's running totals
    after it; `before`: the totals after the engine's previous result."""
    reported = result.get("usage")
    reported = reported if isinstance(reported, Mapping) else {}
    turn = Usage(
        input_tokens=_count(reported.get("input_tokens")),
        output_tokens=_count(reported.get("output_tokens")),
        cache_creation_input_tokens=_count(reported.get("cache_creation_input_tokens")),
        cache_read_input_tokens=_count(reported.get("cache_read_input_tokens")),
        turns=1,
    )
    running_tokens = _running_tokens(result.get("model_usage"))
    total = _dollars(result.get("total_cost_usd"))
    if total is None:  # no cost reported: the turn's tokens only
        return turn, before
    went_on = total >= before.cost_usd and (running_tokens is None or running_tokens - before.tokens >= turn.tokens)
    cost = total - before.cost_usd if went_on else total
    after = EngineTotals(total, running_tokens if running_tokens is not None else 0)
    return dataclasses.replace(turn, cost_usd=cost), after


def _count(value: object) -> int:
    """A token count as reported: a non-negative integer, anything else none."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**62 else 0


def _dollars(value: object) -> Decimal | None:
    """A reported cost as the decimal its JSON spelled (repr: the shortest that round-trips)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


def _running_tokens(model_usage: object) -> int | None:
    """The engine's running token count over every model (None when the result has none)."""
    if not isinstance(model_usage, Mapping):
        return None
    return sum(
        _count(counts.get(name))
        for counts in model_usage.values()
        if isinstance(counts, Mapping)
        for name in _MODEL_TOKEN_FIELDS
    )


def check_budget(session_id: str, totals: Usage, limit_usd: float) -> None:
    """SessionBudgetExhausted when the session's turns have cost `limit_usd` or more (0: no limit).
    Checked as a message is sent: a turn under way runs to its end (its own limit is the engine's,
    max_cost_usd_per_turn), so a session may end a little over its budget, never start past it."""
    if limit_usd <= 0 or not math.isfinite(limit_usd):
        return
    limit = Decimal(repr(limit_usd))
    if totals.cost_usd >= limit:
        raise SessionBudgetExhausted(session_id, f"{totals.cost_usd:.4f}", f"{limit:f}")
