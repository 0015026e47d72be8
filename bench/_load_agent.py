"""A load agent for bench/scale.py: speaks RunnerService.Connect as a data-plane agent does, without
sandboxes or engines, so thousands of sessions load the control plane rather than this machine.

What it keeps of the protocol is what the platform's promises rest on:
- Hello names the sessions it holds with the last output_seq it produced; Welcome's `committed`
  cursors say what the control plane has, and every output after them is sent again, in order;
- every output stays pending until an OutputAck's cursor covers it, and a stream that ends (a
  replica killed, a cut) is dialled again on the same channel, whose target may name several
  replicas (`ipv4:127.0.0.1:A,127.0.0.1:B`, pick_first): the agent moves to a live one;
- StartRuntime is answered with RuntimeStarted, StopRuntime (idle stop) with RuntimeStopped,
  and every command is acknowledged.

It produces `--outputs-per-second` engine messages in all over its `--active` most recently
started sessions (text `output N`, N the output_seq, so the journal can be checked for gaps and
repeats), also while disconnected (a real agent's engines go on writing into its outbox).
Every second it prints one JSON line of counters. SIGUSR1 stops production; once nothing is
pending it prints `{"final": {session_id: last output_seq}}`.

Run as a process of its own: `python bench/_load_agent.py --target T --agent-id ID`.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import secrets
import signal
import sys
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.claude_code import MANIFEST as CLAUDE_CODE
from dataplane_agent.relay.client import engine_manifest_proto
from serverkit import versions
from tests.support import admission

TICK = 0.05  # production happens in batches this often
BATCH = 200  # outputs per OutputBatch at most
MAX_PENDING = 200_000  # production pauses past this many unacknowledged outputs


class LoadAgent:
    def __init__(self, target: str, agent_id: str, rate: float, active: int) -> None:
        self._target = target
        self._agent_id = agent_id
        self._rate = rate
        self._active = active
        self._credential = secrets.token_urlsafe(24)
        self._seq: dict[str, int] = {}  # session -> last output_seq produced
        self._pending: dict[str, collections.deque[pb.Output]] = collections.defaultdict(collections.deque)
        self._started: list[str] = []  # sessions whose runtime runs, in start order
        self._out: asyncio.Queue[pb.ConnectRequest] | None = None
        self._producing = True
        self._turn_id = str(uuid.uuid4())
        self.counters = collections.Counter[str]()

    # -- the stream ----------------------------------------------------------------------------

    async def run(self) -> None:
        options = [("grpc.lb_policy_name", "pick_first"), ("grpc.max_receive_message_length", 64 << 20)]
        async with grpc.aio.insecure_channel(self._target, options=options) as channel:
            connect = channel.stream_stream(
                "/astrabox.runner.v1.RunnerService/Connect",
                request_serializer=pb.ConnectRequest.SerializeToString,
                response_deserializer=pb.ConnectResponse.FromString,
            )
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(self._produce())
                tasks.create_task(self._report())
                while True:
                    ended = await self._one_stream(connect)
                    self.counters["streams_ended"] += 1
                    print(json.dumps({"stream_ended": ended, "at": time.time()}), flush=True)
                    await asyncio.sleep(0.2)

    async def _one_stream(self, connect: grpc.aio.StreamStreamMultiCallable) -> str:
        out: asyncio.Queue[pb.ConnectRequest] = asyncio.Queue()
        out.put_nowait(pb.ConnectRequest(hello=self._hello()))

        async def requests():  # type: ignore[no-untyped-def]
            while True:
                yield await out.get()

        call = connect(requests(), wait_for_ready=True)
        try:
            first = await call.read()
            if first is grpc.aio.EOF or not first.HasField("welcome"):
                return "no Welcome"
            self._acked(first.welcome.committed)
            self._out = out
            self._resend()
            self.counters["welcomed"] += 1
            print(json.dumps({"welcomed": time.time(), "n": self.counters["welcomed"]}), flush=True)
            beat = asyncio.create_task(self._heartbeat(out, first.welcome.heartbeat_interval_ms / 1000 or 1.0))
            try:
                return await self._read(call, out)
            finally:
                beat.cancel()
        except grpc.aio.AioRpcError as error:
            return f"{error.code().name}: {(error.details() or '')[:200]}"
        finally:
            self._out = None
            call.cancel()

    def _hello(self) -> pb.Hello:
        return pb.Hello(
            agent_id=self._agent_id,
            agent_credential=self._credential,
            enrollment_token=admission.TOKEN,
            instance_id=secrets.token_hex(4),
            drivers=["local"],
            engines=[CLAUDE_CODE.kind],
            engine_manifests=[engine_manifest_proto(CLAUDE_CODE)],
            capacity=100_000,
            agent_version=versions.VERSION,
            sessions=[pb.SessionCursor(session_id=s, output_seq=n) for s, n in self._seq.items()],
        )

    async def _heartbeat(self, out: asyncio.Queue[pb.ConnectRequest], interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            beat = pb.Heartbeat()
            beat.send_time.GetCurrentTime()
            out.put_nowait(pb.ConnectRequest(heartbeat=beat))

    async def _read(self, call: grpc.aio.StreamStreamCall, out: asyncio.Queue[pb.ConnectRequest]) -> str:
        while True:
            message = await call.read()
            if message is grpc.aio.EOF:
                return "the control plane ended the stream"
            kind = message.WhichOneof("message")
            if kind == "output_ack":
                ack = message.output_ack
                if ack.HasField("error"):
                    self.counters["nacks"] += 1
                    print(json.dumps({"nack": ack.error.message[:300], "session": ack.error_session_id}), flush=True)
                self._acked(ack.committed)
                if ack.HasField("error") and ack.error_session_id:
                    self._resend([ack.error_session_id])  # nothing of its batch was stored
            elif kind == "command":
                self._command(message.command)
                out.put_nowait(
                    pb.ConnectRequest(
                        command_ack=pb.CommandAck(
                            command_seq=message.command.command_seq, command_id=message.command.command_id
                        )
                    )
                )

    def _command(self, command: pb.Command) -> None:
        session_id = command.session_id
        body = command.WhichOneof("body")
        self.counters[f"command_{body}"] += 1
        if body == "start_runtime":
            self._emit(
                session_id, runtime_started=pb.RuntimeStarted(sandbox_id=f"load-{session_id[:8]}", driver="local")
            )
            if session_id in self._started:
                self._started.remove(session_id)
            self._started.append(session_id)
        elif body == "stop_runtime":
            self._emit(
                session_id, runtime_stopped=pb.RuntimeStopped(reason="idle", sandbox_id=f"load-{session_id[:8]}")
            )
            if session_id in self._started:
                self._started.remove(session_id)
        elif body == "destroy_runtime" and session_id in self._started:
            self._started.remove(session_id)

    # -- outputs -------------------------------------------------------------------------------

    def _emit(self, session_id: str, **body: object) -> None:
        seq = self._seq.get(session_id, 0) + 1
        self._seq[session_id] = seq
        output = pb.Output(session_id=session_id, output_seq=seq, turn_id=self._turn_id, **body)
        output.produce_time.GetCurrentTime()
        self._pending[session_id].append(output)
        if self._out is not None:
            self._out.put_nowait(pb.ConnectRequest(output_batch=pb.OutputBatch(outputs=[output])))

    def _acked(self, cursors) -> None:  # type: ignore[no-untyped-def]
        for cursor in cursors:
            pending = self._pending.get(cursor.session_id)
            while pending and pending[0].output_seq <= cursor.output_seq:
                pending.popleft()
                self.counters["acked"] += 1

    def _resend(self, sessions: Iterable[str] | None = None) -> None:
        """Send again, in order, the pending outputs of `sessions` (None: every session)."""
        assert self._out is not None
        for session_id in list(self._pending) if sessions is None else sessions:
            outputs = list(self._pending.get(session_id, ()))
            for start in range(0, len(outputs), BATCH):
                batch = outputs[start : start + BATCH]
                self.counters["resent"] += len(batch)
                self._out.put_nowait(pb.ConnectRequest(output_batch=pb.OutputBatch(outputs=batch)))

    def pending(self) -> int:
        return sum(len(p) for p in self._pending.values())

    async def _produce(self) -> None:
        owed = 0.0
        turn = 0
        while True:
            await asyncio.sleep(TICK)
            active = self._started[-self._active :] if self._active else []
            if not self._producing or not active or self._rate <= 0 or self.pending() > MAX_PENDING:
                owed = 0.0
                continue
            owed += self._rate * TICK
            while owed >= 1:
                owed -= 1
                session_id = active[turn % len(active)]
                turn += 1
                seq = self._seq.get(session_id, 0) + 1
                payload = {"content": [{"type_name": "TextBlock", "text": f"output {seq}"}], "model": "load"}
                message = pb.EngineMessage(type_name="AssistantMessage", payload_json=json.dumps(payload))
                self._emit(session_id, engine_message=message)
                self.counters["produced"] += 1

    async def _report(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            print(json.dumps({"t": time.time(), "pending": self.pending(), **self.counters}), flush=True)

    async def finish(self) -> None:
        """Stop producing; once every output is acknowledged, print what was produced per session."""
        self._producing = False
        while self.pending():
            await asyncio.sleep(0.1)
        print(json.dumps({"final": self._seq}), flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="a gRPC target naming the control plane replicas")
    parser.add_argument("--agent-id", required=True)
    parser.add_argument("--outputs-per-second", type=float, default=0.0)
    parser.add_argument("--active", type=int, default=0, help="sessions that get outputs (the latest started)")
    args = parser.parse_args()
    agent = LoadAgent(args.target, args.agent_id, args.outputs_per_second, args.active)
    finishing: list[asyncio.Task[None]] = []
    asyncio.get_running_loop().add_signal_handler(
        signal.SIGUSR1, lambda: finishing.append(asyncio.create_task(agent.finish()))
    )
    await agent.run()


if __name__ == "__main__":
    asyncio.run(main())
