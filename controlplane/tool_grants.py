"""Tool grants: tools a session's engine may use without asking a human.

An answer that allows a tool approval may also grant later calls of the same
tool (`AllowTool.grant`), all of them or those whose main input matches a
glob, for the rest of the session or until a time. The grant is journaled
(TOOL_GRANTED), listed on the session while in force, and revocable
(TOOL_GRANT_REVOKED). The agent decides each call, so it holds the session's
set: every grant and revocation sends the whole set in force (SetToolGrants,
the newest wins), and every StartRuntime carries it, so grants survive engine
restarts, agent restarts and a session placed on another agent. The agent
checks expiry itself; a grant never overrides the agent definition's `deny`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg
import structlog

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane import store, validation
from controlplane.agents import Agents
from controlplane.errors import InvalidArgument, ToolGrantNotFound
from controlplane.journal import EventKind, JournalTransaction, NewEvent
from controlplane.session import ToolGrantRecord

log = structlog.get_logger(__name__)

MAX_PATTERN_BYTES = 4096
# The furthest ahead a grant may lapse.
MAX_LIFETIME = timedelta(days=366)


@dataclass(frozen=True, slots=True)
class GrantScope:
    """Which later calls an answer grants: those whose main input matches `input_pattern` (empty:
    all), until `expires_at` (None: for the rest of the session)."""

    input_pattern: str = ""
    expires_at: datetime | None = None

    def check(self, now: datetime) -> None:
        """INVALID_ARGUMENT unless the pattern is bounded and the time ahead, within MAX_LIFETIME."""
        if len(self.input_pattern.encode("utf-8", "surrogatepass")) > MAX_PATTERN_BYTES:
            raise InvalidArgument(
                "allow.grant.input_pattern", f"input_pattern is longer than {MAX_PATTERN_BYTES} bytes"
            )
        if "\x00" in self.input_pattern:
            raise InvalidArgument("allow.grant.input_pattern", "input_pattern must not contain NUL")
        if self.expires_at is not None and not now < self.expires_at <= now + MAX_LIFETIME:
            raise InvalidArgument(
                "allow.grant.expire_time",
                f"expire_time {self.expires_at.isoformat()} must be in the future and at most"
                f" {MAX_LIFETIME.days} days ahead",
            )


def _from_row(row: asyncpg.Record) -> ToolGrantRecord:
    return ToolGrantRecord(
        str(row["grant_id"]),
        row["tool_name"],
        row["input_pattern"],
        row["expires_at"],
        row["created_at"],
        row["interaction_id"],
    )


def _payload(grant: ToolGrantRecord) -> dict[str, object]:
    """As the TOOL_GRANTED event's `grant` (astrabox.sessionkernel.v1.ToolGrant in JSON)."""
    payload: dict[str, object] = {
        "grant_id": grant.grant_id,
        "tool_name": grant.tool_name,
        "input_pattern": grant.input_pattern,
        "create_time": _rfc3339(grant.created_at),
        "interaction_id": grant.interaction_id,
    }
    if grant.expires_at is not None:
        payload["expire_time"] = _rfc3339(grant.expires_at)
    return payload


def for_agent(grant: ToolGrantRecord) -> runner_pb2.ToolGrant:
    message = runner_pb2.ToolGrant(
        grant_id=grant.grant_id, tool_name=grant.tool_name, input_pattern=grant.input_pattern
    )
    if grant.expires_at is not None:
        message.expire_time.FromDatetime(grant.expires_at)
    return message


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


async def in_force(db: asyncpg.Connection | asyncpg.Pool, session_id: str) -> list[runner_pb2.ToolGrant]:
    """The session's grants in force, as its agent gets them (SetToolGrants, StartRuntime)."""
    return [for_agent(_from_row(row)) for row in await store.tool_grants.in_force(db, session_id)]


async def grant(
    tx: JournalTransaction,
    agents: Agents,
    session_id: str,
    agent_id: str,
    interaction: asyncpg.Record,
    scope: GrantScope,
) -> ToolGrantRecord:
    """Grant later calls of the answered approval's tool (the caller journaled the answer) and send
    the agent the session's new set."""
    row = await store.tool_grants.insert(
        tx.conn,
        uuid.uuid4(),
        session_id,
        interaction["interaction_id"],
        interaction["tool_name"],
        scope.input_pattern,
        scope.expires_at,
    )
    made = _from_row(row)
    await tx.append(session_id, [NewEvent(EventKind.TOOL_GRANTED, {"grant": _payload(made)})])
    await send(tx, agents, session_id, agent_id)
    log.info("tool_granted", session_id=session_id, grant_id=made.grant_id, tool_name=made.tool_name)
    return made


async def revoke(
    tx: JournalTransaction, agents: Agents, session_id: str, agent_id: str, grant_id: str, request_id: str
) -> None:
    """Revoke the session's grant (again: nothing happens); NOT_FOUND for a grant it never had."""
    unknown = ToolGrantNotFound(
        f"session {session_id} has no tool grant {validation.echo(grant_id)}",
        {"session_id": session_id, "grant_id": grant_id},
    )
    try:
        parsed = uuid.UUID(grant_id)
    except ValueError:
        raise unknown from None
    revoked = await store.tool_grants.revoke(tx.conn, session_id, parsed)
    if revoked is None:
        raise unknown
    if not revoked:
        return
    await tx.append(
        session_id, [NewEvent(EventKind.TOOL_GRANT_REVOKED, {"grant_id": grant_id, "request_id": request_id})]
    )
    await send(tx, agents, session_id, agent_id)
    log.info("tool_grant_revoked", session_id=session_id, grant_id=grant_id)


async def send(tx: JournalTransaction, agents: Agents, session_id: str, agent_id: str) -> None:
    """Queue the session's whole set for its agent (none placed: its next StartRuntime carries it)."""
    if not agent_id:
        return
    grants = await in_force(tx.conn, session_id)
    command = runner_pb2.Command(set_tool_grants=runner_pb2.SetToolGrants(grants=grants))
    await agents.enqueue(tx, agent_id, session_id, command)
