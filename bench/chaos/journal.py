"""The round's sessions as PostgreSQL holds them: journals, projections and agent commands.

Read straight from the database the control plane writes (deleted sessions included, which the
API no longer shows), after the round; each row converted once, here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2

TURN_END = ("turn_completed", "turn_failed", "turn_interrupted")


@dataclass(frozen=True, slots=True)
class Row:
    seq: int
    at: datetime
    kind: str
    turn_id: str
    payload: dict[str, Any]
    output_seq: int | None

    @property
    def message(self) -> dict[str, Any]:
        """An engine message's SDK fields ({} for other kinds)."""
        message = self.payload.get("message") if self.kind == "engine_message" else None
        return message if isinstance(message, dict) else {}

    @property
    def type_name(self) -> str:
        return str(self.payload.get("type_name", "")) if self.kind == "engine_message" else ""

    def tool_uses(self) -> Iterator[dict[str, Any]]:
        """The tool calls an AssistantMessage makes: blocks with an id, a name and an input."""
        if self.type_name != "AssistantMessage":
            return
        for block in self.message.get("content") or ():
            if isinstance(block, dict) and {"id", "name", "input"} <= block.keys():
                yield block

    def summary(self, width: int = 140) -> str:
        text = json.dumps(self.payload, separators=(",", ":"))
        return f"{self.seq:>5} {self.at:%H:%M:%S.%f}"[:-3] + f" {self.kind:<22} {self.turn_id[:8]:<8} {text[:width]}"


@dataclass(frozen=True, slots=True)
class SessionRow:
    session_id: str
    state: str
    agent_id: str
    current_turn_id: str
    runtime_available: bool
    deleted: bool


@dataclass(frozen=True, slots=True)
class CommandRow:
    agent_id: str
    session_id: str
    kind: str
    created_at: datetime
    acked: bool
    error: str


async def journals(conn: asyncpg.Connection, session_ids: list[str]) -> dict[str, list[Row]]:
    rows = await conn.fetch(
        "SELECT session_id::text AS sid, seq, at, kind, coalesce(turn_id, '') AS turn_id, payload::text AS payload,"
        " output_seq FROM events WHERE session_id = ANY($1::uuid[]) ORDER BY session_id, seq",
        session_ids,
    )
    found: dict[str, list[Row]] = {sid: [] for sid in session_ids}
    for r in rows:
        found[r["sid"]].append(
            Row(r["seq"], r["at"], r["kind"], r["turn_id"], json.loads(r["payload"]), r["output_seq"])
        )
    return found


async def sessions(conn: asyncpg.Connection, session_ids: list[str]) -> dict[str, SessionRow]:
    rows = await conn.fetch(
        "SELECT session_id::text AS sid, state, coalesce(agent_id, '') AS agent_id,"
        " coalesce(current_turn_id, '') AS turn, runtime_available, deleted_at IS NOT NULL AS deleted"
        " FROM sessions WHERE session_id = ANY($1::uuid[])",
        session_ids,
    )
    return {
        r["sid"]: SessionRow(r["sid"], r["state"], r["agent_id"], r["turn"], r["runtime_available"], r["deleted"])
        for r in rows
    }


async def commands(conn: asyncpg.Connection) -> list[CommandRow]:
    rows = await conn.fetch(
        "SELECT agent_id, session_id::text AS sid, body, created_at, acked_at IS NOT NULL AS acked,"
        " coalesce(error, '') AS error FROM agent_commands"
    )
    return [
        CommandRow(
            r["agent_id"],
            r["sid"],
            runner_pb2.Command.FromString(r["body"]).WhichOneof("body") or "",
            r["created_at"],
            r["acked"],
            r["error"],
        )
        for r in rows
    ]


async def now(conn: asyncpg.Connection) -> datetime:
    value: datetime = await conn.fetchval("SELECT clock_timestamp()")
    return value


_LAPSED = re.compile(r"agent (?P<agent>\S+) stopped answering")


def lapsed_agent(row: Row) -> str:
    """The agent whose lease lapse a RUNTIME_LOST (or a failed turn) blames; "" when it blames none."""
    match = _LAPSED.search(str(row.payload.get("reason", "")))
    return match["agent"] if match and "lease" in str(row.payload.get("reason", "")) else ""
