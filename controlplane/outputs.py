"""Commits agents' output to the journal, exactly once and in order.

Per session, outputs carry a contiguous output_seq. Outputs at or below the
session's committed_output_seq are duplicates (a resend after a reconnect)
and are skipped; an output beyond committed + 1 is a gap, refused as a whole
for that session. Engine messages are journaled verbatim; each output's
projection change (state, turn, interaction, tasks) happens in the same
transaction, guarded by the current turn so a late output of a turn that was
already settled cannot overwrite newer state.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane import store
from controlplane.journal import EventKind, Journal, NewEvent
from controlplane.output_applier import OutputApplier, produce_time, tool_calls, tool_results
from controlplane.session import SessionState
from controlplane.turns import Turns

log = structlog.get_logger(__name__)

# The engine messages `OutputApplier` may do more with than journal them: `_changes_projection` reads them.
_READ_FIRST = frozenset(
    {
        "ResultMessage",
        "SystemMessage",
        "TaskStartedMessage",
        "TaskNotificationMessage",
        "TaskUpdatedMessage",
        "AssistantMessage",
        "UserMessage",
    }
)


class OutputGap(Exception):
    """An output arrived before the one that precedes it was committed."""

    def __init__(self, session_id: str, committed: int, received: int) -> None:
        super().__init__(
            f"session {session_id}: expected output_seq {committed + 1}, got {received}; resend from {committed + 1}"
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
    def __init__(self, journal: Journal, turns: Turns) -> None:
        self._journal = journal
        self._turns = turns

    async def commit(self, agent_id: str, outputs: Sequence[runner_pb2.Output]) -> CommitResult:
        """Journal a batch in one transaction; returns what is now committed.

        The statements do not grow with the batch: the sessions are locked together, their plain
        events (most of a batch) inserted together and their cursors moved together at the end;
        only an output that changes the projection costs statements of its own."""
        by_session: dict[str, list[runner_pb2.Output]] = defaultdict(list)
        for output in outputs:
            by_session[output.session_id].append(output)
        committed: dict[str, int] = {}
        refused: dict[str, OutputGap] = {}
        # Most of a batch is the engine's messages, following what was committed and changing nothing
        # else: those sessions' runs are committed in one statement, and only the rest the long way.
        runs = {s: run for s, batch in by_session.items() if (run := _plain_run(batch)) is not None}
        if runs:
            for session_id in await self._journal.append_outputs(agent_id, runs):
                committed[session_id] = runs[session_id].rows[-1][3]
                del by_session[session_id]
            if not by_session:
                return CommitResult(committed, refused)
        fresh: dict[str, list[runner_pb2.Output]] = {}
        async with self._journal.transaction() as tx:
            # An id that is not a session's (a buggy or hostile agent's) names no row: its outputs are
            # dropped like an unknown session's rather than failing the whole stream on the query.
            rows = await store.sessions.lock_many(tx.conn, [s for s in by_session if _is_session_id(s)])
            for session_id in sorted(by_session):
                batch = sorted(by_session[session_id], key=lambda o: o.output_seq)
                row = rows.get(session_id)
                if row is None or row["state"] == SessionState.DELETED.value or row["agent_id"] != agent_id:
                    committed[session_id] = _dropped(agent_id, session_id, batch)
                    continue
                try:
                    committed[session_id], news = _new_outputs(session_id, row["committed_output_seq"], batch)
                except OutputGap as gap:
                    refused[session_id] = gap
                    committed[session_id] = gap.committed
                    continue
                if news:
                    fresh[session_id] = news
            turn_ids = {s: {o.turn_id for o in news if o.turn_id} for s, news in fresh.items()}
            ended = await store.turns.settled_among_many(tx.conn, turn_ids)
            tails: dict[str, list[NewEvent]] = {}
            for session_id, news in fresh.items():
                applier = OutputApplier(tx, self._turns, session_id, ended.get(session_id, set()))
                for output in news:
                    await applier.apply(output)
                tails[session_id] = applier.take()
            await tx.append_many(tails)
            await store.sessions.set_committed_output_seqs(tx.conn, {s: committed[s] for s in fresh})
        return CommitResult(committed, refused)


def _plain_run(outputs: list[runner_pb2.Output]) -> store.events.OutputRun | None:
    """A session's outputs as one run of journal rows, when each follows the one before it, all
    belong to one turn (or none) and none changes more than the journal; None otherwise. Its rows are
    what `OutputApplier` journals for outputs of a turn that has not ended (`append_outputs` checks it)."""
    if not _is_session_id(outputs[0].session_id):
        return None
    outputs = sorted(outputs, key=lambda o: o.output_seq)
    rows: list[store.events.OutputRow] = []
    turn_ids = set()
    for output in outputs:
        if rows and output.output_seq != rows[-1][3] + 1:
            return None
        row = _plain_row(output)
        if row is None:
            return None
        rows.append(row)
        if output.turn_id:
            turn_ids.add(output.turn_id)
    if len(turn_ids) > 1:
        return None
    return store.events.OutputRun(rows, next(iter(turn_ids), ""))


def _plain_row(output: runner_pb2.Output) -> store.events.OutputRow | None:
    """The journal row of an output that changes nothing but the journal, as `OutputApplier` journals it,
    with an engine message's JSON stored as the agent wrote it; None for one `OutputApplier` must see."""
    body = output.WhichOneof("body")
    turn_id: str | None = None
    if body == "engine_message":
        message = output.engine_message
        text = message.payload_json or "{}"
        if not text.lstrip().startswith("{"):
            return None
        if message.type_name in _READ_FIRST and _changes_projection(message.type_name, json.loads(text)):
            return None
        kind = EventKind.ENGINE_MESSAGE
        payload = f'{{"type_name":{json.dumps(message.type_name)},"message":{text}}}'
        turn_id = output.turn_id or None
    elif body == "startup_phase":
        phase = output.startup_phase
        kind = EventKind.STARTUP_PHASE
        payload = json.dumps({"phase": phase.phase, "duration_ms": phase.duration_ms})
    elif body == "sandbox_reconciled":
        done = output.sandbox_reconciled
        kind = EventKind.SANDBOX_RECONCILED
        payload = json.dumps(
            {"action": done.action, "sandbox_id": done.sandbox_id, "driver": done.driver, "reason": done.reason}
        )
    else:
        return None
    return (kind.value, turn_id, payload, output.output_seq, produce_time(output))


def _changes_projection(type_name: str, data: dict[str, Any]) -> bool:
    """Whether `OutputApplier._on_engine_message` does more with this message than journal it: a result, the
    engine's init, a background task's start or end, a tool call opened or answered."""
    if type_name == "ResultMessage":
        return True
    if type_name == "SystemMessage":
        return data.get("subtype") == "init"
    if type_name in ("TaskStartedMessage", "TaskNotificationMessage", "TaskUpdatedMessage"):
        return bool(data.get("task_id"))
    return bool(tool_calls(type_name, data) or tool_results(type_name, data))


def _dropped(agent_id: str, session_id: str, outputs: list[runner_pb2.Output]) -> int:
    """Outputs with nowhere to be journaled (an unknown or deleted session, or one placed on another
    agent since): acknowledged all the same, so the agent stops resending them."""
    last_offered = outputs[-1].output_seq
    log.warning("outputs_dropped", session_id=session_id, agent_id=agent_id, through_output_seq=last_offered)
    for output in outputs:
        if output.HasField("sandbox_reconciled"):
            done = output.sandbox_reconciled
            log.info(
                "sandbox_reconciled",
                session_id=session_id,
                agent_id=agent_id,
                action=done.action,
                sandbox_id=done.sandbox_id,
                driver=done.driver,
                reason=done.reason,
            )
    return last_offered


def _new_outputs(
    session_id: str, committed: int, outputs: list[runner_pb2.Output]
) -> tuple[int, list[runner_pb2.Output]]:
    """The session's cursor after `outputs` (in output_seq order) and those of them not journaled yet;
    OutputGap when one does not follow the one before it."""
    cursor = committed
    fresh = []
    for output in outputs:
        if output.output_seq <= cursor:
            continue  # already journaled: a resend
        if output.output_seq != cursor + 1:
            raise OutputGap(session_id, committed, output.output_seq)
        fresh.append(output)
        cursor = output.output_seq
    return cursor, fresh


def _is_session_id(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True
