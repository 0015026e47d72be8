"""The checks of a chaos round, each a list of violations naming the session they concern.

journal          each session's journal is seq 1..n; the agent's outputs in it are in order, once each
watchers         every watcher received exactly the journal from where it started (resumes
                 included), nothing twice, nothing skipped; those still open at the end caught up
inputs           every accepted message has one USER_MESSAGE_ACCEPTED and exactly one end
                 (completed, failed with a reason, interrupted); delivered and answered at most once;
                 its command run at most once
stuck            no turn went without an end for longer than the actors' deadline during the round
interactions     every question is answered or closed; none is asked for a turn already ended
tool calls       every tool call the engine made has a result (or an error result) in the journal
permission mode  no turn fails because a per-message mode outlived its turn
settled          after the faults stop every session settles: READY, ARCHIVED, DELETED or FAILED,
                 with no turn, queued message, pending question or background task left open
leaks            no sandbox (directory, container, process) of a deleted or archived session, or
                 on an agent the session is no longer placed on; at most one engine per sandbox
commands         no command left unacknowledged at the end, none re-sent over and over while
                 nothing happens
leases           no lease lapses while the agent's process and stream were left alone
clients          no client ever sees UNKNOWN or INTERNAL; no NO_AGENT_AVAILABLE (or full fleet)
                 while every agent runs and the round holds fewer runtimes than the capacity
"""

from __future__ import annotations

import itertools
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from astrabox.sessionkernel.v1 import session_pb2
from chaos.driver import TURN_DEADLINE_S
from chaos.journal import TURN_END, CommandRow, Row, SessionRow, lapsed_agent
from chaos.records import Round, SessionLog, Turn
from chaos.sandboxes import HostSandbox

SETTLED = ("READY", "ARCHIVED", "DELETED", "FAILED")
# A lease lapse is blamed on a fault that hit the agent (or the database, or a replica) up to this
# long after the fault ended: the lease itself, the sweep's period and some slack.
LAPSE_EXCUSE_S = 15.0 + 2.0 + 15.0
_MARKER = re.compile(r"\bm[0-9a-f]{8}\b")
_MODE_LEAK = re.compile(r"[Cc]annot set permission mode|dangerously-skip-permissions")


@dataclass(frozen=True, slots=True)
class Violation:
    check: str
    session_id: str
    detail: str
    # What a user lost by it, for the figures: "lost", "duplicated", "stuck", "leaked" or "" (other).
    symptom: str = ""


@dataclass
class Facts:
    """What the checks read: the round's records and what PostgreSQL, the API and the hosts hold."""

    round: Round
    journals: dict[str, list[Row]]
    rows: dict[str, SessionRow]
    projections: dict[str, session_pb2.Session]
    sandboxes: list[HostSandbox]
    commands: list[CommandRow]
    quiet_since: datetime
    stuck: list[Turn]


def run_all(facts: Facts) -> list[Violation]:
    found: list[Violation] = []
    for session in facts.round.sessions.values():
        journal = facts.journals.get(session.session_id, [])
        found += journal_order(session, journal)
        found += watchers(session, journal)
        found += inputs(session, journal)
        found += interactions(session, journal)
        found += tool_calls(session, journal)
        found += settled(session, facts)
    found += [Violation("stuck", t.session_id, f"turn {t.turn_id} ({t.text.splitlines()[0]!r}) had no end after the actor's deadline", "stuck") for t in stuck(facts)]  # fmt: skip
    found += leaks(facts)
    found += killed_agents(facts)
    found += commands(facts)
    found += leases(facts)
    found += clients(facts.round)
    return found


def journal_order(session: SessionLog, journal: list[Row]) -> list[Violation]:
    sid, found = session.session_id, []
    seqs = [row.seq for row in journal]
    if seqs != list(range(1, len(seqs) + 1)):
        found.append(Violation("journal", sid, f"seqs are not 1..{len(seqs)}: {_first_break(seqs)}", "lost"))
    outputs = [row.output_seq for row in journal if row.output_seq is not None]
    if any(b <= a for a, b in itertools.pairwise(outputs)):
        found.append(
            Violation("journal", sid, f"agent outputs out of order or twice: {_first_break(outputs)}", "duplicated")
        )
    return found


def _first_break(values: list[int]) -> str:
    for index, (a, b) in enumerate(itertools.pairwise(values)):
        if b != a + 1:
            return f"{a} then {b} at position {index + 1}"
    return f"starts at {values[0]}" if values else "empty"


def watchers(session: SessionLog, journal: list[Row]) -> list[Violation]:
    sid, found = session.session_id, []
    for number, log in enumerate(session.watchers, 1):
        name = f"watcher {number} (from seq {log.after_seq}, {log.resumes} resume(s))"
        found += [
            Violation("watchers", sid, f"{name}: {a}", "duplicated" if "again" in a else "lost") for a in log.anomalies
        ]
        expected = [(row.seq, row.kind, row.turn_id) for row in journal if row.seq > log.after_seq]
        received = log.received
        for index, got in enumerate(received):
            want = expected[index] if index < len(expected) else None
            if got != want:
                found.append(
                    Violation("watchers", sid, f"{name}: event {index + 1} was {got}, the journal has {want}", "lost")
                )
                break
        if log.last_seq < log.caught_up_to:
            found.append(
                Violation("watchers", sid, f"{name}: never received seq {log.last_seq + 1}..{log.caught_up_to}", "lost")
            )
    return found


def inputs(session: SessionLog, journal: list[Row]) -> list[Violation]:
    sid, found = session.session_id, []
    by_turn: dict[str, Counter[str]] = {}
    results: Counter[str] = Counter()
    for row in journal:
        by_turn.setdefault(row.turn_id, Counter())[row.kind] += 1
        if row.type_name == "ResultMessage":
            results[row.turn_id] += 1
    commands = [str(block.get("input", {}).get("command", "")) for row in journal for block in row.tool_uses()]
    for turn in session.turns:
        kinds = by_turn.get(turn.turn_id, Counter())
        what = f"turn {turn.turn_id} ({turn.text.splitlines()[0]!r})"
        if kinds["user_message_accepted"] != 1:
            found.append(Violation("inputs", sid, f"{what}: accepted {kinds['user_message_accepted']} times"))
        ends = sum(kinds[kind] for kind in TURN_END)
        if ends == 0:
            delivered = kinds["input_delivered"] > 0
            how = "delivered, stuck" if delivered else "never delivered"
            found.append(Violation("inputs", sid, f"{what}: never ended ({how})", "stuck" if delivered else "lost"))
        elif ends > 1:
            found.append(Violation("inputs", sid, f"{what}: ended {ends} times", "duplicated"))
        if kinds["input_delivered"] > 1:
            found.append(Violation("inputs", sid, f"{what}: delivered {kinds['input_delivered']} times", "duplicated"))
        if results[turn.turn_id] > 1:
            found.append(
                Violation(
                    "inputs", sid, f"{what}: answered {results[turn.turn_id]} times (ResultMessages)", "duplicated"
                )
            )
        marker = _MARKER.search(turn.text)
        if marker and turn.script in ("run", "background"):
            runs = sum(marker[0] in command for command in commands)
            if runs > 1:
                found.append(Violation("inputs", sid, f"{what}: its command ran {runs} times", "duplicated"))
        for row in journal:
            if row.turn_id == turn.turn_id and row.kind in TURN_END:
                text = str(row.payload.get("reason", "")) + str(row.payload.get("result", ""))
                if _MODE_LEAK.search(text):
                    found.append(Violation("permission mode", sid, f"{what}: {row.kind}: {text[:200]}"))
    return found


def interactions(session: SessionLog, journal: list[Row]) -> list[Violation]:
    sid, found = session.session_id, []
    ended: set[str] = set()
    open_: dict[str, int] = {}
    for row in journal:
        if row.kind in TURN_END:
            ended.add(row.turn_id)
        elif row.kind == "interaction_requested":
            interaction = row.payload.get("interaction") or {}
            interaction_id = str(interaction.get("interaction_id", "")) if isinstance(interaction, dict) else ""
            open_[interaction_id] = row.seq
            if row.turn_id in ended:
                found.append(Violation("interactions", sid, f"seq {row.seq}: a question asked for turn {row.turn_id}, already ended"))  # fmt: skip
        elif row.kind in ("interaction_answered", "interaction_closed"):
            open_.pop(str(row.payload.get("interaction_id", "")), None)
    found += [Violation("interactions", sid, f"the question of seq {seq} was never answered nor closed") for seq in open_.values()]  # fmt: skip
    return found


def tool_calls(session: SessionLog, journal: list[Row]) -> list[Violation]:
    """Every tool call has exactly one result that counts (events.proto, ToolCallSettled): a
    TOOL_CALL_SETTLED, or a tool_result of an engine message that is not late. A late result after
    a settlement is kept for the record; a second result that counts is a violation."""
    sid, found = session.session_id, []
    outcome = {row.turn_id: row.kind for row in journal if row.kind in TURN_END}
    counted: dict[str, list[str]] = defaultdict(list)
    for row in journal:
        if row.kind == "tool_call_settled":
            counted[str(row.payload.get("tool_use_id", ""))].append(f"settled at seq {row.seq}")
        elif row.type_name and not row.payload.get("late"):
            for block in _tool_results(row):
                counted[str(block["tool_use_id"])].append(f"result at seq {row.seq}")
    calls: dict[str, tuple[Row, dict[str, Any]]] = {}
    for row in journal:
        for block in row.tool_uses():
            calls.setdefault(str(block["id"]), (row, block))
    for tool_use_id, (row, block) in calls.items():
        results = counted.get(tool_use_id, [])
        if len(results) != 1:
            what = "no result" if not results else f"{len(results)} results that count ({', '.join(results)})"
            found.append(
                Violation(
                    "tool calls",
                    sid,
                    f"seq {row.seq}: {block['name']} call {tool_use_id} has {what}"
                    f" (its turn: {outcome.get(row.turn_id, 'never ended')})",
                )
            )
    return found


def _tool_results(row: Row) -> Iterator[dict[str, Any]]:
    """The tool_result blocks of an engine message (the engine's answer to its own tool calls)."""
    content = row.message.get("content")
    for block in content if isinstance(content, list) else ():
        if isinstance(block, dict) and "tool_use_id" in block and "name" not in block:
            yield block


def settled(session: SessionLog, facts: Facts) -> list[Violation]:
    sid, found = session.session_id, []
    row = facts.rows.get(sid)
    projection = facts.projections.get(sid)
    state = session_pb2.SessionState.Name(projection.state).removeprefix("SESSION_STATE_") if projection else ""
    state = state or (row.state.upper() if row else "UNKNOWN")
    if state not in SETTLED:
        found.append(Violation("settled", sid, f"still {state} after the round settled", "stuck"))
    if projection is not None:
        open_parts = []
        if projection.current_turn_id:
            open_parts.append(f"turn {projection.current_turn_id}")
        if projection.queued_turn_ids:
            open_parts.append(f"{len(projection.queued_turn_ids)} queued message(s)")
        if projection.HasField("pending_interaction"):
            open_parts.append(f"question {projection.pending_interaction.interaction_id}")
        if open_parts:
            found.append(Violation("settled", sid, f"{state} with {', '.join(open_parts)} open", "stuck"))
        for task in projection.background_tasks:
            found.append(Violation("settled", sid, f"background task {task.task_id} ({task.description!r}) still open"))
    elif row is not None and row.current_turn_id and state not in ("DELETED",):
        found.append(Violation("settled", sid, f"{state} with turn {row.current_turn_id} open", "stuck"))
    return found


def leaks(facts: Facts) -> list[Violation]:
    found = []
    for sandbox in facts.sandboxes:
        sid = sandbox.session_id
        session = facts.round.sessions.get(sid)
        row = facts.rows.get(sid)
        where = f"{sandbox.sandbox_id} on {sandbox.agent_id}"
        running = f"{len(sandbox.processes)} process(es)" if sandbox.processes else "nothing running"
        if session is None or row is None:
            found.append(
                Violation("leaks", sid, f"{where}: a sandbox of no session of this round ({running})", "leaked")
            )
        elif row.deleted or row.state in ("archived", "deleted"):
            found.append(Violation("leaks", sid, f"{where}: the session is {row.state}, its sandbox is still there ({running})", "leaked"))  # fmt: skip
        elif row.agent_id != sandbox.agent_id:
            found.append(
                Violation("leaks", sid, f"{where}: the session is placed on {row.agent_id} ({running})", "leaked")
            )
        if not sandbox.exists and sandbox.processes:
            found.append(Violation("leaks", sid, f"{where}: processes outlived the sandbox's files: {sandbox.processes[:3]}", "leaked"))  # fmt: skip
        if sandbox.orphans:
            found.append(Violation("leaks", sid, f"{where}: {len(sandbox.orphans)} process(es) no agent runs: {sandbox.orphans[:3]}", "leaked"))  # fmt: skip
        if sandbox.engines > 1:
            found.append(Violation("leaks", sid, f"{where}: {sandbox.engines} engine CLIs in one sandbox", "leaked"))
    return found


def killed_agents(facts: Facts) -> list[Violation]:
    """Nothing a killed agent started on its host outlives it (both drivers: a `docker exec`
    client dies with its agent, a bubblewrap sandbox's processes with their bwrap)."""
    found = []
    for fault in facts.round.faults:
        if fault.left_on_host:
            detail = f"{fault.target} killed: {len(fault.left_on_host)} of its processes outlived it on the host"
            found.append(Violation("leaks", "", f"{detail}: {fault.left_on_host[:3]}", "leaked"))
    return found


def commands(facts: Facts) -> list[Violation]:
    found = []
    for command in facts.commands:
        if not command.acked:
            found.append(Violation("commands", command.session_id, f"{command.kind} for {command.agent_id} never acknowledged"))  # fmt: skip
    repeated = Counter((c.session_id, c.kind) for c in facts.commands if c.created_at > facts.quiet_since)
    for (sid, kind), count in repeated.items():
        if count > 1:
            found.append(Violation("commands", sid, f"{kind} issued {count} times while nothing happened"))
    return found


def leases(facts: Facts) -> list[Violation]:
    found = []
    for sid, journal in facts.journals.items():
        for row in journal:
            if row.kind != "runtime_lost" or not (agent := lapsed_agent(row)):
                continue
            at = row.at.timestamp()
            if not any(
                agent in fault.excuses_lapse_of
                and fault.start_wall - 2.0 <= at <= (fault.end_wall or at) + LAPSE_EXCUSE_S
                for fault in facts.round.faults
            ):
                found.append(Violation("leases", sid, f"seq {row.seq}: {agent}'s lease lapsed, no fault hit it"))
    return found


def clients(round: Round) -> list[Violation]:
    found = [
        Violation("clients", sid, f"{call} answered {code}: {message}")
        for call, code, message, sid in round.errors.forbidden
    ]
    found += [
        Violation("clients", sid, f"refused with room: {what}") for what, sid in round.errors.refused_with_agents_up
    ]
    return found


def stuck(facts: Facts) -> list[Turn]:
    """The turns an actor gave up waiting for whose end the journal does not show within the actors'
    deadline of their acceptance. An actor can lose sight of a turn that did end: a fault deleted
    its session under it, and a deleted session's events can no longer be read or watched."""
    found = []
    for turn in facts.stuck:
        journal = facts.journals.get(turn.session_id, [])
        accepted = next((row.at for row in journal if row.seq == turn.accepted_seq), None)
        ends = [row.at for row in journal if row.turn_id == turn.turn_id and row.kind in TURN_END]
        if accepted is None or not ends or (ends[0] - accepted).total_seconds() > TURN_DEADLINE_S:
            found.append(turn)
    return found
