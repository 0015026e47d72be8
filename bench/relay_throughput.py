"""Relay throughput: engine-message outputs per second from the agent's outbox into the journal.

The control plane runs as its own process (`python -m controlplane`, as deployed) on a fresh
embedded PostgreSQL; this process is the agent's side, the agent's real `Outbox` (SQLite) and
`RelayClient` with a stand-in for the command applier that answers StartRuntime with
RuntimeStarted, and the clients. Sessions are created through the client API, so they exist and
are placed on this agent. Then, per round, in rotating order:

  relay backlog  the relay is stopped, M outputs are stored in the outbox, the
                 relay is started: time until every output is journaled (the
                 sessions' committed_output_seq) and acknowledged (outbox empty)
  relay live     the relay runs while a producer stores M outputs, --append-batch
                 per SQLite transaction (the agent stores one per transaction)
  committer      the same outputs committed by the control plane's own
                 `OutputCommitter.commit` (in this process, on the same database),
                 in 64-output batches one after another: no gRPC, no outbox
  raw COPY       the same rows the journal gets (session, seq, kind, turn, payload,
                 output_seq, produce_time) copied into `events` with asyncpg's
                 `copy_records_to_table`, one 64-row transaction after another

Outputs go round-robin to --sessions sessions. Prints the median outputs/s of the rounds per
mode, their ratios to raw COPY, and the outputs per journal commit (the control plane's
`astrabox_journal_batch_outputs` histogram, scraped).

Then the latency phase, per --latency-rates offered rate: --latency-sessions sessions each store
their outputs one after another on a fixed schedule (the rate in all) for --latency-seconds while
a client watches each session; the latency is from the producer's clock just before the agent
stores an output to the watcher's receipt of its event, p50/p99 (the first 10% left out). The
same outputs, serialized, on the same schedule, over one raw server-streaming gRPC call per
session in this process are the baseline. Where the tree journals produce_time, the latency is
split at the journal row's time. The outbox is sampled through the phase: its peak, and its depth
when the producers stop (an outbox that grows at a rate is one the relay does not keep up with).
Last, the append rate of the same number of sessions storing as fast as they can, each awaiting
its own append. Timings are printed, never asserted.

--metrics on serves the control plane's /metrics and scrapes it every second through the run;
--metrics off turns every recording of the control plane's process into a no-op, so the two runs,
one after the other, give the metrics' overhead.

--tracing on (the default) records spans as a production process does, and
more: every output carries its turn's traceparent (a span opened here for the
bench's turn), so each relay commit is a span joining that trace, and the spans
go through a batch processor to an exporter that drops them (the exporter's
network is not the relay's cost), in both processes; --tracing off is
OTEL_SDK_DISABLED=true, the no-op API: no span recorded, none carried.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from _common import (
    CONTROLPLANE_ADMISSION_ENV,
    ENROLLMENT_TOKEN,
    Process,
    api_key_file,
    embedded_postgres,
    peak_rss_mb,
    percentile,
    revision,
)
from _relay_latency import engine_message, latency
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from astrabox.client import AstraBoxClient
from astrabox.runner.v1 import runner_service_pb2 as pb
from controlplane.agents import Agents
from controlplane.database import create_pool
from controlplane.journal import Journal
from controlplane.live import LiveTail
from controlplane.outputs import OutputCommitter
from controlplane.turns import Turns
from dataplane_agent.engines.claude_code import MANIFEST as CLAUDE_CODE
from dataplane_agent.relay import credential as agent_credential
from dataplane_agent.relay.client import RelayClient, RelayConfig
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.state import AgentState
from dataplane_agent.state_database import Database
from serverkit import logs, tracing

# The relay's OutputBatch size (a field default).
BATCH_SIZE = next(f.default for f in dataclasses.fields(RelayConfig) if f.name == "batch_size")
# Outputs per transaction of the baselines (committer, raw COPY).
BASELINE_BATCH = 64


class StartRuntimeSink:
    """Stands in for the command applier: StartRuntime -> RuntimeStarted output; every command acknowledged."""

    def __init__(self, outbox: Outbox) -> None:
        self._outbox = outbox
        self._tasks: set[asyncio.Task] = set()

    def submit(self, command: pb.Command, reply) -> None:
        async def apply() -> None:
            if command.WhichOneof("body") == "start_runtime":
                started = pb.RuntimeStarted(sandbox_id="bench", driver="local")
                await self._outbox.append(command.session_id, "", started)
            reply(pb.CommandAck(command_seq=command.command_seq, command_id=command.command_id))

        task = asyncio.create_task(apply())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class Bench:
    def __init__(
        self, args: argparse.Namespace, pool, address: str, api_key: str, db: Database, metrics_address: str
    ) -> None:
        self.args, self.pool, self.address, self.api_key, self.db = args, pool, address, api_key, db
        self.metrics_address = metrics_address
        self.state, self.outbox = AgentState(db), Outbox(db)
        self.credential = agent_credential.load_or_create(db.path.parent)
        self.relay: asyncio.Task | None = None
        # The control plane's own committer, in this process on the same database (the baseline).
        self.committer = OutputCommitter(Journal(pool, LiveTail()), Turns(Agents(pool, datetime.timedelta(minutes=5))))
        self.turn_id = str(uuid.uuid4())
        self.appended_s = 0.0  # how long the live producer took to store its outputs
        self.web_url = ""  # the control plane's web API, when `bench` started it with one

    async def commits(self) -> tuple[float, float]:
        """The control plane's journal commits of agent outputs so far: (outputs, commits), from its
        /metrics; (0, 0) with --metrics off."""
        if not self.metrics_address:
            return 0.0, 0.0
        text = await asyncio.to_thread(_get, f"http://{self.metrics_address}/metrics")
        figures = dict.fromkeys(("astrabox_journal_batch_outputs_sum", "astrabox_journal_batch_outputs_count"), 0.0)
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name in figures:
                figures[name] = float(value)
        return figures["astrabox_journal_batch_outputs_sum"], figures["astrabox_journal_batch_outputs_count"]

    def start_relay(self) -> RelayClient:
        config = RelayConfig(
            target=self.address,
            agent_id="bench-agent",
            enrollment_token=ENROLLMENT_TOKEN,
            credential=self.credential,
            capacity=10_000,
            instance_id=uuid.uuid4().hex,
            drivers=("local",),
            engines=(CLAUDE_CODE,),
        )
        client = RelayClient(config, state=self.state, outbox=self.outbox, commands=StartRuntimeSink(self.outbox))
        self.relay = asyncio.create_task(client.run())
        return client

    async def stop_relay(self) -> None:
        assert self.relay is not None
        self.relay.cancel()
        await asyncio.gather(self.relay, return_exceptions=True)
        self.relay = None

    async def committed(self, sessions: list[str]) -> int:
        return await self.pool.fetchval(
            "SELECT coalesce(sum(committed_output_seq), 0) FROM sessions WHERE session_id = ANY($1::uuid[])", sessions
        )

    async def journaled(self, sessions: list[str]) -> int:
        return await self.pool.fetchval(
            "SELECT count(*) FROM events WHERE kind = 'engine_message' AND session_id = ANY($1::uuid[])", sessions
        )

    async def outbox_size(self) -> int:
        return await self.db.read(lambda c: c.execute("SELECT count(*) FROM outbox").fetchone()[0])

    async def drained(self, sessions: list[str], target: int) -> None:
        """Until `target` outputs of `sessions` are journaled and the outbox is empty."""
        async with asyncio.timeout(self.args.timeout):
            while await self.committed(sessions) < target:
                await asyncio.sleep(0.01)
            while await self.outbox_size():
                await asyncio.sleep(0.005)

    def plan(self, sessions: list[str]) -> list[tuple[str, str, pb.EngineMessage]]:
        """(session_id, turn_id, body) of each output, round-robin over the sessions."""
        size = self.args.payload_bytes
        return [(sessions[i % len(sessions)], self.turn_id, engine_message(size, i)) for i in range(self.args.outputs)]

    async def append(self, plan: list[tuple[str, str, pb.EngineMessage]], per_tx: int) -> None:
        for start in range(0, len(plan), per_tx):
            chunk = plan[start : start + per_tx]
            await self.db.write(lambda c, chunk=chunk: [self.outbox.append_tx(c, *item) for item in chunk])

    async def backlog(self, sessions: list[str]) -> float:
        target = await self.committed(sessions) + self.args.outputs
        plan = self.plan(sessions)
        await self.stop_relay()
        await self.append(plan, per_tx=1000)
        start = time.perf_counter()
        self.start_relay()
        await self.drained(sessions, target)
        return time.perf_counter() - start

    async def live(self, sessions: list[str]) -> float:
        target = await self.committed(sessions) + self.args.outputs
        plan = self.plan(sessions)
        start = time.perf_counter()
        await self.append(plan, per_tx=self.args.append_batch)
        self.appended_s = time.perf_counter() - start
        await self.drained(sessions, target)
        return time.perf_counter() - start

    async def outputs_after_cursors(self, sessions: list[str]) -> list[pb.Output]:
        """The plan as the agent would send it: numbered after each session's committed cursor."""
        cursors = dict(
            await self.pool.fetch(
                "SELECT session_id::text, committed_output_seq FROM sessions WHERE session_id = ANY($1::uuid[])",
                sessions,
            )
        )
        outputs = []
        for session_id, _, message in self.plan(sessions):
            cursors[session_id] += 1
            outputs.append(
                pb.Output(
                    session_id=session_id, output_seq=cursors[session_id], turn_id=self.turn_id, engine_message=message
                )
            )
            outputs[-1].produce_time.GetCurrentTime()
        return outputs

    async def committer_baseline(self, sessions: list[str]) -> float:
        outputs = await self.outputs_after_cursors(sessions)
        start = time.perf_counter()
        for i in range(0, len(outputs), BASELINE_BATCH):
            result = await self.committer.commit("bench-agent", outputs[i : i + BASELINE_BATCH])
            assert not result.refused, result.refused
        return time.perf_counter() - start

    async def raw_copy(self, sessions: list[str]) -> float:
        """The journal's rows for the same outputs, COPYed in BASELINE_BATCH-row transactions; then
        the sessions' cursors moved past them (untimed), so the rounds after stay consistent."""
        outputs = await self.outputs_after_cursors(sessions)
        last = dict(
            await self.pool.fetch(
                "SELECT session_id::text, last_seq FROM sessions WHERE session_id = ANY($1::uuid[])", sessions
            )
        )
        records = []
        for output in outputs:
            last[output.session_id] += 1
            message = output.engine_message
            payload = {"type_name": message.type_name, "message": json.loads(message.payload_json)}
            produced = output.produce_time.ToDatetime(tzinfo=datetime.UTC)
            session = uuid.UUID(output.session_id)
            seq = last[output.session_id]
            records.append((session, seq, "engine_message", output.turn_id, payload, output.output_seq, produced))
        columns = ("session_id", "seq", "kind", "turn_id", "payload", "output_seq", "produce_time")
        start = time.perf_counter()
        async with self.pool.acquire() as conn:
            for i in range(0, len(records), BASELINE_BATCH):
                async with conn.transaction():
                    await conn.copy_records_to_table("events", records=records[i : i + BASELINE_BATCH], columns=columns)
        seconds = time.perf_counter() - start
        await self.pool.execute(
            "UPDATE sessions s SET last_seq = e.seq, committed_output_seq = e.output_seq FROM"
            " (SELECT session_id, max(seq) AS seq, max(output_seq) AS output_seq FROM events"
            "  WHERE session_id = ANY($1::uuid[]) GROUP BY session_id) e WHERE s.session_id = e.session_id",
            sessions,
        )
        return seconds


async def bench(
    args: argparse.Namespace, body: Callable[[Bench], Awaitable[None]] | None = None, web: bool = False
) -> None:
    """Start the control plane (with the web API when `web`) and this process's agent side, then run
    `body` (default: this script's rounds) on them."""
    work = Path(tempfile.mkdtemp(prefix="astrabox-bench-relay-"))
    controlplane: Process | None = None
    try:
        async with embedded_postgres(args.fast_postgres) as dsn:
            key_file, api_key = api_key_file(work)
            flags = ["--listen", "127.0.0.1:0"]
            if args.metrics == "on":
                flags += ["--metrics-listen", "127.0.0.1:0"]
            if web:
                flags += ["--web-listen", "127.0.0.1:0"]
            if args.tracing == "off":
                os.environ[tracing.SDK_DISABLED_ENV] = "true"  # this process and the control plane's
            else:
                tracing.configure("astrabox-bench", exporter=_Dropped())
            controlplane = Process(
                "controlplane",
                [sys.executable, str(Path(__file__).resolve()), CONTROLPLANE_CHILD, args.metrics, args.tracing, *flags],
                work / "controlplane.log",
                env={
                    "ASTRABOX_DATABASE_URL": dsn,
                    "ASTRABOX_BOOTSTRAP_KEY_FILE": str(key_file),
                    **CONTROLPLANE_ADMISSION_ENV,
                },
            )
            address = (await asyncio.to_thread(controlplane.wait_for_line, r"listening on (\S+)")).group(1)
            metrics_address = ""
            if args.metrics == "on":
                found = await asyncio.to_thread(controlplane.wait_for_line, r"metrics on http://(\S+)/metrics")
                metrics_address = found.group(1)
            scraping = asyncio.create_task(_scrape(metrics_address)) if metrics_address else None
            pool = await create_pool(dsn, min_size=1, max_size=4)
            db = await Database.open(work / "agent.db")
            try:
                b = Bench(args, pool, address, api_key, db, metrics_address)
                if web:
                    found = await asyncio.to_thread(controlplane.wait_for_line, r"web API and console on (\S+)")
                    b.web_url = found.group(1)
                with tracing.tracer().start_as_current_span("bench turn") as turn:
                    b.outbox.trace_turn(b.turn_id, tracing.traceparent(turn))
                await (body or run)(b)
            finally:
                if scraping is not None:
                    scraping.cancel()
                await db.close()
                await pool.close()
                controlplane.stop()
    finally:
        if controlplane is not None:
            controlplane.stop()
        shutil.rmtree(work, ignore_errors=True)


# The first argument that makes this script the control plane's process (metrics on|off, tracing
# on|off, then its flags).
CONTROLPLANE_CHILD = "--as-controlplane"


def _controlplane_child(metrics: str, tracing_on: str, flags: list[str]) -> None:
    """`python -m controlplane` with `flags`; with metrics off, every recording a no-op first; with
    tracing on, its spans dropped by the exporter (off: OTEL_SDK_DISABLED, inherited)."""
    from controlplane.main import main as controlplane_main

    if metrics == "off":
        _metrics_off()
    if tracing_on == "on":
        tracing.configure("astrabox-controlplane", exporter=_Dropped())
    controlplane_main(flags)


class _Dropped(SpanExporter):
    """An exporter that takes every span and keeps none."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _metrics_off() -> None:
    """Every recording a no-op: what the relay costs without metrics."""
    from prometheus_client import Counter, Gauge, Histogram

    for kind, names in ((Counter, ("inc",)), (Gauge, ("inc", "dec", "set")), (Histogram, ("observe",))):
        for name in names:
            setattr(kind, name, lambda *_args, **_kwargs: None)


def _get(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


async def _scrape(address: str) -> None:
    """A Prometheus scraping every second."""
    while True:
        await asyncio.to_thread(_get, f"http://{address}/metrics")
        await asyncio.sleep(1)


async def run(b: Bench) -> None:
    args = b.args
    relay = b.start_relay()
    async with asyncio.timeout(30):
        while not relay.streams_opened:
            await asyncio.sleep(0.01)
    modes = {
        "raw COPY": b.raw_copy,
        "committer": b.committer_baseline,
        "relay backlog": b.backlog,
        "relay live": b.live,
    }
    async with AstraBoxClient.connect(b.address, api_key=b.api_key) as client:
        sessions = {mode: [(await client.create_session()).session_id for _ in range(args.sessions)] for mode in modes}
    await b.drained([s for group in sessions.values() for s in group], len(modes) * args.sessions)  # RuntimeStarted
    rss_before = peak_rss_mb()

    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    batch_means: dict[str, list[float]] = {mode: [] for mode in modes}
    appended: list[float] = []
    names = list(modes)
    for r in range(args.rounds):
        for mode in names[r % len(names) :] + names[: r % len(names)]:
            count_before = await b.journaled(sessions[mode])
            outputs_before, commits_before = await b.commits()
            seconds = await modes[mode](sessions[mode])
            outputs_after, commits_after = await b.commits()
            commits = commits_after - commits_before
            if mode.startswith("relay") and commits:
                batch_means[mode].append((outputs_after - outputs_before) / commits)
            journaled = await b.journaled(sessions[mode]) - count_before
            assert journaled == args.outputs, (mode, journaled)
            rates[mode].append(args.outputs / seconds)
            if mode == "relay live":
                appended.append(args.outputs / b.appended_s)
            print(
                f"round {r + 1} {mode:<14} {args.outputs / seconds:9.0f} outputs/s ({seconds:.2f} s, "
                f"{commits:.0f} relay commits)",
                file=sys.stderr,
            )
    latency_lines = await latency(b) if args.latency_rates else []
    await b.stop_relay()

    now = datetime.datetime.now().astimezone()
    postgres = "fast (fsync off)" if args.fast_postgres else "durable"
    print(
        f"relay_throughput  {now:%Y-%m-%d %H:%M %Z}  {revision()}  outputs={args.outputs} sessions={args.sessions}"
        f" rounds={args.rounds} payload={args.payload_bytes}B batch={BATCH_SIZE} append-batch={args.append_batch}"
        f" postgres={postgres} metrics={args.metrics} tracing={args.tracing}"
    )
    for mode, values in rates.items():
        if not values:
            continue
        rounds = ", ".join(f"{v:.0f}" for v in values)
        per_commit = (
            f"{percentile(batch_means[mode], 50):5.1f} outputs/commit"
            if batch_means[mode]
            else f"{BASELINE_BATCH:5d} rows/transaction"
            if not mode.startswith("relay")
            else "    ? outputs/commit"
        )
        print(f"  {mode:<30} median {percentile(values, 50):9.0f} outputs/s   {per_commit}   (rounds: {rounds})")
    if args.rounds:
        print(f"  {'  live producer append rate':<30} median {percentile(appended, 50):9.0f} outputs/s")
        base = percentile(rates["raw COPY"], 50)
        for mode in ("relay backlog", "relay live", "committer"):
            print(f"  {mode} / raw COPY = {percentile(rates[mode], 50) / base:.2f}")
    for line in latency_lines:
        print(line)
    print(f"  peak RSS of this process (agent side, clients): {rss_before:.0f} MB after setup, {peak_rss_mb():.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--outputs", type=int, default=20_000, help="outputs per mode and round (default %(default)s)")
    parser.add_argument("--sessions", type=int, default=4, help="sessions per mode (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the median is reported (default %(default)s)")
    parser.add_argument("--payload-bytes", type=int, default=200, help="text per message (default %(default)s)")
    parser.add_argument(
        "--append-batch",
        type=int,
        default=1,
        help="outputs per outbox transaction in live mode (default %(default)s, as the agent does)",
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds allowed per phase (default %(default)s)")
    parser.add_argument(
        "--latency-rates",
        type=lambda text: [int(r) for r in text.split(",") if r],
        default=[100, 1000, 5000],
        help="offered outputs/s of the latency phase, comma-separated; empty: no latency phase (default 100,1000,5000)",
    )
    parser.add_argument(
        "--latency-seconds", type=float, default=5, help="seconds per offered rate (default %(default)s)"
    )
    parser.add_argument(
        "--latency-sessions", type=int, default=10, help="sessions of the latency phase (default %(default)s)"
    )
    parser.add_argument("--fast-postgres", action="store_true", help="PostgreSQL with fsync off (default: durable)")
    parser.add_argument(
        "--metrics",
        choices=("on", "off"),
        default="on",
        help="on: /metrics served and scraped each second; off: no recording (default %(default)s)",
    )
    if sys.argv[1:2] == [CONTROLPLANE_CHILD]:
        _controlplane_child(sys.argv[2], sys.argv[3], sys.argv[4:])
        return
    parser.add_argument(
        "--tracing",
        choices=("on", "off"),
        default="on",
        help="on: spans recorded, each output traced to its turn, exported to nowhere; "
        "off: OTEL_SDK_DISABLED (default %(default)s)",
    )
    args = parser.parse_args()
    logs.configure("json", "warning")
    asyncio.run(bench(args))


if __name__ == "__main__":
    main()
