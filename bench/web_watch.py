"""Events to the browser: agent output -> a web API watcher (Connect streaming, JSON, over HTTP/1.1,
as the console reads it), beside the gRPC watch of the same sessions in the same run.

The stack is relay_throughput's: the control plane as its own process (with --web-listen), this
process as the agent's side (the agent's real Outbox and RelayClient) and the clients. Per offered
rate, --sessions sessions each store their outputs on a fixed schedule for --seconds while every
session is watched twice at once, by `AstraBoxClient.watch` (gRPC) and by a Connect streaming POST
to /astrabox.sessionkernel.v1.SessionKernelService/WatchSessionEvents whose JSON envelopes are
parsed as they arrive. Latency: the producer's clock just before the agent stores an output to the
watcher's receipt of its event (the first 10% left out); p50 / p99 per path and the ratio of the
web's p50 to gRPC's. Both watchers get every event exactly once (checked: a lost or doubled event
stops the run). Timings are printed, never asserted.

    .venv/bin/python bench/web_watch.py        # --rates 100,1000 --seconds 5 --sessions 10
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import struct
import sys
import time
from collections.abc import Awaitable, Callable

import aiohttp
from _common import percentile, revision
from _relay_latency import engine_message
from relay_throughput import Bench, bench

from astrabox.client import AstraBoxClient
from serverkit import logs

WATCH = "/astrabox.sessionkernel.v1.SessionKernelService/WatchSessionEvents"


def envelope(message: dict) -> bytes:
    data = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(data)) + data


class Receipts:
    """One watching path's receipts: latency per output, and the seqs each session saw."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.seqs: dict[str, list[int]] = {}

    def receive(self, session_id: str, seq: int, payload_json: str, sent: dict[str, float]) -> None:
        received = time.time()
        self.seqs.setdefault(session_id, []).append(seq)
        tag = json.loads(payload_json).get("message_id")
        if tag in sent:
            self.latencies.append(received - sent[tag])


async def grpc_watch(client: AstraBoxClient, session_id: str, path: Receipts, sent: dict[str, float]) -> None:
    async for event in client.watch(session_id, give_up_after=None):
        if event.WhichOneof("payload") == "engine_message":
            path.receive(session_id, event.seq, event.engine_message.payload_json, sent)


async def web_watch(
    http: aiohttp.ClientSession, key: str, session_id: str, path: Receipts, sent: dict[str, float]
) -> None:
    async with http.post(
        WATCH,
        data=envelope({"sessionId": session_id}),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/connect+json"},
    ) as response:
        assert response.status == 200, response.status
        while True:
            flags, length = struct.unpack(">BI", await response.content.readexactly(5))
            message = json.loads(await response.content.readexactly(length))
            if flags & 0x02:
                raise RuntimeError(f"the web watch ended: {message}")
            event = message["event"]
            if "engineMessage" in event:
                path.receive(session_id, int(event["seq"]), event["engineMessage"]["payloadJson"], sent)


async def one_rate(b: Bench, client: AstraBoxClient, http: aiohttp.ClientSession, rate: int) -> dict[str, Receipts]:
    args = b.args
    sessions = [(await client.create_session()).session_id for _ in range(args.sessions)]
    await b.drained(sessions, len(sessions))  # RuntimeStarted
    per_session = int(rate * args.seconds) // len(sessions)
    interval = len(sessions) / rate
    sent: dict[str, float] = {}
    paths = {"gRPC watch": Receipts(), "web (Connect JSON)": Receipts()}
    watchers = [asyncio.create_task(grpc_watch(client, s, paths["gRPC watch"], sent)) for s in sessions]
    watchers += [
        asyncio.create_task(web_watch(http, b.api_key, s, paths["web (Connect JSON)"], sent)) for s in sessions
    ]
    await asyncio.sleep(1)  # every watch is open and has caught up

    async def produce(index: int) -> None:
        session_id = sessions[index]
        start = time.perf_counter() + index * interval / len(sessions)
        for k in range(per_session):
            delay = start + k * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            i = index * per_session + k
            sent[f"msg_{i:08d}"] = time.time()
            await b.outbox.append(session_id, b.turn_id, engine_message(args.payload_bytes, i))

    async with asyncio.TaskGroup() as producers:
        for n in range(len(sessions)):
            producers.create_task(produce(n))
    expected = per_session * len(sessions)
    async with asyncio.timeout(args.timeout):
        while any(len(p.latencies) < expected for p in paths.values()):
            if failed := [w for w in watchers if w.done()]:
                failed[0].result()
            await asyncio.sleep(0.05)
    for watcher in watchers:
        watcher.cancel()
    await asyncio.gather(*watchers, return_exceptions=True)
    for name, path in paths.items():
        for session_id, seqs in path.seqs.items():
            if seqs != sorted(set(seqs)):
                raise AssertionError(f"{name}: session {session_id} saw events out of order or twice")
        if len(path.latencies) != expected:
            raise AssertionError(f"{name}: {len(path.latencies)} outputs received of {expected}")
        path.latencies = path.latencies[len(path.latencies) // 10 :]
    return paths


def run(args: argparse.Namespace) -> Callable[[Bench], Awaitable[None]]:
    async def body(b: Bench) -> None:
        relay = b.start_relay()
        async with asyncio.timeout(30):
            while not relay.streams_opened:
                await asyncio.sleep(0.01)
        figures = {}
        async with (
            AstraBoxClient.connect(b.address, api_key=b.api_key) as client,
            aiohttp.ClientSession(b.web_url) as http,
        ):
            for rate in args.rates:
                figures[rate] = await one_rate(b, client, http, rate)
                print(f"rate {rate}/s done", file=sys.stderr)
        await b.stop_relay()
        now = datetime.datetime.now().astimezone()
        print(
            f"web_watch  {now:%Y-%m-%d %H:%M %Z}  {revision()}  sessions={args.sessions} seconds={args.seconds:g}"
            f" payload={args.payload_bytes}B  (agent output -> watcher, p50 / p99 ms; both paths watch the"
            " same sessions at once)"
        )
        for rate, paths in figures.items():
            cells = []
            for name, path in paths.items():
                ms = [v * 1000 for v in path.latencies]
                cells.append(f"{name} {percentile(ms, 50):7.2f} / {percentile(ms, 99):7.2f}")
            grpc_p50 = percentile(paths["gRPC watch"].latencies, 50)
            web_p50 = percentile(paths["web (Connect JSON)"].latencies, 50)
            print(f"  {rate:>5}/s offered: {'   '.join(cells)}   web p50 / gRPC p50 = {web_p50 / grpc_p50:.2f}")

    return body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--rates",
        type=lambda text: [int(r) for r in text.split(",") if r],
        default=[100, 1000],
        help="offered outputs/s, comma-separated (default 100,1000)",
    )
    parser.add_argument("--seconds", type=float, default=5, help="seconds per rate (default %(default)s)")
    parser.add_argument("--sessions", type=int, default=10, help="sessions watched (default %(default)s)")
    parser.add_argument("--payload-bytes", type=int, default=200, help="text per message (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds allowed per rate (default %(default)s)")
    parser.add_argument("--fast-postgres", action="store_true", help="PostgreSQL with fsync off (default: durable)")
    args = parser.parse_args()
    # What relay_throughput's stack reads of its arguments.
    args.metrics, args.tracing, args.outputs = "off", "on", 0
    logs.configure("json", "warning")
    asyncio.run(bench(args, run(args), web=True))


if __name__ == "__main__":
    main()
