"""Watch catch-up: a WatchSessionEvents stream far behind, against reading the same rows with SQL;
and delta latency, from the agent to a watcher.

One process runs a real control plane (`controlplane.server.serve`) on a fresh
embedded PostgreSQL and, as its only agent, the agent's real `Outbox`,
`LiveDeltas` and `RelayClient` (`relay_throughput.Bench`). One session is
created through the client API and --events engine messages are journaled for
it by the control plane's own `OutputCommitter`. Then, per round, in rotating
order, each mode reads all of them from seq 0, in a reader process of its own
(bench/_catchup_reader.py), as a client is to its server:

  sql            pages of --page rows `SELECT * FROM events` on a connection
                 open for the whole run (payloads as text, nothing decoded):
                 the baseline
  watch runs     WatchSessionEvents with max_events_per_response=--per-response
  watch single   WatchSessionEvents without it: one event per response (before)
  client watch   `AstraBoxClient.watch`, which asks for runs and yields each event
  list           ListSessionEvents, pages of 1,000

Until these, the readers ran in the control plane's process (a watch's client and server on one
interpreter, while the SQL read's server, PostgreSQL, worked in parallel), the SQL read connected
anew each time (its set-up counted, and whichever mode came next measured 5-10% slower), and a full
collection of this process's ~130,000 startup objects (~150 ms) landed on whichever mode was
reading (mostly 'watch runs': why it measured slower than 'client watch'). Now this process freezes
its startup heap once the control plane serves, as `python -m controlplane` does (serverkit.heap),
both processes collect before each read, and each mode reads once untimed first (the first watch
read of a run, always 'watch runs', was the slowest of all).

Prints the median seconds per mode, each mode against the SQL read (ratio of
rates) and the cost per event in µs. Then the delta phase: the agent's
`LiveDeltas` get --delta-rate pieces of text per second for --delta-seconds
(each stamped with the producer's clock as it hands it over, as the engine's
stream does) while a client watches with deltas; the latency from the stamp
to the watcher's receipt, p50/p99 (the first 10% left out). Pieces merged on
the way (the agent and the control plane coalesce under back-pressure) each
count with their own stamp. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

import _catchup_reader
from _common import CONTROLPLANE_ADMISSION, ENROLLMENT_TOKEN, api_key_file, embedded_postgres, percentile, revision
from relay_throughput import Bench, StartRuntimeSink, engine_message

from astrabox.client import AstraBoxClient
from astrabox.events import Delta
from astrabox.runner.v1 import runner_service_pb2 as pb
from controlplane.server import RunningControlPlane, serve
from controlplane.settings import ControlPlaneSettings
from dataplane_agent.engines.claude_code import MANIFEST as CLAUDE_CODE
from dataplane_agent.relay.client import RelayClient, RelayConfig
from dataplane_agent.relay.deltas import LiveDeltas
from dataplane_agent.state_database import Database
from serverkit import heap, logs

MODES = ("sql", "watch runs", "watch single", "client watch", "list")


class DeltaBench(Bench):
    """`Bench`, with the agent's stream carrying live deltas to the control plane's `kernel`."""

    def __init__(self, args: argparse.Namespace, controlplane: RunningControlPlane, api_key: str, db: Database) -> None:
        super().__init__(args, controlplane.pool, controlplane.address, api_key, db, metrics_address="")
        self.kernel = controlplane.kernel
        self.deltas = LiveDeltas()

    def start_relay(self) -> RelayClient:
        config = RelayConfig(
            target=self.address,
            agent_id="bench-agent",
            enrollment_token=ENROLLMENT_TOKEN,
            credential=self.credential,
            capacity=10_000,
            instance_id="watch-catchup",
            drivers=("local",),
            engines=(CLAUDE_CODE,),
        )
        client = RelayClient(
            config, state=self.state, outbox=self.outbox, commands=StartRuntimeSink(self.outbox), deltas=self.deltas
        )
        self.relay = asyncio.create_task(client.run())
        return client


async def journal(b: Bench, session_id: str, count: int, payload_bytes: int) -> int:
    """`count` engine messages journaled for the session by the control plane's committer; its last seq."""
    assert b.committer is not None
    start = int(await b.committed([session_id]))
    for first in range(0, count, 500):
        outputs = [
            pb.Output(
                session_id=session_id,
                output_seq=start + i + 1,
                turn_id=b.turn_id,
                engine_message=engine_message(payload_bytes, i),
            )
            for i in range(first, min(first + 500, count))
        ]
        result = await b.committer.commit("bench-agent", outputs)
        assert not result.refused, result.refused
    last: int = await b.pool.fetchval("SELECT last_seq FROM sessions WHERE session_id = $1", session_id)
    return last


async def delta_latency(
    b: DeltaBench, client: AstraBoxClient, session_id: str, rate: int, seconds: float
) -> list[float]:
    """Milliseconds from each piece's hand-over to the agent's LiveDeltas to its watcher's receipt."""
    latencies: list[float] = []

    async def watch() -> None:
        last = await b.pool.fetchval("SELECT last_seq FROM sessions WHERE session_id = $1", session_id)
        async for item in client.watch(session_id, after_seq=last, deltas=True):
            if isinstance(item, Delta):
                now = time.perf_counter_ns()
                latencies.extend((now - int(stamp)) / 1e6 for stamp in item.text.split(";") if stamp)

    watcher = asyncio.create_task(watch())
    async with asyncio.timeout(30):
        while not b.kernel.delta_queues(session_id):  # the watcher follows the session's deltas
            await asyncio.sleep(0.01)
    total = int(rate * seconds)
    start = time.perf_counter()
    for i in range(total):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        b.deltas.publish(
            pb.Delta(
                session_id=session_id,
                turn_id=b.turn_id,
                message_id="msg_live",
                index=0,
                kind=pb.DELTA_KIND_TEXT,
                text=f"{time.perf_counter_ns()};",
            )
        )
    async with asyncio.timeout(30):
        while len(latencies) < total:
            await asyncio.sleep(0.01)
    watcher.cancel()
    await asyncio.gather(watcher, return_exceptions=True)
    return latencies[total // 10 :]


async def _answer(pipe: Connection) -> tuple[int, float, float]:
    """The reader's answer to the mode just sent: (events read, seconds, its CPU seconds); a read
    that failed there (for example a refused request) is raised here, with the reader's reason."""
    answer = await asyncio.to_thread(pipe.recv)
    if isinstance(answer, str):
        raise RuntimeError(f"the reader failed: {answer}")
    read, wall, cpu = answer
    return read, wall, cpu


async def catch_up(b: DeltaBench, dsn: str, session_id: str, last: int) -> dict[str, list[float]]:
    """Each mode's seconds to read the session's events, per round, in rotating order: read in a
    process of its own (_catchup_reader), this one serving as the control plane."""
    args = b.args
    names = [mode for mode in MODES if mode in args.modes]
    seconds: dict[str, list[float]] = {mode: [] for mode in names}
    pipe, child_end = multiprocessing.get_context("spawn").Pipe()
    reader = multiprocessing.get_context("spawn").Process(
        target=_catchup_reader.serve_reads,
        args=(child_end, b.address, b.api_key, dsn, session_id, last, args.per_response, args.page),
        daemon=True,
    )
    reader.start()
    try:
        for mode in names:  # untimed: the first read of each pays for cold caches, statements, windows
            pipe.send(mode)
            async with asyncio.timeout(args.timeout):
                await _answer(pipe)
        for r in range(args.rounds):
            for mode in names[r % len(names) :] + names[: r % len(names)]:
                gc.collect()  # the control plane's garbage of the read before, not collected in this one
                cpu = time.process_time()
                pipe.send(mode)
                async with asyncio.timeout(args.timeout):
                    read, wall, reader_cpu = await _answer(pipe)
                cpu = time.process_time() - cpu
                assert read == last, (mode, read, last)
                seconds[mode].append(wall)
                print(
                    f"round {r + 1} {mode:<14} {wall:.3f} s  cpu: reader {reader_cpu:.3f} s, control plane {cpu:.3f} s",
                    file=sys.stderr,
                )
    finally:
        pipe.send(None)
        await asyncio.to_thread(reader.join, 30)
    return seconds


async def run(b: DeltaBench, dsn: str) -> None:
    args = b.args
    relay = b.start_relay()
    async with asyncio.timeout(30):
        while not relay.streams_opened:
            await asyncio.sleep(0.01)
    async with AstraBoxClient.connect(b.address, api_key=b.api_key) as client:
        session_id = (await client.create_session()).session_id
        await b.drained([session_id], 1)  # RuntimeStarted: the committer is known from here
        last = await journal(b, session_id, args.events, args.payload_bytes)
        seconds = await catch_up(b, dsn, session_id, last)
        deltas = await delta_latency(b, client, session_id, args.delta_rate, args.delta_seconds)
    await b.stop_relay()

    now = datetime.datetime.now().astimezone()
    postgres = "fast (fsync off)" if args.fast_postgres else "durable"
    print(
        f"watch_catchup  {now:%Y-%m-%d %H:%M %Z}  {revision()}  events={last} payload={args.payload_bytes}B"
        f" rounds={args.rounds} per-response={args.per_response} sql-page={args.page} postgres={postgres}"
        f" load={os.getloadavg()[0]:.1f}"
    )
    base = percentile(seconds["sql"], 50)
    for mode, values in seconds.items():
        median = percentile(values, 50)
        print(
            f"  {mode:<14} median {median:7.3f} s  {last / median:9.0f} events/s  {median / last * 1e6:7.1f} µs/event"
            f"  x{base / median:5.2f} of sql"
        )
    if {"watch runs", "watch single", "list"} <= set(seconds):
        runs, single = percentile(seconds["watch runs"], 50), percentile(seconds["watch single"], 50)
        listed = percentile(seconds["list"], 50)
        print(f"  watch runs / watch single (speed-up of catch-up) = {single / runs:.2f}")
        print(f"  per event: watched (runs) {runs / last * 1e6:.1f} µs, listed {listed / last * 1e6:.1f} µs")
    print(
        f"  delta latency agent -> watcher at {args.delta_rate}/s: n={len(deltas)}"
        f" p50={percentile(deltas, 50):.2f} ms p99={percentile(deltas, 99):.2f} ms max={max(deltas):.2f} ms"
    )


async def bench(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="astrabox-bench-watch-"))
    try:
        async with embedded_postgres(args.fast_postgres) as dsn:
            key_file, api_key = api_key_file(work)
            settings = ControlPlaneSettings(
                database_url=dsn, listen="127.0.0.1:0", bootstrap_key_file=str(key_file), **CONTROLPLANE_ADMISSION
            )
            async with serve(settings) as controlplane:
                heap.freeze_startup()  # as `python -m controlplane` does once it serves
                db = await Database.open(work / "agent.db")
                try:
                    await run(DeltaBench(args, controlplane, api_key, db), dsn)
                finally:
                    await db.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20_000, help="events to catch up on (default %(default)s)")
    parser.add_argument("--payload-bytes", type=int, default=200, help="text per message (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the median is reported (default %(default)s)")
    parser.add_argument(
        "--per-response", type=int, default=500, help="max_events_per_response of 'watch runs' (default %(default)s)"
    )
    parser.add_argument("--page", type=int, default=1000, help="rows per query of the SQL read (default %(default)s)")
    parser.add_argument(
        "--modes",
        type=lambda text: [m.strip() for m in text.split(",") if m.strip()],
        default=list(MODES),
        help="modes to run, comma-separated (default: all; a tree before max_events_per_response:"
        " 'sql,watch single,list')",
    )
    parser.add_argument("--delta-rate", type=int, default=1000, help="deltas per second (default %(default)s)")
    parser.add_argument("--delta-seconds", type=float, default=5, help="seconds of deltas (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds allowed per phase (default %(default)s)")
    parser.add_argument("--fast-postgres", action="store_true", help="PostgreSQL with fsync off (default: durable)")
    args = parser.parse_args()
    logs.configure("json", "warning")
    asyncio.run(bench(args))


if __name__ == "__main__":
    main()
