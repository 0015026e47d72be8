"""A session's journal events, with the engine's messages as typed views.

`SessionHandle.watch` and `Turn.events` yield `Event`s: the event's place in
the journal (`seq`, `turn_id`, `time`; `produce_time`: when the agent produced it), what kind it is (`kind`, the name of
its payload: "engine_message", "turn_completed", "interaction_requested", …),
for an engine message its typed view (`message`, see `astrabox.messages`), and
the protobuf event itself (`proto`) for everything else.

    async for event in session.watch():
        if isinstance(event.message, AssistantMessage):
            print(event.message.text)
        elif event.interaction is not None:
            await session.respond(event.interaction.interaction_id, allow=True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from google.protobuf.message import Message as ProtoMessage

from astrabox.messages import Message, parse_message
from astrabox.sessionkernel.v1 import events_pb2, session_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as api

__all__ = ["TURN_END_KINDS", "Delta", "Event"]

TURN_END_KINDS = frozenset({"turn_completed", "turn_failed", "turn_interrupted"})
"""The kinds of event that end a turn: it completed (possibly with an error result), failed or was interrupted."""


@dataclass(frozen=True, slots=True)
class Event:
    """One event of a session's journal. Build it with `Event.from_proto`."""

    seq: int
    """Its position in the session's journal: 1, 2, 3 … with no gaps."""
    session_id: str
    turn_id: str
    """The turn it belongs to; "" for session-level events."""
    kind: str
    """The name of its payload, for example "engine_message" or "turn_completed" (see `events.proto`)."""
    time: datetime
    """When it was committed (UTC)."""
    message: Message | None
    """The engine's message as a typed view, when `kind` is "engine_message"; None otherwise."""
    proto: events_pb2.SessionEvent = field(repr=False, compare=False)
    """The event as the server sent it."""
    produce_time: datetime | None = None
    """When the data-plane agent produced it (UTC, the agent's clock); None for an event the control
    plane made itself. `time - produce_time` is how long it took from the agent to the journal."""

    @classmethod
    def from_proto(cls, event: events_pb2.SessionEvent) -> Event:
        """The view of a `SessionEvent` (never raises, whatever the engine message holds)."""
        kind = event.WhichOneof("payload") or _kind_name(event.kind)
        message = None
        if kind == "engine_message":
            message = parse_message(event.engine_message.type_name, event.engine_message.payload_json)
        time = event.time.ToDatetime(tzinfo=UTC) if event.HasField("time") else datetime.fromtimestamp(0, UTC)
        produced = event.produce_time.ToDatetime(tzinfo=UTC) if event.HasField("produce_time") else None
        return cls(event.seq, event.session_id, event.turn_id, kind, time, message, event, produced)

    @property
    def payload(self) -> ProtoMessage | None:
        """The event's payload message (for example a `TurnCompleted`); None for a kind this client does not know."""
        name = self.proto.WhichOneof("payload")
        return getattr(self.proto, name) if name else None

    @property
    def ends_turn(self) -> bool:
        """Whether this event ends its turn (see `TURN_END_KINDS`)."""
        return self.kind in TURN_END_KINDS

    @property
    def interaction(self) -> session_pb2.Interaction | None:
        """The question the turn now waits on, when `kind` is "interaction_requested"; None otherwise."""
        return self.proto.interaction_requested.interaction if self.kind == "interaction_requested" else None


def _kind_name(kind: int) -> str:
    try:
        name: str = events_pb2.EventKind.Name(kind)
    except ValueError:
        return "unknown"
    return name.removeprefix("EVENT_KIND_").lower()


_DELTA_KINDS = {
    api.SESSION_DELTA_KIND_TEXT: "text",
    api.SESSION_DELTA_KIND_TOOL_INPUT: "tool_input",
    api.SESSION_DELTA_KIND_THINKING: "thinking",
}


@dataclass(frozen=True, slots=True)
class Delta:
    """A piece of a message the engine is still writing (`watch(..., deltas=True)`).

    Live only: it has no seq and is never stored; the complete message follows
    as an "engine_message" event, whose blocks are the concatenated pieces.
    Under load adjacent pieces arrive merged, and pieces may be missing (the
    complete message never is)."""

    turn_id: str
    message_id: str
    """The model's id of the message (the complete AssistantMessage's `message_id`)."""
    index: int
    """The content block the piece belongs to."""
    kind: str
    """"text", "tool_input" (a tool call's input JSON) or "thinking"."""
    text: str

    @classmethod
    def from_proto(cls, delta: api.SessionDelta) -> Delta:
        """The delta a WatchSessionEvents response carries."""
        return cls(delta.turn_id, delta.message_id, delta.index, _DELTA_KINDS.get(delta.kind, "unknown"), delta.text)
