"""A minimal data-plane agent speaking RunnerService.Connect, for tests and benchmarks that load the
control plane rather than sandboxes.

It declares Claude Code, answers StartRuntime with RuntimeStarted (no sandbox, no engine),
acknowledges every command, sends engine messages to its started sessions at
`--outputs-per-second` in all (each one an event that wakes the session's watchers), and
heartbeats at the Welcome's interval, measuring each heartbeat's round trip: from its send_time
until a HeartbeatAck that answers it (one that echoes its send_time or a later one's; from a
control plane that echoes none, the next ack in order).

Run it as a process of its own (`python -m tests.support.runner_stub --target ADDR`) so the load
is the control plane's, not its own. It prints `runner_stub connected` once welcomed, one JSON
line per heartbeat sent (`{"heartbeat_sent": t}`) and per heartbeat answered
(`{"heartbeat_rtt_ms": ..., "sent": t}`), and `runner_stub stream ended: ...`
(then exits 1) if the stream ends: it never redials, so a stream the control plane ended or
superseded shows.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import secrets
import sys
import time
import uuid

import grpc

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.claude_code import MANIFEST as CLAUDE_CODE
from dataplane_agent.relay.client import engine_manifest_proto
from serverkit import versions
from tests.support import admission


class RunnerStub:
    def __init__(self, target: str, agent_id: str, outputs_per_second: float) -> None:
        self._target = target
        self._agent_id = agent_id
        self._rate = outputs_per_second
        self._out: asyncio.Queue[pb.ConnectRequest] = asyncio.Queue()
        self._started: list[str] = []  # sessions whose runtime "started", in order
        self._output_seq: dict[str, int] = collections.defaultdict(int)
        self._unanswered: collections.deque[float] = collections.deque()  # send times (s), oldest first
        self._turn_id = str(uuid.uuid4())

    async def run(self) -> str:
        """Until the stream ends; returns why."""
        async with grpc.aio.insecure_channel(self._target) as channel:
            connect = channel.stream_stream(
                "/astrabox.runner.v1.RunnerService/Connect",
                request_serializer=pb.ConnectRequest.SerializeToString,
                response_deserializer=pb.ConnectResponse.FromString,
            )
            self._out.put_nowait(pb.ConnectRequest(hello=self._hello()))
            call = connect(self._requests())
            try:
                first = await call.read()
                if first is grpc.aio.EOF or not first.HasField("welcome"):
                    return "no Welcome"
                print("runner_stub connected", flush=True)
                interval = first.welcome.heartbeat_interval_ms / 1000 or 1.0
                loops = [
                    asyncio.create_task(self._heartbeat(interval)),
                    asyncio.create_task(self._produce()),
                    asyncio.create_task(self._read(call)),
                ]
                try:
                    done, _ = await asyncio.wait(loops, return_when=asyncio.FIRST_COMPLETED)
                    return str(next(iter(done)).result())
                finally:
                    for loop in loops:
                        loop.cancel()
            except grpc.aio.AioRpcError as error:
                return f"{error.code().name}: {error.details()}"

    def _hello(self) -> pb.Hello:
        return pb.Hello(
            agent_id=self._agent_id,
            agent_credential=secrets.token_urlsafe(24),
            enrollment_token=admission.TOKEN,
            instance_id=secrets.token_hex(4),
            drivers=["local"],
            engines=[CLAUDE_CODE.kind],
            engine_manifests=[engine_manifest_proto(CLAUDE_CODE)],
            capacity=10_000,
            agent_version=versions.VERSION,
        )

    async def _requests(self):  # type: ignore[no-untyped-def]
        while True:
            yield await self._out.get()

    async def _heartbeat(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            beat = pb.Heartbeat()
            beat.send_time.GetCurrentTime()
            self._unanswered.append(beat.send_time.ToNanoseconds() / 1e9)
            print(json.dumps({"heartbeat_sent": self._unanswered[-1]}), flush=True)
            self._out.put_nowait(pb.ConnectRequest(heartbeat=beat))

    def _answered(self, ack: pb.HeartbeatAck) -> None:
        now = time.time()
        echoed = ack.heartbeat_send_time.ToNanoseconds() / 1e9 if ack.HasField("heartbeat_send_time") else None
        if echoed is None:
            answered = [self._unanswered.popleft()] if self._unanswered else []
        else:
            answered = []
            while self._unanswered and self._unanswered[0] <= echoed + 1e-6:
                answered.append(self._unanswered.popleft())
        for sent in answered:
            print(json.dumps({"heartbeat_rtt_ms": round((now - sent) * 1000, 3), "sent": sent}), flush=True)

    async def _produce(self) -> None:
        if self._rate <= 0:
            await asyncio.Event().wait()  # nothing to send, ever
        turn = 0
        while True:
            await asyncio.sleep(1 / self._rate)
            if self._started:
                session_id = self._started[turn % len(self._started)]
                turn += 1
                self._send(session_id, engine_message=_engine_message(turn))

    def _send(self, session_id: str, **body: object) -> None:
        self._output_seq[session_id] += 1
        output = pb.Output(
            session_id=session_id, output_seq=self._output_seq[session_id], turn_id=self._turn_id, **body
        )
        output.produce_time.GetCurrentTime()
        self._out.put_nowait(pb.ConnectRequest(output_batch=pb.OutputBatch(outputs=[output])))

    async def _read(self, call: grpc.aio.StreamStreamCall) -> str:
        while True:
            message = await call.read()
            if message is grpc.aio.EOF:
                return "the control plane ended the stream"
            kind = message.WhichOneof("message")
            if kind == "heartbeat_ack":
                self._answered(message.heartbeat_ack)
            elif kind == "command":
                command = message.command
                if command.HasField("start_runtime") and command.session_id not in self._output_seq:
                    self._send(command.session_id, runtime_started=pb.RuntimeStarted(sandbox_id="stub", driver="local"))
                    self._started.append(command.session_id)
                ack = pb.CommandAck(command_seq=command.command_seq, command_id=command.command_id)
                self._out.put_nowait(pb.ConnectRequest(command_ack=ack))
            elif kind == "output_ack" and message.output_ack.HasField("error"):
                print(f"runner_stub output refused: {message.output_ack.error.message}", flush=True)


def _engine_message(i: int) -> pb.EngineMessage:
    payload = {"content": [{"type_name": "TextBlock", "text": f"output {i}"}], "model": "stub", "session_id": "stub"}
    return pb.EngineMessage(type_name="AssistantMessage", payload_json=json.dumps(payload))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="the control plane, host:port")
    parser.add_argument("--agent-id", default="runner-stub")
    parser.add_argument("--outputs-per-second", type=float, default=0.0, help="engine messages, over all sessions")
    args = parser.parse_args()
    ended = asyncio.run(RunnerStub(args.target, args.agent_id, args.outputs_per_second).run())
    print(f"runner_stub stream ended: {ended}", flush=True)
    sys.exit(1)


if __name__ == "__main__":
    main()
