"""Conversions from domain records to the client-facing protobuf messages."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, cast

import asyncpg
from google.protobuf import json_format, timestamp_pb2

from astrabox.environments.v1 import environment_pb2
from astrabox.sessionkernel.v1 import events_pb2, session_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as kernel_pb2
from controlplane import engine_content, session_config
from controlplane.deltas import LiveDelta
from controlplane.engines import EngineManifest
from controlplane.journal import ClientPage, EventKind, StoredEvent
from controlplane.session import (
    InteractionKind,
    InteractionRecord,
    SessionRecord,
    SessionState,
    ToolGrantRecord,
    questions_of,
)
from controlplane.usage import Usage

# protoc's stubs give `Value()` a plain int, not the enum's own type (at run time both are ints).
_STATES: dict[SessionState, session_pb2.SessionState] = {
    state: cast(session_pb2.SessionState, session_pb2.SessionState.Value(f"SESSION_STATE_{state.name}"))
    for state in SessionState
}
_STATE_OF: dict[int, SessionState] = {number: state for state, number in _STATES.items()}
_KINDS: dict[EventKind, events_pb2.EventKind] = {
    kind: cast(events_pb2.EventKind, events_pb2.EventKind.Value(f"EVENT_KIND_{kind.name}")) for kind in EventKind
}
_ENGINE_MESSAGE = _KINDS[EventKind.ENGINE_MESSAGE]
_INTERACTION_KINDS: dict[InteractionKind, session_pb2.InteractionKind] = {
    k: cast(session_pb2.InteractionKind, session_pb2.InteractionKind.Value(f"INTERACTION_KIND_{k.name}"))
    for k in InteractionKind
}


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    _set_time(ts, value)
    return ts


def _set_time(ts: timestamp_pb2.Timestamp, value: datetime) -> None:
    """`ts.FromDatetime(value)` (a naive value is UTC), in a few integer operations: it is done
    for every event sent."""
    since = value - (_EPOCH if value.tzinfo is not None else _EPOCH.replace(tzinfo=None))
    ts.seconds = since.days * 86400 + since.seconds
    ts.nanos = since.microseconds * 1000


def state_from_proto(value: int) -> SessionState | None:
    """The state a SessionState number names; None for UNSPECIFIED or a number that is none."""
    return _STATE_OF.get(value)


def session_to_proto(record: SessionRecord) -> session_pb2.Session:
    return session_pb2.Session(
        session_id=record.session_id,
        state=_STATES[record.state],
        runtime_available=record.runtime_available,
        runtime_stopped=record.runtime_stopped,
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
        pending_interaction=interaction_to_proto(record.pending_interaction) if record.pending_interaction else None,
        background_tasks=[
            session_pb2.BackgroundTask(task_id=t.task_id, description=t.description, started_seq=t.started_seq)
            for t in record.background_tasks
        ],
        capabilities=_capabilities(record.engine_manifest),
        slash_commands=list(record.slash_commands),
        queued_turn_ids=list(record.queued_turn_ids),
        project_id=str(record.project_id) if record.project_id else "",
        destroy_failure=_destroy_failure(record),
        tool_grants=[_tool_grant(grant) for grant in record.tool_grants],
        agent=_agent(record),
        environment=_environment(record),
        config=session_config.decode(record.config, record.engine, record.permission_mode, record.model),
        usage=usage_to_proto(record.usage),
        git_source=environment_pb2.GitSource.FromString(record.git_source) if record.git_source else None,
        forked_from=(
            session_pb2.SessionFork(session_id=record.forked_from[0], through_seq=record.forked_from[1])
            if record.forked_from
            else None
        ),
        parent=session_pb2.SubagentParent(**dataclasses.asdict(record.parent)) if record.parent else None,
    )


def usage_to_proto(usage: Usage) -> session_pb2.Usage:
    return session_pb2.Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_creation_input_tokens=usage.cache_creation_input_tokens,
        cache_read_input_tokens=usage.cache_read_input_tokens,
        cost_usd=float(usage.cost_usd),
        turns=usage.turns,
    )


def _agent(record: SessionRecord) -> session_pb2.SessionAgent | None:
    if record.agent is None:
        return None
    return session_pb2.SessionAgent(
        agent_id=record.agent.agent_id, name=record.agent.name, version=record.agent.version
    )


def _environment(record: SessionRecord) -> session_pb2.SessionEnvironment | None:
    pinned = record.environment
    if pinned is None:
        return None
    return session_pb2.SessionEnvironment(
        environment_id=pinned.environment_id,
        name=pinned.name,
        version=pinned.version,
        build_digest=pinned.build_digest,
    )


def _tool_grant(grant: ToolGrantRecord) -> session_pb2.ToolGrant:
    message = session_pb2.ToolGrant(
        grant_id=grant.grant_id,
        tool_name=grant.tool_name,
        input_pattern=grant.input_pattern,
        create_time=timestamp(grant.created_at),
        interaction_id=grant.interaction_id,
    )
    if grant.expires_at is not None:
        message.expire_time.CopyFrom(timestamp(grant.expires_at))
    return message


def _destroy_failure(record: SessionRecord) -> session_pb2.DestroyFailure | None:
    if not record.destroy_failure:
        return None
    return session_pb2.DestroyFailure(
        reason=record.destroy_failure,
        attempts=record.destroy_attempts,
        next_attempt_time=timestamp(record.destroy_retry_at) if record.destroy_retry_at else None,
        abandoned=record.destroy_abandoned_at is not None,
    )


def _capabilities(manifest: EngineManifest | None) -> session_pb2.EngineCapabilities | None:
    if manifest is None:
        return None
    return session_pb2.EngineCapabilities(
        engine=manifest.kind,
        permission_modes=list(manifest.permission_modes),
        supports_interactions=manifest.supports_interactions,
        supports_background_tasks=manifest.supports_background_tasks,
        supports_server_info=manifest.supports_server_info,
        tools=list(manifest.tools),
    )


def interaction_to_proto(record: InteractionRecord) -> session_pb2.Interaction:
    questions = []
    if record.kind is InteractionKind.QUESTION:
        questions = [session_pb2.Question(**q) for q in questions_of(record.input)]
    return session_pb2.Interaction(
        interaction_id=record.interaction_id,
        kind=_INTERACTION_KINDS[record.kind],
        turn_id=record.turn_id,
        tool_name=record.tool_name,
        input_json=(input_json := json.dumps(record.input)),
        tool_use_id=record.tool_use_id,
        questions=questions,
        requested_seq=record.requested_seq,
        input=engine_content.tool_input(input_json, record.input),
    )


_DELTA_KINDS = {
    "text": kernel_pb2.SESSION_DELTA_KIND_TEXT,
    "tool_input": kernel_pb2.SESSION_DELTA_KIND_TOOL_INPUT,
    "thinking": kernel_pb2.SESSION_DELTA_KIND_THINKING,
}


def delta_to_proto(delta: LiveDelta) -> kernel_pb2.SessionDelta:
    return kernel_pb2.SessionDelta(
        turn_id=delta.turn_id,
        message_id=delta.message_id,
        index=delta.index,
        kind=_DELTA_KINDS[delta.kind],
        text=delta.text,
    )


def event_to_proto(
    event: StoredEvent, message: events_pb2.SessionEvent | None = None, content: bool = True
) -> events_pb2.SessionEvent:
    """`event` as protobuf, written into `message` when given (an empty one, e.g. a repeated field's new
    element: no copy); an engine message with its typed view unless `content` is False."""
    if message is None:
        message = events_pb2.SessionEvent()
    message.session_id = event.session_id
    message.seq = event.seq
    _set_time(message.time, event.at)
    message.turn_id = event.turn_id
    message.kind = _KINDS[event.kind]
    message.actor = str(event.payload.get("actor") or "")
    if event.produce_time is not None:
        _set_time(message.produce_time, event.produce_time)
    target = getattr(message, event.kind.value)  # the oneof field is named after the kind
    if event.kind is EventKind.ENGINE_MESSAGE:
        target.type_name = type_name = event.payload["type_name"]
        decoded = None
        if event.message_json is not None:
            text = event.message_json  # as stored: passed through (decoded only for the view)
        else:
            decoded = event.payload["message"]
            text = json.dumps(decoded, separators=(",", ":"))
        target.payload_json = text
        target.output_seq = event.output_seq or 0
        target.late = bool(event.payload.get("late"))
        if content:
            engine_content.set_engine_content(target, type_name, text, decoded)
    elif event.kind is EventKind.INTERACTION_REQUESTED:
        interaction = dict(event.payload["interaction"])
        target.interaction.CopyFrom(
            session_pb2.Interaction(
                interaction_id=interaction["interaction_id"],
                kind=_INTERACTION_KINDS[InteractionKind(interaction["kind"])],
                turn_id=interaction["turn_id"],
                tool_name=interaction["tool_name"],
                input_json=interaction["input_json"],
                tool_use_id=interaction["tool_use_id"],
                questions=[session_pb2.Question(**q) for q in interaction["questions"]],
                requested_seq=event.seq,
                input=engine_content.tool_input(interaction["input_json"]),
            )
        )
    else:
        json_format.ParseDict(dict(event.payload), target, ignore_unknown_fields=True)
    target.SetInParent()
    return message


# A response of several events (WatchSessionEvents' max_events_per_response) is closed once it holds
# this many bytes: it stays far below the 4 MiB a gRPC client accepts by default, unless its last
# event is itself that large (which goes anyway, as it would alone).
MAX_RUN_BYTES = 1024 * 1024
# A ListSessionEvents response ends before the event that would take it past this many bytes (its
# first event goes whatever its size): its page is bounded by the payloads' sizes as journaled, but
# the typed views come on top of those.
MAX_LIST_RESPONSE_BYTES = 3 * 1024 * 1024

# What an engine message's numbers and tags (seq, time, kind, produce_time, output_seq, late, and
# the lengths before its strings) take on the wire at most: the rest is its strings' bytes.
_ENGINE_NUMBERS_BYTES = 80
# And what the tag and length before its typed view take at most.
_CONTENT_TAG_BYTES = 6

# How a run's item is written into an empty SessionEvent (with its typed view or not), returning about
# how many bytes it takes.
_Write = Callable[[Any, events_pb2.SessionEvent, bool], int]


def _write_row(row: asyncpg.Record, message: events_pb2.SessionEvent, content: bool) -> int:
    """A row read for clients (`ClientPage`) written into `message` (empty); about how many bytes it
    takes, never fewer. An engine message is written straight from the row, its stored JSON passed
    through (no StoredEvent; decoded only for its typed view, unless `content` is False: a catch-up
    writes thousands a second); any other kind goes through `event_to_proto`."""
    # By position (store.events' _CLIENT_COLUMNS order, then `fits`): a lookup by name each costs as
    # much again.
    session_id, seq, at, kind, turn_id, output_seq, produced, _, text, type_name, late, actor, _, _ = row
    if kind != "engine_message":
        return event_to_proto(StoredEvent.from_row(row), message, content).ByteSize()
    message.session_id = session_id
    message.seq = seq
    since = at - _EPOCH  # _set_time, inlined
    time = message.time
    time.seconds = since.days * 86400 + since.seconds
    time.nanos = since.microseconds * 1000
    message.turn_id = turn_id = turn_id or ""
    message.kind = _ENGINE_MESSAGE
    if actor:
        message.actor = actor
    if produced is not None:
        since = produced - _EPOCH
        time = message.produce_time
        time.seconds = since.days * 86400 + since.seconds
        time.nanos = since.microseconds * 1000
    target = message.engine_message
    target.type_name = type_name
    target.payload_json = text  # as stored
    if output_seq:
        target.output_seq = output_seq
    if late:
        target.late = True
    # UTF-8 takes at most 4 bytes a character: the short strings are counted so, the payload exactly.
    short = len(session_id) + len(turn_id) + len(actor or "") + len(type_name)
    size = len(text) if text.isascii() else len(text.encode())
    viewed = engine_content.set_engine_content(target, type_name, text, size=size) if content else 0
    return _ENGINE_NUMBERS_BYTES + 4 * short + size + (viewed and viewed + _CONTENT_TAG_BYTES)


def _write_event(event: StoredEvent, message: events_pb2.SessionEvent, content: bool) -> int:
    return event_to_proto(event, message, content).ByteSize()


def _written(run: ClientPage | Sequence[StoredEvent]) -> tuple[Iterable[Any], _Write]:
    """`run`'s items, and how one is written into a SessionEvent (returning about its size)."""
    if isinstance(run, ClientPage):
        return run.rows, _write_row
    return run, _write_event


def events_into(
    run: ClientPage | Sequence[StoredEvent], field: Any, content: bool = True, max_bytes: int | None = None
) -> int:
    """`run`'s events appended to `field` (a repeated SessionEvent field), in order, with their typed
    views unless `content` is False; with `max_bytes`, only those that keep `field` within it (the first
    whatever its size). How many were appended."""
    items, write = _written(run)
    add = field.add
    count = size = 0
    for item in items:
        size += write(item, add(), content)
        if max_bytes is not None and size > max_bytes and count:
            del field[-1]
            break
        count += 1
    return count


def watch_responses(
    run: ClientPage | Sequence[StoredEvent], most: int, content: bool = True
) -> Iterator[kernel_pb2.WatchSessionEventsResponse]:
    """`run`'s events in order, at most `most` and about MAX_RUN_BYTES per response, in its `events`
    (with their typed views unless `content` is False)."""
    response = kernel_pb2.WatchSessionEventsResponse()
    add = response.events.add  # looked up once a response: thousands of events a second go through here
    count = size = 0
    items, write = _written(run)
    for item in items:
        size += write(item, add(), content)
        count += 1
        if count >= most or size >= MAX_RUN_BYTES:
            yield response
            response, count, size = kernel_pb2.WatchSessionEventsResponse(), 0, 0
            add = response.events.add
    if count:
        yield response
