"""Conversions from domain records to the client-facing protobuf messages."""

from __future__ import annotations

import json
from datetime import datetime

from google.protobuf import json_format, timestamp_pb2

from astrabox.sessionkernel.v1 import events_pb2, session_pb2
from controlplane.journal import EventKind, StoredEvent
from controlplane.session import SessionRecord, SessionState

_STATES = {state: session_pb2.SessionState.Value(f"SESSION_STATE_{state.name}") for state in SessionState}
_KINDS = {kind: events_pb2.EventKind.Value(f"EVENT_KIND_{kind.name}") for kind in EventKind}
# The SessionEvent oneof field (and its message type) for each kind.
_PAYLOAD_FIELDS = {kind: kind.value for kind in EventKind}


def timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(value)
    return ts


def session_to_proto(record: SessionRecord) -> session_pb2.Session:
    return session_pb2.Session(
        session_id=record.session_id,
        state=_STATES[record.state],
        runtime_available=record.runtime_available,
        engine=record.engine,
        permission_mode=record.permission_mode,
        model=record.model,
        last_seq=record.last_seq,
        current_turn_id=record.current_turn_id,
        agent_id=record.agent_id,
        engine_session_id=record.engine_session_id,
        failure_reason=record.failure_reason,
        create_time=timestamp(record.created_at),
        update_time=timestamp(record.updated_at),
        request_id=record.request_id,
        labels=dict(record.labels),
    )


def event_to_proto(event: StoredEvent) -> events_pb2.SessionEvent:
    message = events_pb2.SessionEvent(
        session_id=event.session_id,
        seq=event.seq,
        time=timestamp(event.at),
        turn_id=event.turn_id,
        kind=_KINDS[event.kind],
    )
    target = getattr(message, _PAYLOAD_FIELDS[event.kind])
    if event.kind is EventKind.ENGINE_MESSAGE:
        target.type_name = event.payload["type_name"]
        target.payload_json = json.dumps(event.payload["message"], separators=(",", ":"))
        target.output_seq = event.output_seq or 0
    else:
        json_format.ParseDict(dict(event.payload), target, ignore_unknown_fields=True)
    target.SetInParent()
    return message
