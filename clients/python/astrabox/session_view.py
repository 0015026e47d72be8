"""A session as `astrabox session show`, `list` and `grants` print it: its state as a person reads
it (READY (idle-stopped) rather than READY), what it pins, its labels, what it has used and cost,
the interaction it waits on and its tool grants.

Everything here reads a `Session` message and returns lines; nothing calls the control plane."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC

from google.protobuf.timestamp_pb2 import Timestamp

from astrabox.render import grant_scope, interaction_lines
from astrabox.sessionkernel.v1 import session_pb2

__all__ = ["describe", "grant_line", "list_line", "pins", "state_label", "usage_text"]


def state_label(session: session_pb2.Session) -> str:
    """The session's state by name, with what READY hides: "READY (idle-stopped)" when its runtime was
    stopped for being idle, "READY (no runtime)" when its sandbox is gone otherwise (either way the
    next message starts one again)."""
    state = session_pb2.SessionState.Name(session.state).removeprefix("SESSION_STATE_")
    if session.state == session_pb2.SESSION_STATE_READY:
        if session.runtime_stopped:
            return f"{state} (idle-stopped)"
        if not session.runtime_available:
            return f"{state} (no runtime)"
    return state


def pins(session: session_pb2.Session) -> str:
    """What the session pins, as " (agent reviewer v2, environment python-ci v1)"; empty for none."""
    pinned = [
        f"{kind} {pin.name} v{pin.version}"
        for kind, pin in (("agent", session.agent), ("environment", session.environment))
        if session.HasField(kind)
    ]
    return f" ({', '.join(pinned)})" if pinned else ""


def usage_text(usage: session_pb2.Usage) -> str:
    """What a session's turns used, labelled: "2 turns · 54,642 in / 134 out tokens · total $0.1600"
    (input counts cache reads and writes; as the engine reported them)."""
    read = usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens
    turns = f"{usage.turns} turn{'' if usage.turns == 1 else 's'}"
    return f"{turns} · {read:,} in / {usage.output_tokens:,} out tokens · total ${usage.cost_usd:.4f}"


def list_line(session: session_pb2.Session) -> str:
    """One line of `astrabox session list`."""
    definition = "".join(
        f"  {kind} {pin.name} v{pin.version}"
        for kind, pin in (("agent", session.agent), ("environment", session.environment))
        if session.HasField(kind)
    )
    usage = session.usage
    read = usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens
    turns = f"{usage.turns} turn{'' if usage.turns == 1 else 's'}"
    return (
        f"{session.session_id}  {state_label(session):<20}  seq {session.last_seq:<6} host {session.agent_id}"
        + definition
        + f"  {turns:<9} {read:>9,} in {usage.output_tokens:>7,} out  total ${usage.cost_usd:.4f}"
        + _destroy_note(session)
    )


def _destroy_note(session: session_pb2.Session) -> str:
    """What `session list` says of a released session whose sandbox could not be destroyed."""
    if not session.HasField("destroy_failure"):
        return ""
    failure = session.destroy_failure
    return f"  sandbox {'NOT DESTROYED (abandoned)' if failure.abandoned else 'destroy retrying'} x{failure.attempts}"


def grant_line(grant: session_pb2.ToolGrant) -> str:
    """One tool grant: "GRANT_ID  Bash  calls matching 'npm test*', for the rest of the session
    (granted 2026-01-31 09:00:00 UTC by approval INTERACTION_ID)"."""
    return (
        f"{grant.grant_id}  {grant.tool_name}  {grant_scope(grant)}"
        f"  (granted {_time(grant.create_time)} by approval {grant.interaction_id})"
    )


def describe(session: session_pb2.Session, how_to_answer: Sequence[str] = ()) -> list[str]:
    """`astrabox session show`: the session, one field a line, as a person reads it; `how_to_answer`
    goes under its pending interaction."""
    rows: list[tuple[str, str]] = [("state", _state_detail(session))]
    if session.failure_reason:
        rows.append(("failure", session.failure_reason))
    rows.append(("created", f"{_time(session.create_time)} (last change {_time(session.update_time)})"))
    model = session.model or "the engine's default"
    rows.append(("engine", f"{session.engine or '?'}, model {model}, permission mode {session.permission_mode}"))
    agent = session.agent
    rows.append(("agent", f"{agent.name} v{agent.version} ({agent.agent_id})" if session.HasField("agent") else "none"))
    environment = session.environment
    rows.append(
        (
            "environment",
            f"{environment.name} v{environment.version} ({environment.environment_id})"
            if session.HasField("environment")
            else "the built-in one",
        )
    )
    if session.HasField("git_source"):
        source = session.git_source
        rows.append(
            ("repository", f"{source.url}{'@' + source.ref if source.ref else ''} in {source.directory or '.'}")
        )
    if session.HasField("forked_from"):
        origin = session.forked_from
        rows.append(("forked from", f"session {origin.session_id} at seq {origin.through_seq}"))
    if session.HasField("parent"):
        parent = session.parent
        rows.append(
            ("parent", f"session {parent.session_id} (sub-agent call {parent.interaction_id}, depth {parent.depth})")
        )
    rows.append(("host", session.agent_id or "none yet"))
    rows.append(("labels", ", ".join(f"{key}={value}" for key, value in sorted(session.labels.items())) or "none"))
    rows.append(("usage", usage_text(session.usage)))
    rows.append(("last event", f"seq {session.last_seq}"))
    if session.current_turn_id:
        rows.append(("turn", f"{session.current_turn_id} running"))
    if session.queued_turn_ids:
        rows.append(("queued", f"{len(session.queued_turn_ids)} message(s): {', '.join(session.queued_turn_ids)}"))
    for task in session.background_tasks:
        rows.append(("background", f"task {task.task_id}: {task.description}"))
    if session.HasField("destroy_failure"):
        rows.append(("sandbox", _destroy_note(session).strip()))
    lines = [f"session {session.session_id}", *(f"  {name:<12} {value}" for name, value in rows)]
    if session.HasField("pending_interaction"):
        lines.append("  pending")
        lines += [f"    {line}" for line in interaction_lines(session.pending_interaction)]
        lines += [f"    {line}" for line in how_to_answer]
    else:
        lines.append(f"  {'pending':<12} none")
    if session.tool_grants:
        lines.append("  tool grants")
        lines += [f"    {grant_line(grant)}" for grant in session.tool_grants]
    else:
        lines.append(f"  {'tool grants':<12} none")
    return lines


def _state_detail(session: session_pb2.Session) -> str:
    label = state_label(session)
    if session.state != session_pb2.SESSION_STATE_READY:
        return label
    if session.runtime_stopped:
        return f"{label}: its runtime was stopped while idle, files kept; the next message starts it again"
    if not session.runtime_available:
        return f"{label}: its sandbox is gone; the next message starts a new one and resumes the conversation"
    return f"{label}: its runtime is up"


def _time(stamp: Timestamp) -> str:
    if not stamp.seconds and not stamp.nanos:
        return "?"
    return f"{stamp.ToDatetime(tzinfo=UTC):%Y-%m-%d %H:%M:%S} UTC"
