"""relay_throughput's latency phase: agent output -> watching client at offered rates, against a
raw gRPC stream of the same outputs in the same process, and the agent's append rate (the
figures `relay_throughput`'s docstring describes); also the engine message every phase stores."""

from __future__ import annotations

import asyncio
import json
import struct
import time
import uuid
from typing import TYPE_CHECKING

import grpc
from _common import percentile

from astrabox.client import AstraBoxClient
from astrabox.runner.v1 import runner_service_pb2 as pb

if TYPE_CHECKING:
    from relay_throughput import Bench


def engine_message(payload_bytes: int, i: int) -> pb.EngineMessage:
    """An AssistantMessage shaped as the agent relays it (`sdk_messages.message_payload`)."""
    text = (f"output {i} " + "lorem ipsum " * payload_bytes)[:payload_bytes]
    payload = {
        "content": [{"type_name": "TextBlock", "text": text}],
        "model": "claude-offline",
        "parent_tool_use_id": None,
        "error": None,
        "usage": None,
        "message_id": f"msg_{i:08d}",
        "stop_reason": None,
        "session_id": "bench",
        "uuid": str(uuid.uuid4()),
    }
    return pb.EngineMessage(type_name="AssistantMessage", payload_json=json.dumps(payload))


# -- latency at an offered rate: agent output -> watching client, against a raw gRPC stream -------


class RawStreams:
    """The baseline: one server-streaming gRPC call per session carrying the same bytes (a serialized
    Output of the same size, behind its produce time), over loopback, in this same process."""

    def __init__(self) -> None:
        self.queues: dict[str, asyncio.Queue[bytes | None]] = {}
        self.server = grpc.aio.server()

        async def stream(request: bytes, context: grpc.aio.ServicerContext):
            queue = self.queues.setdefault(request.decode(), asyncio.Queue())
            while (item := await queue.get()) is not None:
                yield item

        handler = grpc.method_handlers_generic_handler(
            "bench.Raw", {"Stream": grpc.unary_stream_rpc_method_handler(stream)}
        )
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    def queue(self, session_id: str) -> asyncio.Queue[bytes | None]:
        return self.queues.setdefault(session_id, asyncio.Queue())


async def offered_rate(b: Bench, client: AstraBoxClient, raw: RawStreams, rate: int) -> dict[str, list[float]]:
    """Both paths at `rate` outputs/s over --latency-sessions sessions for --latency-seconds: each
    session's producer stores (relay) or sends (raw) its outputs one after another on a fixed
    schedule. Latency: the producer's clock just before the agent stores the output (where the
    agent first has it) to the watcher's receipt. The first 10% of each path's outputs are left
    out (warm-up)."""
    args = b.args
    sessions = [(await client.create_session()).session_id for _ in range(args.latency_sessions)]
    await b.drained(sessions, len(sessions))  # RuntimeStarted
    count = int(rate * args.latency_seconds)
    per_session = count // len(sessions)
    interval = len(sessions) / rate
    result: dict[str, list[float]] = {}
    outbox_peak = 0

    async def paced(session_index: int, produce) -> None:
        start = time.perf_counter() + session_index * interval / len(sessions)
        for k in range(per_session):
            delay = start + k * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await produce(session_index * per_session + k)

    # Relay: AstraBox's path, agent outbox -> relay -> journal -> WatchSessionEvents.
    sent: dict[str, float] = {}
    latencies: list[float] = []
    # Where the time goes, from the journaled produce_time (a tree that journals it): agent ->
    # journal commit (the event's time) and journal commit -> watcher.
    to_journal: list[float] = []
    to_watcher: list[float] = []
    done = asyncio.Event()

    async def watch(session_id: str) -> None:
        async for event in client.watch(session_id, give_up_after=None):
            received = time.time()
            if event.WhichOneof("payload") != "engine_message":
                continue
            tag = json.loads(event.engine_message.payload_json)["message_id"]
            latencies.append(received - sent.pop(tag))
            if "produce_time" in event.DESCRIPTOR.fields_by_name and event.HasField("produce_time"):
                committed = event.time.ToNanoseconds() / 1e9
                to_journal.append(committed - event.produce_time.ToNanoseconds() / 1e9)
                to_watcher.append(received - committed)
            if len(latencies) == per_session * len(sessions):
                done.set()

    async def produce_relay(i: int) -> None:
        message = engine_message(args.payload_bytes, i)
        session_id = sessions[i // per_session]
        sent[f"msg_{i:08d}"] = time.time()
        await b.outbox.append(session_id, b.turn_id, message)

    async def sample_outbox() -> None:
        nonlocal outbox_peak
        while True:
            outbox_peak = max(outbox_peak, await b.outbox_size())
            await asyncio.sleep(0.05)

    watchers = [asyncio.create_task(watch(s)) for s in sessions]
    sampler = asyncio.create_task(sample_outbox())
    started = time.perf_counter()
    async with asyncio.TaskGroup() as tasks:
        for n in range(len(sessions)):
            tasks.create_task(paced(n, produce_relay))
    produced_s = time.perf_counter() - started
    outbox_end = await b.outbox_size()  # what the relay had not yet acknowledged when the producers stopped
    async with asyncio.timeout(args.timeout):
        await done.wait()
    for task in (*watchers, sampler):
        task.cancel()
    await asyncio.gather(*watchers, sampler, return_exceptions=True)
    result["relay"] = latencies[len(latencies) // 10 :]
    result["agent -> journal"] = to_journal[len(to_journal) // 10 :]
    result["journal -> watcher"] = to_watcher[len(to_watcher) // 10 :]
    result["relay produced/s"] = [per_session * len(sessions) / produced_s]
    result["outbox peak"] = [outbox_peak]
    result["outbox end"] = [outbox_end]

    # Raw gRPC: the same serialized outputs, the same schedule, one stream per session.
    raw_latencies: list[float] = []
    raw_done = asyncio.Event()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{raw.port}") as channel:
        call = channel.unary_stream("/bench.Raw/Stream")

        async def raw_watch(session_id: str) -> None:
            async for item in call(session_id.encode()):
                received = time.time()
                raw_latencies.append(received - struct.unpack("d", item[:8])[0])
                pb.Output.FromString(item[8:])
                if len(raw_latencies) == per_session * len(sessions):
                    raw_done.set()

        async def produce_raw(i: int) -> None:
            session_id = sessions[i // per_session]
            output = pb.Output(session_id=session_id, output_seq=i + 1, turn_id=b.turn_id)
            output.engine_message.CopyFrom(engine_message(args.payload_bytes, i))
            output.produce_time.GetCurrentTime()
            raw.queue(session_id).put_nowait(struct.pack("d", time.time()) + output.SerializeToString())

        raw_watchers = [asyncio.create_task(raw_watch(s)) for s in sessions]
        await asyncio.sleep(0.2)  # the streams are open
        async with asyncio.TaskGroup() as tasks:
            for n in range(len(sessions)):
                tasks.create_task(paced(n, produce_raw))
        async with asyncio.timeout(args.timeout):
            await raw_done.wait()
        for s in sessions:
            raw.queue(s).put_nowait(None)
        await asyncio.gather(*raw_watchers, return_exceptions=True)
    result["raw gRPC"] = raw_latencies[len(raw_latencies) // 10 :]
    return result


async def sustained(b: Bench, client: AstraBoxClient) -> float:
    """Outputs/s the agent stores with --latency-sessions sessions producing as fast as they can,
    each awaiting its own append (as a session's engine output is recorded), the relay running."""
    sessions = [(await client.create_session()).session_id for _ in range(b.args.latency_sessions)]
    await b.drained(sessions, len(sessions))
    target = await b.committed(sessions) + b.args.outputs
    per_session = b.args.outputs // len(sessions)

    async def produce(session_id: str) -> None:
        for i in range(per_session):
            await b.outbox.append(session_id, b.turn_id, engine_message(b.args.payload_bytes, i))

    start = time.perf_counter()
    async with asyncio.TaskGroup() as tasks:
        for s in sessions:
            tasks.create_task(produce(s))
    rate = per_session * len(sessions) / (time.perf_counter() - start)
    await b.drained(sessions, target)
    return rate


async def latency(b: Bench) -> list[str]:
    args = b.args
    raw = RawStreams()
    await raw.server.start()
    try:
        async with AstraBoxClient.connect(b.address, api_key=b.api_key) as client:
            figures = {rate: await offered_rate(b, client, raw, rate) for rate in args.latency_rates}
            rate = await sustained(b, client)
    finally:
        await raw.server.stop(None)
    lines = [
        f"  agent output -> watcher latency, {args.latency_sessions} sessions, {args.latency_seconds:g} s per rate"
        " (p50 / p99 ms; raw gRPC stream of the same outputs in the same run)"
    ]
    for offered, f in figures.items():
        relay, base = [v * 1000 for v in f["relay"]], [v * 1000 for v in f["raw gRPC"]]
        lines.append(
            f"    {offered:>5}/s offered ({f['relay produced/s'][0]:6.0f}/s stored): relay"
            f" {percentile(relay, 50):8.2f} / {percentile(relay, 99):8.2f}   raw gRPC"
            f" {percentile(base, 50):6.2f} / {percentile(base, 99):6.2f}   outbox peak {f['outbox peak'][0]:.0f},"
            f" at the end {f['outbox end'][0]:.0f} rows"
        )
        if f["agent -> journal"]:
            split = "   ".join(
                f"{part} {percentile([v * 1000 for v in f[part]], 50):.2f} / {percentile([v * 1000 for v in f[part]], 99):.2f}"
                for part in ("agent -> journal", "journal -> watcher")
            )
            lines.append(f"{'':>38}of which: {split}")
    lines.append(f"  agent append rate, {args.latency_sessions} sessions producing at once: {rate:9.0f} outputs/s")
    return lines
