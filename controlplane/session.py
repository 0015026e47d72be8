"""The session projection: its states and what GetSession shows of it."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from controlplane.engines import EngineManifest
from controlplane.usage import Usage


class BackgroundTaskState(enum.Enum):
    """A background task's row in `background_tasks`."""

    OPEN = "open"
    CLOSED = "closed"  # the engine reported a terminal status
    LOST = "lost"  # the runtime that ran it is gone (BACKGROUND_TASK_LOST)


class SessionState(enum.Enum):
    CREATING = "creating"
    READY = "ready"
    RUNNING = "running"
    WAITING_FOR_INPUT = "waiting_for_input"
    INTERRUPTING = "interrupting"
    ARCHIVED = "archived"
    DELETED = "deleted"
    FAILED = "failed"

    @property
    def busy(self) -> bool:
        """A turn is in progress (its messages queue up behind it)."""
        return self in (SessionState.RUNNING, SessionState.WAITING_FOR_INPUT, SessionState.INTERRUPTING)


class InteractionKind(enum.Enum):
    TOOL_APPROVAL = "tool_approval"
    QUESTION = "question"
    # One of the agent's custom tools, run by the client: answered with its result.
    CUSTOM_TOOL = "custom_tool"
    # A call of one of the agent's sub-agents: the control plane answers it (`controlplane.subagents`).
    SUBAGENT = "subagent"

    @classmethod
    def for_tool(cls, tool_name: str, custom_tool: bool = False, subagent: bool = False) -> InteractionKind:
        if subagent:
            return cls.SUBAGENT
        if custom_tool:  # the agent says so: its own MCP server for the client's tools asked
            return cls.CUSTOM_TOOL
        return cls.QUESTION if tool_name == "AskUserQuestion" else cls.TOOL_APPROVAL


def questions_of(tool_input: Any) -> list[dict[str, Any]]:
    """The questions of an AskUserQuestion input, in the shape of the Question message."""
    questions = tool_input.get("questions") if isinstance(tool_input, dict) else None
    result = []
    for q in questions if isinstance(questions, list) else []:
        if not isinstance(q, dict):
            continue
        options = [o.get("label", "") if isinstance(o, dict) else str(o) for o in q.get("options") or []]
        result.append(
            {
                "question": str(q.get("question", "")),
                "header": str(q.get("header", "")),
                "options": options,
                "multi_select": bool(q.get("multiSelect", False)),
            }
        )
    return result


@dataclass(frozen=True, slots=True)
class InteractionRecord:
    interaction_id: str
    kind: InteractionKind
    turn_id: str
    tool_name: str
    input: Mapping[str, Any]
    tool_use_id: str
    requested_seq: int

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> InteractionRecord:
        return cls(
            interaction_id=row["interaction_id"],
            kind=InteractionKind(row["kind"]),
            turn_id=row["turn_id"],
            tool_name=row["tool_name"],
            input=row["input"],
            tool_use_id=row["tool_use_id"],
            requested_seq=row["requested_seq"],
        )


@dataclass(frozen=True, slots=True)
class BackgroundTaskRecord:
    task_id: str
    description: str
    started_seq: int


@dataclass(frozen=True, slots=True)
class ToolGrantRecord:
    """A tool grant in force, as a session's view lists it."""

    grant_id: str
    tool_name: str
    input_pattern: str
    expires_at: datetime | None
    created_at: datetime
    interaction_id: str

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> ToolGrantRecord:
        """From the view's `to_jsonb` of a tool_grants row."""
        expires = value["expires_at"]
        return cls(
            str(value["grant_id"]),
            value["tool_name"],
            value["input_pattern"],
            datetime.fromisoformat(expires) if expires else None,
            datetime.fromisoformat(value["created_at"]),
            value["interaction_id"],
        )


@dataclass(frozen=True, slots=True)
class SubagentParent:
    """The parent session's call a sub-agent's session answers (`controlplane.subagents`)."""

    session_id: str
    interaction_id: str
    tool_use_id: str
    depth: int

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> SubagentParent:
        return cls(str(value["session_id"]), value["interaction_id"], value["tool_use_id"], int(value["depth"]))


@dataclass(frozen=True, slots=True)
class SessionAgent:
    """The agent definition version a session runs."""

    agent_id: str
    name: str
    version: int

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> SessionAgent | None:
        if row.get("agent_definition_id") is None:
            return None
        return cls(str(row["agent_definition_id"]), row["agent_name"], row["agent_version"])


@dataclass(frozen=True, slots=True)
class SessionEnvironment:
    """The environment version a session pins, as CreateSession resolved it: every StartRuntime
    for the session carries this spec, whatever the environment has become since."""

    environment_id: str
    name: str
    version: int
    build_digest: str
    # The version's serialized astrabox.environments.v1.EnvironmentSpec.
    spec: bytes

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> SessionEnvironment | None:
        if row.get("environment_id") is None:
            return None
        return cls(
            str(row["environment_id"]),
            row["environment_name"],
            row["environment_version"],
            row["environment_build_digest"],
            bytes(row["environment_spec"]),
        )


@dataclass(frozen=True, slots=True)
class SessionRecord:
    session_id: str
    request_id: str
    engine: str
    permission_mode: str
    model: str
    state: SessionState
    runtime_available: bool
    # Stopped while idle; the next message starts it again on the same agent.
    runtime_stopped: bool
    agent_id: str
    current_turn_id: str
    engine_session_id: str
    failure_reason: str
    last_seq: int
    created_at: datetime
    updated_at: datetime
    labels: Mapping[str, str] = field(default_factory=dict)
    sandbox_id: str = ""
    slash_commands: Sequence[str] = ()
    pending_interaction: InteractionRecord | None = None
    background_tasks: Sequence[BackgroundTaskRecord] = ()
    queued_turn_ids: Sequence[str] = ()
    # As the agents declared it (read by `store.sessions.view`); None when no agent declared the engine.
    engine_manifest: EngineManifest | None = None
    # The project the session belongs to.
    project_id: uuid.UUID | None = None
    # Why its sandbox could not be destroyed after a release (empty: it could, or is not released);
    # failures in a row, when it is tried again, and when it was abandoned to an operator.
    destroy_failure: str = ""
    destroy_attempts: int = 0
    destroy_retry_at: datetime | None = None
    destroy_abandoned_at: datetime | None = None
    # Tools it may use without asking, in force, oldest first (`controlplane.tool_grants`).
    tool_grants: Sequence[ToolGrantRecord] = ()
    # The agent definition version it pins (None: created without one) and its configuration, the
    # serialized astrabox.agents.v1.AgentSpec (`controlplane.session_config`).
    agent: SessionAgent | None = None
    config: bytes = b""
    # The git repository it started with: a serialized GitSource, empty for none.
    git_source: bytes = b""
    # What its turns used so far (`controlplane.usage`).
    usage: Usage = field(default_factory=Usage)
    # The environment version it pins (None: the built-in environment).
    environment: SessionEnvironment | None = None
    # The session and the seq of its turn end this one was forked from (None: not a fork).
    forked_from: tuple[str, int] | None = None
    # The sub-agent call that started it (None: a client did), read by `store.sessions.view`.
    parent: SubagentParent | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> SessionRecord:
        """From a sessions row, optionally with the columns `store.sessions.view` adds."""
        keys = set(row.keys())
        pending = row["pending_interaction"] if "pending_interaction" in keys else None
        tasks = row["background_tasks"] if "background_tasks" in keys else None
        manifest = row["engine_manifest"] if "engine_manifest" in keys else None
        return cls(
            session_id=str(row["session_id"]),
            request_id=row["request_id"],
            engine=row["engine"],
            permission_mode=row["permission_mode"],
            model=row["model"],
            state=SessionState(row["state"]),
            runtime_available=row["runtime_available"],
            runtime_stopped=row["runtime_stopped"],
            agent_id=row["agent_id"] or "",
            current_turn_id=row["current_turn_id"] or "",
            engine_session_id=row["engine_session_id"],
            failure_reason=row["failure_reason"],
            last_seq=row["last_seq"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            labels=dict(row["labels"]),
            sandbox_id=row["sandbox_id"] or "",
            slash_commands=tuple(row["slash_commands"] or ()),
            pending_interaction=InteractionRecord.from_row(pending) if pending else None,
            background_tasks=tuple(BackgroundTaskRecord(**t) for t in tasks or ()),
            queued_turn_ids=tuple(row["queued_turn_ids"] or ()) if "queued_turn_ids" in keys else (),
            engine_manifest=EngineManifest.from_json(row["engine"], manifest) if manifest else None,
            project_id=row["project_id"] if "project_id" in keys else None,
            destroy_failure=row["destroy_failure"] if "destroy_failure" in keys else "",
            destroy_attempts=row["destroy_attempts"] if "destroy_attempts" in keys else 0,
            destroy_retry_at=row["destroy_retry_at"] if "destroy_retry_at" in keys else None,
            destroy_abandoned_at=row["destroy_abandoned_at"] if "destroy_abandoned_at" in keys else None,
            tool_grants=tuple(
                ToolGrantRecord.from_json(g) for g in (row["tool_grants"] if "tool_grants" in keys else None) or ()
            ),
            agent=SessionAgent.from_row(row),
            config=bytes(row["config"]) if "config" in keys else b"",
            environment=SessionEnvironment.from_row(row),
            git_source=bytes(row["git_source"] or b"") if "git_source" in keys else b"",
            usage=Usage.totals_of(row) if "usage_turns" in keys else Usage(),
            forked_from=(
                (str(row["forked_from_session_id"]), int(row["forked_from_seq"]))
                if row.get("forked_from_session_id") is not None
                else None
            ),
            parent=SubagentParent.from_json(row["subagent_parent"]) if row.get("subagent_parent") else None,
        )
