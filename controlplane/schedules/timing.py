"""When a schedule ticks: a cron expression read in an IANA time zone (croniter, zoneinfo), and
which of the ticks due at a moment run, by the schedule's missed-ticks policy.

Everything here is pure: the moment is passed in, so tests drive time as they like.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from controlplane.errors import InvalidArgument
from controlplane.validation import echo

INVALID_SCHEDULE = "INVALID_SCHEDULE"
# RUN_EACH runs at most this many missed ticks at once; 0 in the spec means the default.
MAX_CATCH_UP = 100
# The longest a refused tick is retried (ScheduleSpec.retry_refusals_seconds; the scheduler retries).
MAX_RETRY_REFUSALS_S = 3600
DEFAULT_CATCH_UP = 10
# Due ticks are counted at most this far (a seconds-level schedule down for a day has 86,400):
# past it the count of missed ticks is a lower bound.
COUNT_LIMIT = 10_000
# An expression's shortest interval is measured over this many of its ticks.
INTERVAL_SAMPLE = 1000
_MAX_EXPRESSION = 256


class MissedTicks(enum.Enum):
    """ScheduleSpec.missed_ticks (its proto numbers)."""

    SKIP = 1
    RUN_ONCE = 2
    RUN_EACH = 3


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed cron expression in its time zone: five fields, or six with seconds first."""

    expression: str
    zone: ZoneInfo

    @classmethod
    def parse(cls, expression: str, time_zone: str) -> Cron:
        zone = _zone(time_zone)
        if not expression.strip() or len(expression) > _MAX_EXPRESSION:
            raise InvalidArgument(
                "cron", f"cron must be a cron expression of 1-{_MAX_EXPRESSION} characters", INVALID_SCHEDULE
            )
        fields = len(expression.split())
        if fields not in (5, 6):
            raise InvalidArgument(
                "cron",
                f"cron must have five fields (minute hour day month weekday), or six with seconds first;"
                f" {echo(expression)} has {fields}",
                INVALID_SCHEDULE,
            )
        cron = cls(expression, zone)
        try:
            cron.after(datetime(2000, 1, 1, tzinfo=UTC))
        except (CroniterError, ValueError, KeyError) as error:
            raise InvalidArgument("cron", f"cron {echo(expression)} is not valid: {error}", INVALID_SCHEDULE) from None
        return cron

    def after(self, moment: datetime) -> datetime:
        """The first tick strictly after `moment`, in UTC."""
        local = moment.astimezone(self.zone)
        ticks = croniter(self.expression, local, second_at_beginning=True, max_years_between_matches=10)
        found: datetime = ticks.get_next(datetime)
        return found.astimezone(UTC)

    def shortest_interval(self, start: datetime) -> timedelta:
        """The shortest time between two of its ticks after `start`, over INTERVAL_SAMPLE ticks (the
        seconds and minutes fields repeat within hours, so their gaps show early)."""
        local = start.astimezone(self.zone)
        ticks = croniter(self.expression, local, second_at_beginning=True, max_years_between_matches=10)
        previous: datetime = ticks.get_next(datetime)
        shortest = timedelta.max
        for _ in range(INTERVAL_SAMPLE):
            tick: datetime = ticks.get_next(datetime)
            # Compared in UTC: a DST change makes no fake short gap.
            shortest = min(shortest, tick.astimezone(UTC) - previous.astimezone(UTC))
            previous = tick
        return shortest


def _zone(name: str) -> ZoneInfo:
    if not name:
        return ZoneInfo("UTC")
    try:
        if len(name) > 64 or name.startswith(("/", ".")) or ".." in name:
            raise ValueError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidArgument(
            "time_zone", f"time_zone must be an IANA time zone such as Europe/Paris, got {echo(name)}", INVALID_SCHEDULE
        ) from None


@dataclass(frozen=True, slots=True)
class Run:
    """One tick to run, and how many ticks before it were missed and not run."""

    tick: datetime
    missed: int = 0


@dataclass(frozen=True, slots=True)
class Claim:
    """What a schedule due at a moment does: the ticks it runs now, those it skips, and its next tick."""

    runs: tuple[Run, ...]
    skipped: int
    next_tick: datetime


def claim(
    cron: Cron,
    policy: MissedTicks,
    max_catch_up: int,
    next_tick: datetime,
    now: datetime,
    grace: timedelta,
    carried: int = 0,
) -> Claim:
    """The runs of a schedule whose next tick `next_tick` is due at `now` (next_tick <= now).
    Every due tick but the latest is missed; the latest is missed too when it is later than
    `grace` (under SKIP only: the other policies run it anyway). `carried` ticks were skipped
    before this claim without a run to count them: the first run counts them."""
    due = [next_tick]
    while len(due) < COUNT_LIMIT:
        following = cron.after(due[-1])
        if following > now:
            break
        due.append(following)
    latest = due[-1]
    following = cron.after(max(now, latest))
    earlier = len(due) - 1 + carried
    if policy is MissedTicks.SKIP:
        if now - latest <= grace:
            return Claim((Run(latest, earlier),), 0, following)
        return Claim((), earlier + 1, following)
    if policy is MissedTicks.RUN_ONCE:
        return Claim((Run(latest, earlier),), 0, following)
    taken = due[-max(1, min(max_catch_up, MAX_CATCH_UP)) :]
    skipped = len(due) - len(taken) + carried
    runs = tuple(Run(tick, skipped if i == 0 else 0) for i, tick in enumerate(taken))
    return Claim(runs, 0, following)
