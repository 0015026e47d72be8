"""ListSessions' filters: which of a project's sessions a listing shows.

A listing is a project's sessions newest first, by (created_at, session_id), narrowed by:
- states: any of these (none: every state but DELETED; a deleted session is hidden from its
  project as from everyone, so DELETED cannot be asked for);
- a label selector: comma-separated requirements `key=value`, `key!=value`, `key` (has it) and
  `!key` (has it not), all of which must hold, parsed strictly (the keys and values a session's
  labels may hold, CreateSessionRequest.labels; a value in a selector cannot hold a comma). As
  in Kubernetes, `key!=value` also holds for a session without the key;
- created_after (inclusive) and created_before (exclusive).

A page token carries the listing's position and its filters' fingerprint: a token used with
other filters is refused, since its position means nothing there. A listing goes on from its
position, so a session created between pages, newer than every page, is never in a later page,
and no session is repeated or skipped.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from controlplane import validation
from controlplane.errors import InvalidArgument
from controlplane.session import SessionState

# The most requirements one label selector may hold (as many as a session may have labels).
MAX_REQUIREMENTS = 64
MAX_SELECTOR_BYTES = 4096
LABEL_SELECTOR_INVALID = "LABEL_SELECTOR_INVALID"
PAGE_TOKEN_FILTERS_CHANGED = "PAGE_TOKEN_FILTERS_CHANGED"
_FORMS = "key=value, key!=value, key or !key, separated by commas"


class LabelOperator(enum.Enum):
    EQUALS = "="
    NOT_EQUALS = "!="
    EXISTS = "exists"
    ABSENT = "!"


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    key: str
    operator: LabelOperator
    # For EQUALS and NOT_EQUALS.
    value: str = ""


@dataclass(frozen=True, slots=True)
class SessionFilter:
    """What a listing shows of a project's sessions (nothing set: all but the deleted ones)."""

    states: frozenset[SessionState] = frozenset()
    labels: tuple[LabelRequirement, ...] = ()
    created_after: datetime | None = None
    created_before: datetime | None = None
    # Only the sessions started from this agent definition: its name or id as asked, its id once
    # the kernel has found it in the project (`SessionKernel.list_sessions`).
    agent: str = ""

    def fingerprint(self) -> str:
        """The same for the same filters however they were spelled (order, repeats)."""
        canonical = {
            "states": sorted(state.value for state in self.states),
            "labels": sorted({(r.key, r.operator.value, r.value) for r in self.labels}),
            "after": self.created_after.isoformat() if self.created_after else None,
            "before": self.created_before.isoformat() if self.created_before else None,
            "agent": self.agent,
        }
        return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()[:32]


def session_filter(
    states: Sequence[SessionState],
    label_selector: str,
    created_after: datetime | None,
    created_before: datetime | None,
) -> SessionFilter:
    """The filter of a ListSessions request; InvalidArgument naming the field that cannot be one."""
    if SessionState.DELETED in states:
        raise InvalidArgument(
            "states", "deleted sessions are not listed: ask for other states, or none for every other one"
        )
    if created_after and created_before and created_after >= created_before:
        raise InvalidArgument(
            "created_before",
            f"created_before ({created_before.isoformat()}) must be later than created_after"
            f" ({created_after.isoformat()})",
        )
    return SessionFilter(frozenset(states), label_selector_of(label_selector), created_after, created_before)


def label_selector_of(text: str) -> tuple[LabelRequirement, ...]:
    """The requirements of a label selector (see the module's docstring); empty for an empty one."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_SELECTOR_BYTES:
        raise InvalidArgument(
            "label_selector", f"label_selector must be at most {MAX_SELECTOR_BYTES} bytes", validation.FIELD_TOO_LONG
        )
    if not text.strip():
        return ()
    parts = text.split(",")
    if len(parts) > MAX_REQUIREMENTS:
        raise InvalidArgument(
            "label_selector",
            f"label_selector may hold at most {MAX_REQUIREMENTS} requirements, got {len(parts)}",
            LABEL_SELECTOR_INVALID,
        )
    return tuple(_requirement(number, part.strip()) for number, part in enumerate(parts, start=1))


def _requirement(number: int, text: str) -> LabelRequirement:
    def refused(why: str) -> InvalidArgument:
        return InvalidArgument(
            "label_selector",
            f"label_selector requirement {number} ({validation.echo(text)}): {why}; write {_FORMS}",
            LABEL_SELECTOR_INVALID,
        )

    if not text:
        raise refused("it is empty")
    # A key holds neither '=' nor '!': the first '=' is the operator's, and the value is the rest.
    if (equals := text.find("=")) >= 0:
        not_equals = text[equals - 1 : equals] == "!"
        key, value = text[: equals - 1 if not_equals else equals], text[equals + 1 :]
        operator = LabelOperator.NOT_EQUALS if not_equals else LabelOperator.EQUALS
    elif text.startswith("!"):
        key, value, operator = text[1:], "", LabelOperator.ABSENT
    else:
        key, value, operator = text, "", LabelOperator.EXISTS
    try:
        validation.label_key("label key", key)
        validation.label_value("label value", value)
    except InvalidArgument as invalid:
        raise refused(invalid.message) from None
    return LabelRequirement(key, operator, value)


def filters_changed() -> InvalidArgument:
    return InvalidArgument(
        "page_token",
        "page_token was issued for a listing with other filters: send the states, label_selector,"
        " created_after and created_before of its first page, or start again without a page_token",
        PAGE_TOKEN_FILTERS_CHANGED,
    )
