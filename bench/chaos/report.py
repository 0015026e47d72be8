"""The figures of a chaos round and, for each check that failed, its violations with the journal
tail of an example session."""

from __future__ import annotations

import datetime
import sys
from collections import Counter, defaultdict

from _common import percentile

from chaos.checks import Violation
from chaos.journal import TURN_END, Row
from chaos.records import Round

TAIL = 20
EXAMPLES = 5


def recovery_latencies(round: Round) -> dict[str, list[float]]:
    """Per fault kind: seconds from the fault's end until every turn it hit had ended (a turn hit:
    open at some moment of the fault). Faults that hit no turn count nothing; a turn that never
    ended is in the checks, not here."""
    latencies: dict[str, list[float]] = defaultdict(list)
    turns = round.turns()
    for fault in round.faults:
        if not fault.end:
            continue
        hit = [t for t in turns if t.accepted_at <= fault.end and (t.ended_at is None or t.ended_at >= fault.start)]
        ended = [t.ended_at for t in hit if t.ended_at is not None]
        if hit and len(ended) == len(hit):
            latencies[fault.kind].append(max(0.0, max(ended) - fault.end))
    return latencies


def print_report(
    round: Round,
    journals: dict[str, list[Row]],
    violations: list[Violation],
    header: str,
    settle_seconds: float,
    leak_clear_seconds: float | None,
) -> None:
    out = sys.stdout
    print(header, file=out)
    duration = round.faults_stopped - round.started
    kinds = Counter(f.kind for f in round.faults)
    print(f"faults: {len(round.faults)} in {duration:.0f} s  " + "  ".join(f"{k}={n}" for k, n in sorted(kinds.items())), file=out)  # fmt: skip
    outcomes: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    events = late = tools = questions = 0
    for journal in journals.values():
        events += len(journal)
        tools += sum(1 for row in journal for _ in row.tool_uses())
        questions += sum(1 for row in journal if row.kind == "interaction_requested")
        ended: set[str] = set()
        for row in journal:
            if row.kind in TURN_END:
                outcomes[row.kind] += 1
                ended.add(row.turn_id)
                if row.kind != "turn_completed":
                    reasons[_reason_class(str(row.payload.get("reason", "")))] += 1
            elif row.kind == "engine_message" and row.turn_id in ended:
                late += 1
    turns = round.turns()
    print(
        f"sessions: {len(round.sessions)}  turns: {len(turns)} accepted, {outcomes['turn_completed']} completed,"
        f" {outcomes['turn_failed']} failed, {outcomes['turn_interrupted']} interrupted;"
        f" {tools} tool calls, {questions} questions",
        file=out,
    )
    if reasons:
        print("  failed/interrupted because: " + "; ".join(f"{n}x {r}" for r, n in reasons.most_common(6)), file=out)
    watchers = [w for s in round.sessions.values() for w in s.watchers]
    print(
        f"events journaled: {events}  watchers: {len(watchers)} ({sum(w.resumes for w in watchers)} resumes,"
        f" {sum(len(w.received) for w in watchers)} events received)  engine messages after their turn ended: {late}",
        file=out,
    )
    by_check = Counter(v.check for v in violations)
    symptoms = Counter(v.symptom for v in violations)
    lost, duplicated, stuck = symptoms["lost"], symptoms["duplicated"], symptoms["stuck"]
    print(
        f"lost: {lost}  duplicated: {duplicated}  stuck: {stuck}  leaked: {symptoms['leaked']}"
        f"  (settled {settle_seconds:.0f} s after the faults stopped"
        + (f"; sandboxes cleared {leak_clear_seconds:.0f} s after" if leak_clear_seconds is not None else "")
        + ")",
        file=out,
    )
    errors = round.errors.counts
    if errors:
        print("client errors: " + "  ".join(f"{call} {code}{' ' + reason if reason else ''}={n}" for (call, code, reason), n in errors.most_common(8)), file=out)  # fmt: skip
    print("recovery (fault end -> every turn it hit ended), by fault:", file=out)
    for kind, values in sorted(recovery_latencies(round).items()):
        print(f"  {kind:<20} n={len(values):<4} p50={percentile(values, 50):6.1f} s  p90={percentile(values, 90):6.1f} s  max={max(values):6.1f} s", file=out)  # fmt: skip
    if not violations:
        print("violations: none", file=out)
        return
    print(f"violations: {len(violations)}  " + "  ".join(f"{c}={n}" for c, n in by_check.most_common()), file=out)
    for check in by_check:
        found = [v for v in violations if v.check == check]
        sessions = Counter(v.session_id for v in found)
        print(f"\n[{check}] {len(found)} violation(s) in {len(sessions)} session(s)", file=out)
        for violation in found[:EXAMPLES]:
            print(f"  {violation.session_id}: {violation.detail}", file=out)
        example = found[0].session_id
        journal = journals.get(example, [])
        if journal:
            print(f"  journal tail of {example} ({len(journal)} events):", file=out)
            for row in journal[-TAIL:]:
                print("    " + row.summary(), file=out)


def _reason_class(reason: str) -> str:
    """A reason without the ids in it, so alike reasons count together."""
    words = [w for w in reason.split() if not any(ch.isdigit() for ch in w)]
    return " ".join(words)[:90]


def header(seed: int, duration: float, driver: str, sessions: int, revision: str) -> str:
    now = datetime.datetime.now().astimezone()
    return f"chaos  {now:%Y-%m-%d %H:%M %Z}  {revision}  seed={seed} duration={duration:g}s driver={driver} sessions={sessions}"  # fmt: skip
