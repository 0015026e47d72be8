"""The event types a webhook subscribes to, by the journal event kinds that make them. The trigger
that writes the outbox (migrations/0034_webhooks.sql, `webhook_event_type`) maps the same kinds."""

from __future__ import annotations

from collections.abc import Iterable

from controlplane.errors import InvalidArgument
from controlplane.journal import EventKind

EVENT_TYPES: dict[str, EventKind] = {
    "session.created": EventKind.SESSION_CREATED,
    "session.ready": EventKind.RUNTIME_READY,
    "session.failed": EventKind.RUNTIME_FAILED,
    "session.runtime_lost": EventKind.RUNTIME_LOST,
    "session.waiting_for_input": EventKind.INTERACTION_REQUESTED,
    "session.archived": EventKind.SESSION_ARCHIVED,
    "session.deleted": EventKind.SESSION_DELETED,
    "turn.completed": EventKind.TURN_COMPLETED,
    "turn.failed": EventKind.TURN_FAILED,
    "turn.interrupted": EventKind.TURN_INTERRUPTED,
}


def event_types(values: Iterable[str], field: str = "event_types") -> tuple[str, ...]:
    """The distinct event types named, in order; InvalidArgument for none or an unknown one."""
    chosen = tuple(dict.fromkeys(values))
    if not chosen:
        raise InvalidArgument(field, f"{field} must name at least one of {', '.join(EVENT_TYPES)}")
    for value in chosen:
        if value not in EVENT_TYPES:
            raise InvalidArgument(field, f"{field}: {value!r} is not an event type; one of {', '.join(EVENT_TYPES)}")
    return chosen
