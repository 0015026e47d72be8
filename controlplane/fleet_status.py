"""The operator's snapshot (AdminService.GetStatus): every agent as the control plane sees it, sessions
by state, and what is stuck, with why.

It reads what the sweep acts on (`controlplane.deadlines`, `controlplane.drains`) with the same
queries' conditions, so an item shown stuck is one the sweep has not settled yet: a sweep that is
not running, or falling behind, shows up here. Lag is what the control plane can see: commands
waiting for the agent's acknowledgement, and how late its sessions' newest outputs reached the
journal (produce_time → commit). Everything is bounded: agents are paged, stuck items capped.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime, timedelta

import asyncpg
from google.protobuf import duration_pb2

from astrabox.admin.v1 import admin_service_pb2 as pb
from controlplane import store
from controlplane.convert import timestamp
from controlplane.validation import page_size, page_token_invalid

MAX_STUCK = 100
# A connected agent counts as lagging when a command waits this long for its acknowledgement, or a
# session's newest output took this long from the agent to the journal.
COMMAND_LAG = timedelta(seconds=30)
OUTPUT_LAG = timedelta(seconds=10)

_SESSION_KINDS = {
    "creating": (pb.STUCK_KIND_SESSION_STARTUP_OVERDUE, "still creating past the startup deadline"),
    "interrupting": (pb.STUCK_KIND_SESSION_INTERRUPT_OVERDUE, "still interrupting past its interrupt deadline"),
    "lease_lapsed": (pb.STUCK_KIND_SESSION_ON_LAPSED_AGENT, "its runtime is on an agent whose lease lapsed"),
}


def _token(agent_id: str) -> str:
    return base64.urlsafe_b64encode(agent_id.encode()).decode()


def _after(page_token: str) -> str:
    if not page_token:
        return ""
    try:
        return base64.urlsafe_b64decode(page_token.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise page_token_invalid() from None


def _set(message: object, field: str, value: datetime | None) -> None:
    if value is not None:
        getattr(message, field).CopyFrom(timestamp(value))


def _agent(row: asyncpg.Record, pending: tuple[int, datetime] | None, lag: timedelta | None) -> pb.AgentStatus:
    agent = pb.AgentStatus(
        agent_id=row["agent_id"],
        version=row["agent_version"],
        connected=row["connected"],
        capacity=row["capacity"],
        live_sessions=row["live"],
        placed_sessions=row["placed"],
        project_id=row["project_id"] or "",
        pending_commands=pending[0] if pending else 0,
    )
    for field, column in (
        ("connect_time", "connected_at"),
        ("last_heartbeat_time", "heartbeat_at"),
        ("lease_expire_time", "lease_expires_at"),
        ("cordon_time", "cordoned_at"),
        ("drain_deadline", "drain_deadline"),
    ):
        _set(agent, field, row[column])
    if pending:
        _set(agent, "oldest_pending_command_time", pending[1])
    if lag is not None:
        agent.output_lag.CopyFrom(
            duration_pb2.Duration(seconds=int(lag.total_seconds()), nanos=lag.microseconds * 1000)
        )
    return agent


def _stuck_agent(row: asyncpg.Record, agent: pb.AgentStatus, now: datetime) -> list[pb.StuckItem]:
    found = []
    since = row["lease_expires_at"]
    if not agent.connected and agent.placed_sessions:
        reason = f"its lease lapsed with {agent.placed_sessions} session(s) placed on it"
        found.append(pb.StuckItem(kind=pb.STUCK_KIND_AGENT_LEASE_LAPSED, agent_id=agent.agent_id, reason=reason))
    if row["drain_deadline"] is not None and row["drain_deadline"] < now and agent.placed_sessions:
        since = row["drain_deadline"]
        reason = f"drain deadline passed with {agent.placed_sessions} session(s) still on it"
        found.append(pb.StuckItem(kind=pb.STUCK_KIND_DRAIN_OVERDUE, agent_id=agent.agent_id, reason=reason))
    if agent.connected:
        lags = []
        if agent.HasField("oldest_pending_command_time"):
            waited = now - agent.oldest_pending_command_time.ToDatetime(tzinfo=now.tzinfo)
            if waited > COMMAND_LAG:
                since = agent.oldest_pending_command_time.ToDatetime(tzinfo=now.tzinfo)
                lags.append(
                    f"{agent.pending_commands} command(s) unacknowledged, oldest {waited.total_seconds():.0f} s"
                )
        if agent.HasField("output_lag") and agent.output_lag.ToTimedelta() > OUTPUT_LAG:
            lags.append(f"outputs reach the journal {agent.output_lag.ToTimedelta().total_seconds():.1f} s late")
        if lags:
            found.append(
                pb.StuckItem(kind=pb.STUCK_KIND_RELAY_LAGGING, agent_id=agent.agent_id, reason="; ".join(lags))
            )
    for item in found:
        if not item.HasField("since"):
            _set(item, "since", since)
    return found


async def snapshot(
    pool: asyncpg.Pool, request: pb.GetStatusRequest, startup_deadline: timedelta
) -> pb.GetStatusResponse:
    """GetStatus's answer: one page of agents, sessions by state, and what is stuck."""
    limit = page_size(request.page_size, 100, 500)
    after = _after(request.page_token)
    async with pool.acquire() as conn:
        now: datetime = await conn.fetchval("SELECT now()")
        rows = await store.agents.status_page(conn, after, limit)
        ids = [row["agent_id"] for row in rows]
        pending = await store.agent_commands.pending_by_agent(conn, ids)
        lags = await store.sessions.output_lag(conn, ids)
        by_state = await store.sessions.count_by_state(conn)
        sessions = await store.sessions.stuck(conn, startup_deadline, MAX_STUCK + 1)
    response = pb.GetStatusResponse(
        sessions_by_state=by_state,
        next_page_token=_token(ids[-1]) if len(ids) == limit else "",
    )
    _set(response, "time", now)
    stuck: list[tuple[datetime, pb.StuckItem]] = []
    for row in sessions:
        kind, reason = _SESSION_KINDS[row["why"]]
        item = pb.StuckItem(kind=kind, session_id=row["session_id"], agent_id=row["agent_id"], reason=reason)
        _set(item, "since", row["since"])
        stuck.append((row["since"], item))
    for row in rows:
        agent = _agent(row, pending.get(row["agent_id"]), lags.get(row["agent_id"]))
        response.agents.append(agent)
        stuck.extend((item.since.ToDatetime(tzinfo=now.tzinfo), item) for item in _stuck_agent(row, agent, now))
    stuck.sort(key=lambda pair: pair[0])
    response.stuck.extend(item for _, item in stuck[:MAX_STUCK])
    response.stuck_truncated = len(stuck) > MAX_STUCK
    return response
