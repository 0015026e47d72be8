"""Commits agents' output to the journal, exactly once and in order.

Per session, outputs carry a contiguous output_seq. Outputs at or below the
session's committed_output_seq are duplicates (a resend after a reconnect)
and are skipped; an output beyond committed + 1 is a gap, refused as a whole
for that session. Engine messages are journaled verbatim; the projection
(state, current turn, engine session id) is updated in the same transaction.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane.journal import EventKind, Journal, JournalTransaction, NewEvent
from controlplane.session import SessionState

log = structlog.get_logger(__name__)


class OutputGap(Exception):
    """An output arrived before the one that precedes it was committed."""

    def __init__(self, session_id: str, committed: int, received: int) -> None:
        super().__init__(
            f"session {session_id}: expected output_seq {committed + 1}, got {received}; "
            f"resend from {committed + 1}"
        )
        self.session_id = session_id
        self.committed = committed


@dataclass(frozen=True, slots=True)
class CommitResult:
    # Committed output_seq per session touched by the batch.
    committed: dict[str, int]
    # Sessions whose outputs were refused, with the reason.
    refused: dict[str, OutputGap]


class OutputCommitter:
    def __init__(self, journal: Journal) -> None:
        self._journal = journal

    async def commit(self, agent_id: str, outputs: Sequence[runner_pb2.Output]) -> CommitResult:
        """Journal a batch in one transaction; returns what is now committed."""
        by_session: dict[str, list[runner_pb2.Output]] = defaultdict(list)
        for output in outputs:
            by_session[output.session_id].append(output)
        committed: dict[str, int] = {}
        refused: dict[str, OutputGap] = {}
        async with self._journal.transaction() as tx:
            for session_id in sorted(by_session):  # a fixed lock order avoids deadlocks
                try:
                    committed[session_id] = await self._commit_session(tx, session_id, by_session[session_id])
                except OutputGap as gap:
                    refused[session_id] = gap
                    committed[session_id] = gap.committed
                except LookupError:
                    # Nowhere to journal them: acknowledge so the agent stops resending.
                    dropped = max(o.output_seq for o in by_session[session_id])
                    log.warning("output_for_unknown_session", session_id=session_id, agent_id=agent_id,
                                through_output_seq=dropped)
                    committed[session_id] = dropped
        return CommitResult(committed, refused)

    async def _commit_session(self, tx: JournalTransaction, session_id: str, outputs: list[runner_pb2.Output]) -> int:
        row = await tx.lock_session(session_id)
        if row is None:
            raise LookupError(session_id)
        cursor = row["committed_output_seq"]
        fresh = []
        for output in sorted(outputs, key=lambda o: o.output_seq):
            if output.output_seq <= cursor:
                continue  # already journaled: a resend
            if output.output_seq != cursor + 1:
                raise OutputGap(session_id, row["committed_output_seq"], output.output_seq)
            fresh.append(output)
            cursor = output.output_seq
        if not fresh:
            return cursor
        state = _Projection(dict(row))
        events: list[NewEvent] = []
        for output in fresh:
            events.extend(state.apply(output))
        if state.deleted:
            # A deleted session keeps its journal closed; its outputs are acknowledged and dropped.
            await tx.update_session(session_id, committed_output_seq=cursor)
            return cursor
        await tx.append(session_id, events)
        await tx.update_session(session_id, committed_output_seq=cursor, **state.changes)
        return cursor


class _Projection:
    """Folds outputs into journal events and the session columns they change."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.deleted = row["state"] == SessionState.DELETED.value
        self.changes: dict[str, Any] = {}

    def apply(self, output: runner_pb2.Output) -> list[NewEvent]:
        body = output.WhichOneof("body")
        turn_id = output.turn_id
        if body == "engine_message":
            return self._engine_message(output)
        if body == "runtime_started":
            started = output.runtime_started
            self.changes.update(state=SessionState.READY, runtime_available=True, failure_reason="")
            payload = {"sandbox_id": started.sandbox_id, "driver": started.driver,
                       "workspace": started.workspace, "sandbox_ms": started.sandbox_ms}
            return [NewEvent(EventKind.RUNTIME_READY, payload, output_seq=output.output_seq)]
        if body == "runtime_start_failed":
            reason = output.runtime_start_failed.reason
            self.changes.update(state=SessionState.FAILED, runtime_available=False, failure_reason=reason)
            return [NewEvent(EventKind.RUNTIME_FAILED, {"reason": reason}, output_seq=output.output_seq)]
        if body == "turn_aborted":
            reason = output.turn_aborted.reason
            self.changes.update(state=SessionState.READY, current_turn_id=None, failure_reason=reason)
            return [NewEvent(EventKind.TURN_FAILED, {"reason": reason}, turn_id=turn_id, output_seq=output.output_seq)]
        raise ValueError(f"output {output.output_seq} of session {output.session_id} has no body")

    def _engine_message(self, output: runner_pb2.Output) -> list[NewEvent]:
        message = output.engine_message
        data = json.loads(message.payload_json or "{}")
        events = [
            NewEvent(
                EventKind.ENGINE_MESSAGE,
                {"type_name": message.type_name, "message": data},
                turn_id=output.turn_id,
                output_seq=output.output_seq,
            )
        ]
        engine_session_id = _engine_session_id(message.type_name, data)
        if engine_session_id:
            self.changes["engine_session_id"] = engine_session_id
        if message.type_name == "ResultMessage":
            self.changes.update(state=SessionState.READY, current_turn_id=None)
            events.append(
                NewEvent(
                    EventKind.TURN_COMPLETED,
                    {
                        "subtype": str(data.get("subtype", "")),
                        "is_error": bool(data.get("is_error", False)),
                        "duration_ms": int(data.get("duration_ms") or 0),
                        "result": str(data.get("result") or ""),
                    },
                    turn_id=output.turn_id,
                )
            )
        return events


def _engine_session_id(type_name: str, data: dict[str, Any]) -> str:
    if type_name == "ResultMessage":
        return str(data.get("session_id") or "")
    if type_name == "SystemMessage" and data.get("subtype") == "init":
        inner = data.get("data") or {}
        return str(inner.get("session_id") or "")
    return ""
