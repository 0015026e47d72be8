"""The chaos suite's checks (bench/chaos/checks.py) catch each symptom issue 11 lists, shown on
journals and hosts written out by hand: a clean session passes, and each broken one is named
with the check that caught it."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from chaos import checks
from chaos.calls import Calls
from chaos.journal import CommandRow, Row, SessionRow
from chaos.records import Fault, Round, SessionLog, Turn, WatcherLog
from chaos.sandboxes import HostSandbox

from astrabox.sessionkernel.v1 import session_pb2

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SID = "11111111-1111-1111-1111-111111111111"


class Journal:
    """A session's journal written event by event, as the control plane would."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self._output = 0

    def add(self, kind: str, turn_id: str = "", output: bool = False, **payload: object) -> Row:
        if output:
            self._output += 1
        row = Row(len(self.rows) + 1, T0 + timedelta(seconds=len(self.rows)), kind, turn_id, dict(payload),
                  self._output if output else None)  # fmt: skip
        self.rows.append(row)
        return row

    def tool_call(self, turn_id: str, tool_use_id: str, command: str = "echo hi") -> None:
        block = {"id": tool_use_id, "name": "Bash", "input": {"command": command}}
        self.add("engine_message", turn_id, output=True, type_name="AssistantMessage", message={"content": [block]})

    def tool_result(self, turn_id: str, tool_use_id: str) -> None:
        block = {"tool_use_id": tool_use_id, "content": "hi", "is_error": False}
        self.add("engine_message", turn_id, output=True, type_name="UserMessage", message={"content": [block]})


def a_turn(journal: Journal, turn_id: str, text: str = "run: echo m0000beef", end: str = "turn_completed") -> Turn:
    accepted = journal.add("user_message_accepted", turn_id, text=text)
    journal.add("input_delivered", turn_id, accepted_seq=accepted.seq)
    journal.tool_call(turn_id, f"toolu_{turn_id}", command=text.removeprefix("run: "))
    journal.tool_result(turn_id, f"toolu_{turn_id}")
    journal.add("engine_message", turn_id, output=True, type_name="ResultMessage", message={"result": "ok"})
    journal.add(end, turn_id, result="ok")
    return Turn(SID, turn_id, f"cm-{turn_id}", text, "run", "", 0.0, accepted.seq, 1.0, end)


def facts(journal: Journal, turns: list[Turn], **changes: object) -> checks.Facts:
    session = SessionLog(SID, "default", 0.0, turns=turns)
    watcher = WatcherLog(SID, 0, [(r.seq, r.kind, r.turn_id) for r in journal.rows])
    session.watchers.append(watcher)
    round = Round(seed=1, sessions={SID: session})
    projection = session_pb2.Session(session_id=SID, state=session_pb2.SESSION_STATE_READY, agent_id="agent-1")
    found = checks.Facts(
        round=round,
        journals={SID: journal.rows},
        rows={SID: SessionRow(SID, "ready", "agent-1", "", True, False)},
        projections={SID: projection},
        sandboxes=[HostSandbox("agent-1", f"local-{SID}", SID, True, ["1 bwrap", "2 claude --print"], 1)],
        commands=[CommandRow("agent-1", SID, "deliver_input", T0, True, "")],
        quiet_since=T0 + timedelta(hours=1),
        stuck=[],
    )
    for name, value in changes.items():
        setattr(found, name, value)
    return found


def caught(found: checks.Facts) -> set[str]:
    return {violation.check for violation in checks.run_all(found)}


def clean() -> tuple[Journal, list[Turn]]:
    journal = Journal()
    journal.add("session_created")
    journal.add("runtime_ready")
    return journal, [a_turn(journal, "t1"), a_turn(journal, "t2", "run: echo m0000cafe")]


def test_a_clean_round_has_no_violation() -> None:
    journal, turns = clean()
    assert checks.run_all(facts(journal, turns)) == []


def test_an_accepted_message_that_never_ends_is_lost_and_unsettled() -> None:
    journal, turns = clean()
    accepted = journal.add("user_message_accepted", "t3", text="run: echo m0000f00d")
    turns.append(Turn(SID, "t3", "cm-t3", "run: echo m0000f00d", "run", "", 0.0, accepted.seq))
    found = facts(journal, turns)
    found.projections[SID].state = session_pb2.SESSION_STATE_RUNNING
    found.projections[SID].current_turn_id = "t3"
    found.stuck = [turns[-1]]
    assert caught(found) == {"inputs", "settled", "stuck"}


def test_a_turn_that_ended_in_time_is_not_stuck_though_its_actor_lost_sight_of_it() -> None:
    """A fault deleted the session just after the turn ended, before the actor's watch read the end
    (a deleted session's events can no longer be read): the journal shows the end, in time."""
    journal, turns = clean()
    assert checks.run_all(facts(journal, turns, stuck=[turns[-1]])) == []
    # An end the journal shows only after the actors' deadline is still stuck.
    late = Journal()
    late.add("session_created")
    accepted = late.add("user_message_accepted", "t9", text="sleep: 1")
    ended = late.add("turn_completed", "t9", result="ok")
    late.rows[-1] = Row(ended.seq, accepted.at + timedelta(seconds=1000), ended.kind, "t9", ended.payload, None)
    turn = Turn(SID, "t9", "cm-t9", "sleep: 1", "sleep", "", 0.0, accepted.seq)
    assert [v.check for v in checks.run_all(facts(late, [turn], stuck=[turn])) if v.check == "stuck"] == ["stuck"]


def test_a_message_answered_twice_or_run_twice() -> None:
    journal, turns = clean()
    journal.add("turn_failed", "t2", reason="the agent restarted")
    journal.tool_call("t3", "toolu_again", command="echo m0000cafe")
    journal.tool_result("t3", "toolu_again")
    details = [v.detail for v in checks.run_all(facts(journal, turns))]
    assert any("ended 2 times" in d for d in details) and any("ran 2 times" in d for d in details)


def test_a_question_asked_after_its_turn_failed_and_never_closed() -> None:
    journal, turns = clean()
    journal.add("interaction_requested", "t2", interaction={"interaction_id": "i1"})
    assert caught(facts(journal, turns)) == {"interactions"}


def test_a_tool_call_left_without_a_result_by_a_failed_turn() -> None:
    journal, turns = clean()
    accepted = journal.add("user_message_accepted", "t3", text="steps: 3")
    journal.tool_call("t3", "toolu_open")
    journal.add("turn_failed", "t3", reason="the session was archived")
    turns.append(Turn(SID, "t3", "cm-t3", "steps: 3", "steps", "", 0.0, accepted.seq, 1.0, "turn_failed"))
    assert caught(facts(journal, turns)) == {"tool calls"}


def settled_turn(journal: Journal, turns: list[Turn], late_result: bool) -> None:
    """A turn the control plane ended while its tool call ran: the call settled, and the engine's
    own result arriving afterwards (late, or, wrongly, not marked late)."""
    accepted = journal.add("user_message_accepted", "t3", text="sleep: 30")
    journal.tool_call("t3", "toolu_slow")
    journal.add("tool_call_settled", "t3", tool_use_id="toolu_slow", tool_name="Bash", reason="the agent was lost")
    journal.add("turn_failed", "t3", reason="the agent was lost")
    block = {"tool_use_id": "toolu_slow", "content": "done", "is_error": False}
    payload = {"type_name": "UserMessage", "message": {"content": [block]}}
    journal.add("engine_message", "t3", output=True, **payload, **({"late": True} if late_result else {}))
    turns.append(Turn(SID, "t3", "cm-t3", "sleep: 30", "sleep", "", 0.0, accepted.seq, 1.0, "turn_failed"))


def test_a_settled_tool_call_may_get_its_late_result_for_the_record() -> None:
    journal, turns = clean()
    settled_turn(journal, turns, late_result=True)
    assert checks.run_all(facts(journal, turns)) == []


def test_a_settled_tool_call_that_also_gets_a_result_that_counts_has_two() -> None:
    journal, turns = clean()
    settled_turn(journal, turns, late_result=False)
    found = [v for v in checks.run_all(facts(journal, turns)) if v.check == "tool calls"]
    assert len(found) == 1 and "2 results that count" in found[0].detail, found


def test_a_per_message_mode_that_fails_a_later_turn() -> None:
    journal, turns = clean()
    accepted = journal.add("user_message_accepted", "t3", text="run: echo m0000d00d")
    journal.add("turn_failed", "t3", reason="the CLI did not take the message: Cannot set permission mode to "
                "bypassPermissions because the session was not launched with --dangerously-skip-permissions")  # fmt: skip
    turns.append(Turn(SID, "t3", "cm-t3", "run: echo m0000d00d", "run", "", 0.0, accepted.seq, 1.0, "turn_failed"))
    assert caught(facts(journal, turns)) == {"permission mode"}


def test_a_background_task_left_open() -> None:
    journal, turns = clean()
    found = facts(journal, turns)
    found.projections[SID].background_tasks.add(task_id="b1", description="sleep 3")
    assert caught(found) == {"settled"}


def test_journal_and_watcher_gaps_duplicates_and_order() -> None:
    journal, turns = clean()
    found = facts(journal, turns)
    watcher = found.round.sessions[SID].watchers[0]
    watcher.received = watcher.received[:3] + watcher.received[4:]  # one event never seen
    watcher.anomalies.append("seq 3 delivered again after seq 5")
    assert caught(found) == {"watchers"}
    swapped = list(journal.rows)
    swapped[4], swapped[5] = swapped[5], swapped[4]
    assert "journal" in caught(facts(journal, turns, journals={SID: swapped}))


def test_leaked_sandboxes_and_orphan_engines() -> None:
    journal, turns = clean()
    deleted = {SID: SessionRow(SID, "deleted", "agent-1", "", False, True)}
    assert caught(facts(journal, turns, rows=deleted)) == {"leaks"}
    moved = {SID: SessionRow(SID, "ready", "agent-2", "", True, False)}
    assert caught(facts(journal, turns, rows=moved)) == {"leaks"}
    two_clis = [HostSandbox("agent-1", f"local-{SID}", SID, True, ["1 claude", "2 claude"], 2)]
    assert caught(facts(journal, turns, sandboxes=two_clis)) == {"leaks"}
    orphan = [HostSandbox("agent-1", f"local-{SID}", SID, True, ["1 bwrap", "2 socat"], 0, ["2 socat"])]
    assert caught(facts(journal, turns, sandboxes=orphan)) == {"leaks"}


def test_commands_unacknowledged_or_resent_while_nothing_happens() -> None:
    journal, turns = clean()
    later = T0 + timedelta(hours=2)
    retried = [CommandRow("agent-1", SID, "destroy_runtime", later + timedelta(seconds=30 * i), True, "") for i in range(3)]  # fmt: skip
    assert caught(facts(journal, turns, commands=retried)) == {"commands"}
    unacked = [CommandRow("agent-1", SID, "deliver_input", T0, False, "")]
    assert caught(facts(journal, turns, commands=unacked)) == {"commands"}


def test_a_lease_lapse_no_fault_explains() -> None:
    journal, turns = clean()
    journal.add("runtime_lost", reason="the data-plane agent agent-1 stopped answering (its lease lapsed)")
    found = facts(journal, turns)
    assert caught(found) == {"leases"}
    kill = Fault("agent_kill", "agent-1", 0.0, T0.timestamp(), 1.0, T0.timestamp() + 3, excuses_lapse_of=frozenset({"agent-1"}))  # fmt: skip
    found.round.faults.append(kill)
    assert caught(found) == set()


async def test_unknown_errors_and_capacity_refused_with_room_reach_the_report() -> None:
    journal, turns = clean()
    found = facts(journal, turns)

    async def nothing() -> None:
        return None

    calls = Calls(found.round, capacity_free=lambda: True, free_capacity=nothing)
    calls.record("WatchSessionEvents", SID, grpc.StatusCode.UNKNOWN, "", "connection refused")
    calls.record("CreateSession", "", grpc.StatusCode.UNAVAILABLE, "NO_AGENT_AVAILABLE", "no agent is connected")
    assert [v.detail[:40] for v in checks.run_all(found)] == [
        "WatchSessionEvents answered UNKNOWN: con",
        "refused with room: CreateSession: UNAVAI",
    ]


def test_what_a_killed_agent_left_running_on_the_host() -> None:
    journal, turns = clean()
    kill = Fault("agent_kill", "agent-1", 0.0, 0.0)
    kill.left_on_host = ["4242 /usr/bin/docker exec -i --env-file … claude"]
    found = facts(journal, turns)
    found.round.faults.append(kill)
    assert caught(found) == {"leaks"}
