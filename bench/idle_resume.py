"""The turn after an idle stop, against a turn in a running runtime.

Brings up, in a temp dir, an embedded PostgreSQL, the control plane with
`--idle-stop-after 1` and one data-plane agent (separate processes, as
deployed; `--driver local` by default or `--driver docker`, offline model).
Per round, one session is created, waits for RUNTIME_READY and runs
`run: echo one`; then

  baseline  `run: echo two` right away, in the running runtime (SendMessage ->
            TURN_COMPLETED)
  resumed   after RUNTIME_STOPPED (the session idle for a second: the CLI
            closed, the sandbox stopped), `run: echo three` (SendMessage ->
            TURN_COMPLETED): the agent starts the sandbox and a CLI that
            resumes the conversation before the turn runs

For the resumed turns, send -> RUNTIME_READY and RUNTIME_READY -> COMPLETED
come from the events' journal times. Each resumed turn is checked: it
completed, mentions "three", and every ResultMessage of the session carries
the same engine session id (the conversation was resumed). Prints p50/p90/max
and the ratio of medians; timings are never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
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
from serverkit import logs

BASELINE = "baseline: 2nd turn, runtime running"
RESUMED = "resumed: 3rd turn, runtime stopped while idle"
ORDER = (
    BASELINE,
    RESUMED,
    "  of which send -> RUNTIME_READY (event times)",
    "    of which sandbox start (agent)",
    "  of which READY -> COMPLETED (event times)",
    "stop requested -> RUNTIME_STOPPED (event times)",
)
INSTALLATION = "benchidle"


async def timed_turn(client: AstraBoxClient, watch, sid: str, text: str) -> tuple[float, list[tuple[object, float]]]:
    start = time.perf_counter()
    sent = await client.send_message(sid, text, client_message_id=f"{sid}-{text.rpartition(' ')[2]}")
    events = await watch_until(watch, turn_end(sent.turn_id))
    return (events[-1][1] - start) * 1000, events


async def one_round(client: AstraBoxClient, tag: str, figures: dict, problems: list[str]) -> None:
    session = await client.create_session()
    sid = session.session_id
    watch = client.watch(sid)
    await watch_until(watch, lambda e: e.WhichOneof("payload") == "runtime_ready")
    await timed_turn(client, watch, sid, "run: echo one")
    baseline, events = await timed_turn(client, watch, sid, "run: echo two")
    if events[-1][0].WhichOneof("payload") == "turn_completed":
        figures[BASELINE].append(baseline)
    else:
        problems.append(f"{tag}: the second turn did not complete")

    events = await watch_until(watch, lambda e: e.WhichOneof("payload") == "runtime_stopped")
    requested = next((e for e, _ in events if e.WhichOneof("payload") == "runtime_stop_requested"), None)
    if requested is not None:
        figures[ORDER[-1]].append(event_ms(events[-1][0]) - event_ms(requested))
    resumed, events = await timed_turn(client, watch, sid, "run: echo three")
    await watch.aclose()
    done = events[-1][0]
    kinds = [e.WhichOneof("payload") for e, _ in events]
    if done.WhichOneof("payload") != "turn_completed" or "three" not in done.turn_completed.result:
        problems.append(f"{tag}: the resumed turn did not complete with 'three': {done}")
    else:
        figures[RESUMED].append(resumed)
    if "runtime_ready" not in kinds:
        problems.append(f"{tag}: no RUNTIME_READY before the resumed turn ended")
    else:
        ready = events[kinds.index("runtime_ready")][0]
        accepted = next(e for e, _ in events if e.WhichOneof("payload") == "user_message_accepted")
        figures["  of which send -> RUNTIME_READY (event times)"].append(event_ms(ready) - event_ms(accepted))
        figures["    of which sandbox start (agent)"].append(ready.runtime_ready.sandbox_ms)
        figures["  of which READY -> COMPLETED (event times)"].append(event_ms(done) - event_ms(ready))

    ids = [
        json.loads(e.engine_message.payload_json).get("session_id")
        async for e in client.iter_events(sid)
        if e.WhichOneof("payload") == "engine_message" and e.engine_message.type_name == "ResultMessage"
    ]
    if len(ids) != 3 or len(set(ids)) != 1:
        problems.append(f"{tag}: ENGINE SESSION CHANGED: ResultMessage session_ids {ids}")
    await client.delete_session(sid)


async def bench(args: argparse.Namespace) -> None:
    args.revision = revision()
    work = Path(tempfile.mkdtemp(prefix="astrabox-bench-idle-"))
    processes: list[Process] = []
    try:
        async with embedded_postgres(args.fast_postgres) as dsn:
            key_file, api_key = api_key_file(work)
            controlplane = Process(
                "controlplane",
                [sys.executable, "-m", "controlplane", "--listen", "127.0.0.1:0", "--idle-stop-after", "1"],
                work / "controlplane.log",
                env={
                    "ASTRABOX_DATABASE_URL": dsn,
                    "ASTRABOX_BOOTSTRAP_KEY_FILE": str(key_file),
                    **CONTROLPLANE_ADMISSION_ENV,
                },
            )
            processes.append(controlplane)
            address = (await asyncio.to_thread(controlplane.wait_for_line, r"listening on (\S+)")).group(1)
            driver = ["--driver", args.driver] + (["--installation", INSTALLATION] if args.driver == "docker" else [])
            agent = offline_agent(address, work, *driver)
            processes.append(agent)
            await asyncio.to_thread(agent.wait_for_line, r"relay_connected")

            figures: dict[str, list[float]] = defaultdict(list)
            problems: list[str] = []
            async with AstraBoxClient.connect(address, api_key=api_key) as client:
                for index in range(args.warmup + args.sessions):
                    measured = index >= args.warmup
                    tag = f"round {index + 1 - args.warmup}" if measured else f"warm-up {index + 1}"
                    target = figures if measured else defaultdict(list)
                    await one_round(client, tag, target, problems)
                    print(
                        f"{tag}: baseline {target[BASELINE][-1] if target[BASELINE] else 0:.0f} ms,"
                        f" resumed {target[RESUMED][-1] if target[RESUMED] else 0:.0f} ms",
                        file=sys.stderr,
                    )
            report(figures, problems, args)
    finally:
        for process in reversed(processes):
            process.stop()
        if args.driver == "docker":
            subprocess.run(
                f"docker ps -aq --filter label=astrabox.installation={INSTALLATION} | xargs -r docker rm -f",
                shell=True,
                capture_output=True,
            )
        if args.keep:
            print(f"logs and state kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def report(figures: dict[str, list[float]], problems: list[str], args: argparse.Namespace) -> None:
    now, postgres = datetime.datetime.now().astimezone(), "fast (fsync off)" if args.fast_postgres else "durable"
    print(
        f"idle_resume  {now:%Y-%m-%d %H:%M %Z}  {args.revision}  driver={args.driver} sessions={args.sessions}"
        f" warmup={args.warmup} postgres={postgres}"
    )
    for name in ORDER:
        print(summary_row(name, figures[name]) if figures[name] else f"  {name:<48} n=0")
    if figures[RESUMED] and figures[BASELINE]:
        resumed, baseline = percentile(figures[RESUMED], 50), percentile(figures[BASELINE], 50)
        print("ratio of medians:")
        print(f"  resumed / baseline = {resumed / baseline:5.2f}   (the restart adds {resumed - baseline:+.0f} ms)")
    print(
        f"checks: {'all rounds passed' if not problems else f'{len(problems)} problem(s)'}"
        " (resumed turn completed, RUNTIME_READY seen, same engine session id)"
    )
    for problem in problems:
        print(f"  PROBLEM {problem}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=5, help="measured rounds (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured rounds first (default %(default)s)")
    parser.add_argument(
        "--driver", choices=("local", "docker"), default="local", help="sandbox driver (default %(default)s)"
    )
    parser.add_argument("--fast-postgres", action="store_true", help="PostgreSQL with fsync off (default: durable)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir with the processes' logs")
    args = parser.parse_args()
    logs.configure("json", "warning")
    asyncio.run(bench(args))


if __name__ == "__main__":
    main()
