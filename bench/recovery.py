"""Recovery of a sandbox destroyed behind the platform's back: the next turn, against a plain one.

Brings up, in a temp dir, an embedded PostgreSQL, the control plane and one
data-plane agent (separate processes, as deployed; local bubblewrap driver,
offline model). Then, per round, two sessions one after the other (the order
alternates): each is created, waits for RUNTIME_READY and runs `run: echo one`
to TURN_COMPLETED. Then

  recovered  the sandbox is destroyed as an operator's `kill -9` + `rm -rf` would
             (SIGKILL every pid in <sandbox>/run/pids, then remove the sandbox
             dir, the parent of RUNTIME_READY's workspace), and SendMessage
             `run: echo two` -> TURN_COMPLETED is timed: the agent notices the
             loss, recreates the sandbox, restores the transcript and resumes
             the engine before the turn runs
  baseline   the same second turn in the other session, its sandbox intact

For the recovered turns, the RUNTIME_LOST -> RUNTIME_READY and RUNTIME_READY ->
TURN_COMPLETED parts come from the events' journal times. Each recovered turn
is checked: it completed, mentions "two", and every ResultMessage of the session
carries the same engine session_id (the conversation was resumed, not restarted).
Prints p50/p90/max and the ratio of medians; timings are never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from _common import (
    CONTROLPLANE_ADMISSION_ENV,
    Process,
    api_key_file,
    embedded_postgres,
    event_ms,
    offline_agent,
    percentile,
    revision,
    summary_row,
    turn_end,
    watch_until,
)

from astrabox.client import AstraBoxClient
from dataplane_agent.sandboxes.disk import release_mounts
from serverkit import logs

RECOVERED = "recovered: 2nd turn, sandbox destroyed"
BASELINE = "baseline: 2nd turn, sandbox intact"
ORDER = (
    "first turn (echo one), every session",
    BASELINE,
    RECOVERED,
    "  of which send -> RUNTIME_LOST seen",
    "  of which LOST -> READY (event times)",
    "    of which sandbox create (agent)",
    "  of which READY -> COMPLETED (event times)",
)


def destroy_behind_the_platforms_back(sandbox_dir: Path) -> None:
    """As tests/e2e/test_conversation_end_to_end.py does it: the sandbox's processes, mounts and files are gone."""
    for pid in (sandbox_dir / "run" / "pids").read_text().split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    release_mounts(sandbox_dir)  # the workspace's disk image (the default disk limit)
    shutil.rmtree(sandbox_dir)


async def one_session(
    client: AstraBoxClient,
    sandboxes: Path,
    tag: str,
    destroy: bool,
    figures: dict,
    problems: list[str],
    reasons: Counter,
) -> None:
    session = await client.create_session()
    sid = session.session_id
    watch = client.watch(sid)
    events = await watch_until(watch, lambda e: e.WhichOneof("payload") == "runtime_ready")
    workspace = sandboxes / events[-1][0].runtime_ready.sandbox_id / "workspace"  # clients see /workspace

    start = time.perf_counter()
    first = await client.send_message(sid, "run: echo one", client_message_id=f"{sid}-m1")
    events = await watch_until(watch, turn_end(first.turn_id))
    if events[-1][0].WhichOneof("payload") != "turn_completed":
        raise RuntimeError(f"{tag}: the first turn did not complete: {events[-1][0]}")
    figures["first turn (echo one), every session"].append((events[-1][1] - start) * 1000)

    if destroy:
        destroy_behind_the_platforms_back(workspace.parent)
    start = time.perf_counter()
    second = await client.send_message(sid, "run: echo two", client_message_id=f"{sid}-m2")
    events = await watch_until(watch, turn_end(second.turn_id))
    await watch.aclose()
    done, done_at = events[-1]
    kinds = [e.WhichOneof("payload") for e, _ in events]
    ok = done.WhichOneof("payload") == "turn_completed" and not done.turn_completed.is_error
    if not ok:
        problems.append(f"{tag}: the second turn did not complete: {done.WhichOneof('payload')} {done}")
    elif "two" not in done.turn_completed.result:
        problems.append(f"{tag}: the second turn's result lacks 'two': {done.turn_completed.result!r}")
    if destroy and "runtime_lost" not in kinds:
        problems.append(f"{tag}: no RUNTIME_LOST before the second turn ended")
    if ok:
        figures[RECOVERED if destroy else BASELINE].append((done_at - start) * 1000)
    if destroy and "runtime_lost" in kinds:
        at = kinds.index("runtime_lost")
        lost, lost_at = events[at]
        reasons[lost.runtime_lost.reason.splitlines()[0]] += 1
        figures["  of which send -> RUNTIME_LOST seen"].append((lost_at - start) * 1000)
        ready = next((e for e, _ in events[at:] if e.WhichOneof("payload") == "runtime_ready"), None)
        if ready is None:
            problems.append(f"{tag}: no RUNTIME_READY after RUNTIME_LOST")
        else:
            figures["  of which LOST -> READY (event times)"].append(event_ms(ready) - event_ms(lost))
            figures["    of which sandbox create (agent)"].append(ready.runtime_ready.sandbox_ms)
            if ok:
                figures["  of which READY -> COMPLETED (event times)"].append(event_ms(done) - event_ms(ready))

    # The conversation was resumed: one engine session id across all ResultMessages, the session's own.
    ids = [
        json.loads(e.engine_message.payload_json).get("session_id")
        async for e in client.iter_events(sid)
        if e.WhichOneof("payload") == "engine_message" and e.engine_message.type_name == "ResultMessage"
    ]
    current = (await client.get_session(sid)).engine_session_id
    if len(ids) != 2 or len(set(ids)) != 1 or current not in ids:
        problems.append(f"{tag}: ENGINE SESSION CHANGED: ResultMessage session_ids {ids}, session has {current!r}")

    # Untimed: delete the session and wait until its sandbox is gone before the next measurement.
    await client.delete_session(sid)
    async with asyncio.timeout(60):
        while (sandboxes / f"local-{sid}").exists():
            await asyncio.sleep(0.05)


async def bench(args: argparse.Namespace) -> None:
    args.revision = revision()  # now, when the processes load the code; the tree may move during the run
    work = Path(tempfile.mkdtemp(prefix="astrabox-bench-recovery-"))
    processes: list[Process] = []
    try:
        async with embedded_postgres(args.fast_postgres) as dsn:
            key_file, api_key = api_key_file(work)
            controlplane = Process(
                "controlplane",
                [sys.executable, "-m", "controlplane", "--listen", "127.0.0.1:0"],
                work / "controlplane.log",
                env={
                    "ASTRABOX_DATABASE_URL": dsn,
                    "ASTRABOX_BOOTSTRAP_KEY_FILE": str(key_file),
                    **CONTROLPLANE_ADMISSION_ENV,
                },
            )
            processes.append(controlplane)
            address = (await asyncio.to_thread(controlplane.wait_for_line, r"listening on (\S+)")).group(1)
            agent = offline_agent(address, work)
            processes.append(agent)
            await asyncio.to_thread(agent.wait_for_line, r"relay_connected")

            figures: dict[str, list[float]] = defaultdict(list)
            problems: list[str] = []
            reasons: Counter = Counter()
            async with AstraBoxClient.connect(address, api_key=api_key) as client:
                for index in range(args.warmup + args.sessions):
                    measured = index >= args.warmup
                    target = figures if measured else defaultdict(list)
                    order = (False, True) if index % 2 == 0 else (True, False)
                    for destroy in order:
                        round_ = f"round {index + 1 - args.warmup}" if measured else f"warm-up {index + 1}"
                        tag = f"{round_}, {'recovered' if destroy else 'baseline'}"
                        await one_session(
                            client,
                            work / "agent" / "sandboxes",
                            tag,
                            destroy,
                            target,
                            problems,
                            reasons if measured else Counter(),
                        )
                    label = "session" if measured else "warm-up"
                    number = index + 1 - args.warmup * measured
                    print(
                        f"{label} {number}: baseline {target[BASELINE][-1] if target[BASELINE] else 0:.0f} ms,"
                        f" recovered {target[RECOVERED][-1] if target[RECOVERED] else 0:.0f} ms",
                        file=sys.stderr,
                    )
            report(figures, problems, reasons, args)
    finally:
        for process in reversed(processes):
            process.stop()
        if args.keep:
            print(f"logs and state kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def report(figures: dict[str, list[float]], problems: list[str], reasons: Counter, args: argparse.Namespace) -> None:
    now, postgres = datetime.datetime.now().astimezone(), "fast (fsync off)" if args.fast_postgres else "durable"
    print(
        f"recovery  {now:%Y-%m-%d %H:%M %Z}  {args.revision}  sessions={args.sessions} warmup={args.warmup}"
        f" postgres={postgres}"
    )
    for name in ORDER:
        if figures[name]:
            print(summary_row(name, figures[name]))
        else:
            print(f"  {name:<48} n=0")
    for reason, count in reasons.most_common():
        print(f"  RUNTIME_LOST reason ({count}x): {reason}")
    if figures[RECOVERED] and figures[BASELINE]:
        recovered, baseline = percentile(figures[RECOVERED], 50), percentile(figures[BASELINE], 50)
        print("ratio of medians:")
        print(f"  recovered / baseline = {recovered / baseline:5.2f}   (recovery adds {recovered - baseline:+.0f} ms)")
    failed = {problem.split(",")[0] for problem in problems}
    print(
        f"checks: {args.warmup + args.sessions - len(failed)} of {args.warmup + args.sessions} rounds (warm-up"
        " included): second turn completed, RUNTIME_LOST seen, same engine session id" + ("" if failed else ": all")
    )
    for problem in problems:
        print(f"  PROBLEM {problem}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sessions",
        type=int,
        default=5,
        help="measured rounds, each a recovered and a baseline session (default %(default)s)",
    )
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured rounds first (default %(default)s)")
    parser.add_argument("--fast-postgres", action="store_true", help="PostgreSQL with fsync off (default: durable)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir with the processes' logs")
    args = parser.parse_args()
    logs.configure("json", "warning")  # this process's own logs: warnings only, to stderr
    asyncio.run(bench(args))


if __name__ == "__main__":
    main()
