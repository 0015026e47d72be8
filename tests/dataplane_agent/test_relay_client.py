"""The relay client against a real grpc.aio server playing the control plane's side of Connect."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
from google.rpc import status_pb2

from astrabox.backoff import Backoff
from astrabox.runner.v1 import runner_service_pb2 as pb
from astrabox.runner.v1 import runner_service_pb2_grpc as pb_grpc
from dataplane_agent.engines.claude_code import MANIFEST as CLAUDE_CODE
from dataplane_agent.relay.client import RelayClient, RelayConfig
from dataplane_agent.relay.commands import CommandApplier
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.state import AgentState
from dataplane_agent.state_database import Database
from serverkit import versions

# -- the control plane's side, as a test double ----------------------------------------------


class ControlPlane(pb_grpc.RunnerServiceServicer):
    """Journals outputs (contiguous per session, duplicates are no-ops, a gap is refused),
    acknowledges cumulatively after "commit", delivers commands, answers heartbeats.

    Its journal outlives server restarts, like a database would."""

    def __init__(self, generation: int = 0, ack_every: int = 1) -> None:
        self.generation = generation
        self.ack_every = ack_every
        self.hold_acks = False
        self.journal: dict[str, list[pb.Output]] = defaultdict(list)
        self.hellos: list[pb.Hello] = []
        self.received: list[tuple[str, int]] = []
        self.refusals = 0
        self.refuse_once: set[tuple[str, int]] = set()
        # Stop reading (a hung control plane) once this many outputs arrived.
        self.stall_at: int | None = None
        # Per stream: the committed cursors sent in Welcome, and the outputs received.
        self.streams: list[tuple[dict[str, int], list[tuple[str, int]]]] = []
        self.command_acks: list[pb.CommandAck] = []
        # Messages to push on the current stream (commands, released acknowledgements).
        self.pushes: asyncio.Queue[pb.ConnectResponse] = asyncio.Queue()
        self.changed = asyncio.Condition()

    def committed(self, session_id: str) -> int:
        outputs = self.journal.get(session_id)
        return outputs[-1].output_seq if outputs else 0

    async def wait_until(self, predicate, timeout: float = 10) -> None:
        async with asyncio.timeout(timeout), self.changed:
            await self.changed.wait_for(predicate)

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def Connect(self, request_iterator, context):
        first = await context.read()
        assert first.WhichOneof("message") == "hello"
        self.hellos.append(first.hello)
        self.generation += 1
        lock = asyncio.Lock()

        async def write(message: pb.ConnectResponse) -> None:
            async with lock:
                await context.write(message)

        named = [c.session_id for c in first.hello.sessions]
        stream_received: list[tuple[str, int]] = []
        self.streams.append(({s: self.committed(s) for s in named}, stream_received))
        await write(
            pb.ConnectResponse(
                welcome=pb.Welcome(
                    lease=pb.Lease(generation=self.generation),
                    committed=[pb.SessionCursor(session_id=s, output_seq=self.committed(s)) for s in named],
                    heartbeat_interval_ms=200,
                )
            )
        )
        await self._notify()

        async def push() -> None:
            while True:
                await write(await self.pushes.get())

        sender = asyncio.create_task(push())
        batches = 0
        try:
            while (request := await context.read()) is not grpc.aio.EOF:
                kind = request.WhichOneof("message")
                if kind == "output_batch":
                    batches += 1
                    stream_received.extend((o.session_id, o.output_seq) for o in request.output_batch.outputs)
                    ack = self._journal(request.output_batch)
                    if ack.HasField("error") or (not self.hold_acks and batches % self.ack_every == 0):
                        await write(pb.ConnectResponse(output_ack=ack))
                elif kind == "command_ack":
                    self.command_acks.append(request.command_ack)
                elif kind == "heartbeat":
                    lease = pb.Lease(generation=self.generation)
                    await write(pb.ConnectResponse(heartbeat_ack=pb.HeartbeatAck(lease=lease)))
                    if not self.hold_acks:  # acknowledgements held back by ack_every go out now
                        await write(pb.ConnectResponse(output_ack=self._cursors()))
                await self._notify()
                if self.stall_at is not None and len(self.received) >= self.stall_at:
                    await asyncio.Event().wait()
        finally:
            sender.cancel()

    def _journal(self, batch: pb.OutputBatch) -> pb.OutputAck:
        ack = pb.OutputAck()
        for output in batch.outputs:
            self.received.append((output.session_id, output.output_seq))
            committed = self.committed(output.session_id)
            if output.output_seq <= committed:
                continue
            if output.output_seq != committed + 1 or (output.session_id, output.output_seq) in self.refuse_once:
                self.refuse_once.discard((output.session_id, output.output_seq))
                self.refusals += 1
                ack.error.CopyFrom(status_pb2.Status(code=grpc.StatusCode.FAILED_PRECONDITION.value[0], message="gap"))
                ack.error_session_id = output.session_id
                break
            self.journal[output.session_id].append(output)
        ack.committed.extend(self._cursors().committed)
        return ack

    def _cursors(self) -> pb.OutputAck:
        return pb.OutputAck(
            committed=[pb.SessionCursor(session_id=s, output_seq=self.committed(s)) for s in self.journal]
        )

    def send(self, command: pb.Command) -> None:
        self.pushes.put_nowait(pb.ConnectResponse(command=command))

    def release_acks(self) -> None:
        self.hold_acks = False
        self.pushes.put_nowait(pb.ConnectResponse(output_ack=self._cursors()))


async def start_server(cp: ControlPlane, port: int = 0) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    pb_grpc.add_RunnerServiceServicer_to_server(cp, server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server, bound


@contextlib.asynccontextmanager
async def serving(cp: ControlPlane, port: int = 0) -> AsyncIterator[int]:
    server, bound = await start_server(cp, port)
    try:
        yield bound
    finally:
        await server.stop(grace=None)


# -- the agent's side --------------------------------------------------------------------------


class CountingRuntimes:
    """Applies StartRuntime by reporting RuntimeStarted; counts every effect."""

    def __init__(self, db: Database, outbox: Outbox) -> None:
        self._db = db
        self._outbox = outbox
        self.effects: Counter[str] = Counter()

    async def start_runtime(self, session_id: str, req: pb.StartRuntime, receipt) -> None:
        self.effects[session_id] += 1

        def tx(c: sqlite3.Connection) -> None:
            self._outbox.append_tx(c, session_id, "", pb.RuntimeStarted(sandbox_id=f"sb-{session_id}"))
            receipt(c)

        await self._db.write(tx)

    async def deliver_input(self, session_id: str, req: pb.DeliverInput, receipt) -> None:
        self.effects[session_id] += 1
        await self._db.write(receipt)

    async def destroy_runtime(self, session_id: str, req: pb.DestroyRuntime, receipt) -> None:
        self.effects[session_id] += 1
        await self._db.write(receipt)


@dataclass
class Agent:
    db: Database
    outbox: Outbox
    runtimes: CountingRuntimes
    relay: RelayClient

    async def append(self, session_id: str, count: int) -> None:
        for _ in range(count):
            n = await self.outbox.last_seq(session_id) + 1
            await self.outbox.append(session_id, "t-1", pb.EngineMessage(type_name="M", payload_json=f'{{"n": {n}}}'))


@contextlib.asynccontextmanager
async def agent_process(
    state_dir: Path, port: int, window: int = 512, batch_size: int = 64, memory_outputs: int = 4096
) -> AsyncIterator[Agent]:
    db = await Database.open(state_dir / "agent.db")
    state, outbox = AgentState(db), Outbox(db, memory_outputs=memory_outputs)
    runtimes = CountingRuntimes(db, outbox)
    applier = CommandApplier(db, state, runtimes)
    config = RelayConfig(
        target=f"127.0.0.1:{port}",
        agent_id="agent-1",
        enrollment_token="tok",
        instance_id="i-1",
        drivers=("local",),
        engines=(CLAUDE_CODE,),
        capacity=4,
        window=window,
        batch_size=batch_size,
        backoff=Backoff(initial=0.05, maximum=0.2),
    )
    relay = RelayClient(config, state=state, outbox=outbox, commands=applier)
    tasks = [asyncio.create_task(applier.run()), asyncio.create_task(relay.run())]
    try:
        yield Agent(db, outbox, runtimes, relay)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await db.close()


def seqs(outputs: list[pb.Output]) -> list[int]:
    return [o.output_seq for o in outputs]


# -- tests -------------------------------------------------------------------------------------


async def test_after_welcome_exactly_the_outputs_after_the_committed_cursor_are_sent(tmp_path: Path) -> None:
    cp = ControlPlane()
    # The control plane already committed 1..4 of s-1 (the agent never heard the acks).
    cp.journal["s-1"] = [pb.Output(session_id="s-1", output_seq=n) for n in range(1, 5)]
    db = await Database.open(tmp_path / "agent.db")
    outbox = Outbox(db)
    for n in range(1, 11):
        await outbox.append("s-1", "t-1", pb.EngineMessage(type_name="M", payload_json=f'{{"n": {n}}}'))
    await db.close()

    async with serving(cp) as port, agent_process(tmp_path, port) as agent:
        await cp.wait_until(lambda: cp.committed("s-1") == 10)
        assert cp.hellos[0].sessions == [pb.SessionCursor(session_id="s-1", output_seq=10)]
        assert (cp.hellos[0].agent_id, cp.hellos[0].enrollment_token) == ("agent-1", "tok")
        assert list(cp.hellos[0].drivers) == ["local"] and cp.hellos[0].capacity == 4
        assert cp.hellos[0].agent_version == versions.VERSION
        assert cp.received == [("s-1", n) for n in range(5, 11)]
        assert cp.journal["s-1"][4].engine_message.payload_json == '{"n": 5}'
        await _wait_for(lambda: _pending(agent.outbox), [])
        assert await agent.outbox.last_seq("s-1") == 10


async def test_every_output_arrives_exactly_once_across_a_control_plane_restart(tmp_path: Path) -> None:
    # Acknowledging every third batch leaves committed-but-unacknowledged outputs when the stream drops.
    cp = ControlPlane(ack_every=3)
    cp.stall_at = 60
    server, port = await start_server(cp)
    try:
        async with agent_process(tmp_path, port, batch_size=8, window=64) as agent:
            await agent.append("s-1", 120)
            await agent.append("s-2", 80)
            await cp.wait_until(lambda: len(cp.received) >= 60)
            await server.stop(grace=None)
            cp.stall_at = None
            assert cp.committed("s-1") < 120
            await agent.append("s-1", 30)  # produced while the control plane is down
            server, _ = await start_server(cp, port)
            await cp.wait_until(lambda: cp.committed("s-1") == 150 and cp.committed("s-2") == 80)
            assert seqs(cp.journal["s-1"]) == list(range(1, 151))
            assert seqs(cp.journal["s-2"]) == list(range(1, 81))
            assert [o.engine_message.payload_json for o in cp.journal["s-1"][-2:]] == ['{"n": 149}', '{"n": 150}']
            assert cp.refusals == 0
            assert len(cp.hellos) == 2
            # After the restart exactly the uncommitted rest was sent, each output once.
            welcomed, received = cp.streams[1]
            assert welcomed["s-1"] >= 1
            assert sorted(received) == [("s-1", n) for n in range(welcomed["s-1"] + 1, 151)] + [
                ("s-2", n) for n in range(welcomed.get("s-2", 0) + 1, 81)
            ]
            await _wait_for(lambda: _pending(agent.outbox), [])
    finally:
        await server.stop(grace=None)


async def test_unacknowledged_output_is_bounded_by_the_window(tmp_path: Path) -> None:
    cp = ControlPlane()
    cp.hold_acks = True
    async with serving(cp) as port, agent_process(tmp_path, port, window=16, batch_size=4) as agent:
        await agent.append("s-1", 40)
        # While outputs are in flight the agent only sends whole batches, so the
        # window fills to within one batch of its size, and never beyond it.
        await cp.wait_until(lambda: len(cp.received) > 16 - 4)
        await asyncio.sleep(0.3)
        held = len(cp.received)
        assert 16 - 4 < held <= 16
        await asyncio.sleep(0.3)
        assert len(cp.received) == held  # waiting for acknowledgements, not sending more
        cp.release_acks()
        await cp.wait_until(lambda: cp.committed("s-1") == 40)
        assert seqs(cp.journal["s-1"]) == list(range(1, 41))
        assert len(cp.received) == 40


async def test_a_refused_batch_is_resent_from_the_committed_cursor(tmp_path: Path) -> None:
    cp = ControlPlane()
    cp.refuse_once.add(("s-1", 3))
    async with serving(cp) as port, agent_process(tmp_path, port, batch_size=2) as agent:
        await agent.append("s-1", 6)
        await cp.wait_until(lambda: cp.committed("s-1") == 6)
        assert seqs(cp.journal["s-1"]) == list(range(1, 7))
        # Batches already in flight behind the refused one are refused too (they leave a gap).
        assert cp.refusals >= 1
        assert cp.received.count(("s-1", 3)) >= 2
        await _wait_for(lambda: _pending(agent.outbox), [])


async def test_commands_are_applied_once_acknowledged_again_and_stale_copies_wait_for_the_current_lease(
    tmp_path: Path,
) -> None:
    cp = ControlPlane(generation=6)
    async with serving(cp) as port, agent_process(tmp_path, port) as agent:
        await cp.wait_until(lambda: len(cp.hellos) == 1)
        start = pb.Command(
            command_seq=1,
            command_id="c-1",
            lease_generation=7,
            session_id="s-1",
            start_runtime=pb.StartRuntime(engine="claude_code"),
        )
        cp.send(start)
        await cp.wait_until(lambda: len(cp.command_acks) == 1)
        cp.send(start)  # redelivered
        await cp.wait_until(lambda: len(cp.command_acks) == 2)
        stale = pb.Command(
            command_seq=2,
            command_id="c-2",
            lease_generation=6,
            session_id="s-2",
            start_runtime=pb.StartRuntime(engine="claude_code"),
        )
        cp.send(stale)  # a copy from a replaced stream: neither applied nor acknowledged
        await asyncio.sleep(0.3)
        assert len(cp.command_acks) == 2 and "s-2" not in cp.journal
        current = pb.Command()
        current.CopyFrom(stale)
        current.lease_generation = 7
        cp.send(current)  # the copy a new stream sends: applied
        await cp.wait_until(lambda: len(cp.command_acks) == 3 and cp.committed("s-2") == 1)

        first, again, applied = cp.command_acks
        assert (first.command_id, first.command_seq, first.HasField("error")) == ("c-1", 1, False)
        assert (again.command_id, again.HasField("error")) == ("c-1", False)
        assert (applied.command_id, applied.HasField("error")) == ("c-2", False)
        assert agent.runtimes.effects == Counter({"s-1": 1, "s-2": 1})
        assert [o.WhichOneof("body") for o in cp.journal["s-1"]] == ["runtime_started"]


# -- helpers -----------------------------------------------------------------------------------


async def _pending(outbox: Outbox) -> list[pb.Output]:
    return await outbox.pending({}, limit=1000)


async def _wait_for(read, expected, timeout: float = 5) -> None:
    async with asyncio.timeout(timeout):
        while (value := await read()) != expected:
            await asyncio.sleep(0.02)
    assert value == expected
