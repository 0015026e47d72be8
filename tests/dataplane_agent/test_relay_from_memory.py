"""The relay sends what the outbox has just committed without reading SQLite while it keeps up, and
reads SQLite for what it must send again (a refusal, a reconnect) or what memory could not hold;
the control plane (real gRPC) journals every output once, in order, either way."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.relay.committed import MAX_OUTPUTS
from tests.dataplane_agent.test_relay_client import Agent, ControlPlane, agent_process, seqs, serving, start_server


def _message(n: int) -> pb.EngineMessage:
    return pb.EngineMessage(type_name="AssistantMessage", payload_json=f'{{"n": {n}}}')


def _stored(path: Path) -> list[bytes]:
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute("SELECT body FROM outbox ORDER BY id")]


async def _connected(cp: ControlPlane, agent: Agent) -> None:
    """The stream is open and its sender has asked the outbox once (what earlier processes left)."""
    await cp.wait_until(lambda: len(cp.hellos) == 1)
    async with asyncio.timeout(10):
        while not (agent.relay.connected and agent.outbox.committed.floors_loaded):
            await asyncio.sleep(0.01)


async def test_a_relay_that_keeps_up_sends_what_was_committed_without_reading_sqlite(tmp_path: Path) -> None:
    cp = ControlPlane()
    cp.hold_acks = True  # so the outbox still holds every output to compare with
    async with serving(cp) as port, agent_process(tmp_path, port) as agent:
        await _connected(cp, agent)
        reads = agent.db.reads
        for n in range(1, 61):
            await agent.outbox.append(f"s-{n % 2}", "t-1", _message(n))
            await cp.wait_until(lambda n=n: len(cp.received) == n)

        assert agent.db.reads == reads
        sent = [o.SerializeToString() for o in sorted(cp.journal["s-0"] + cp.journal["s-1"], key=_n)]
        assert sent == _stored(tmp_path / "agent.db")
        assert seqs(cp.journal["s-1"]) == list(range(1, 31)) and seqs(cp.journal["s-0"]) == list(range(1, 31))
        cp.release_acks()
        await cp.wait_until(lambda: cp.committed("s-0") == 30)
        assert len(cp.received) == 60  # each once


async def test_the_resend_after_a_refusal_comes_from_sqlite(tmp_path: Path) -> None:
    cp = ControlPlane()
    cp.refuse_once.add(("s-1", 5))
    async with serving(cp) as port, agent_process(tmp_path, port) as agent:
        await _connected(cp, agent)
        reads = agent.db.reads
        for n in range(1, 11):
            await agent.outbox.append("s-1", "t-1", _message(n))
            await cp.wait_until(lambda n=n: cp.committed("s-1") == n or cp.refusals == 1)
        await cp.wait_until(lambda: cp.committed("s-1") == 10)

        assert cp.refusals == 1
        assert agent.db.reads > reads
        assert seqs(cp.journal["s-1"]) == list(range(1, 11))
        assert [o.engine_message.payload_json for o in cp.journal["s-1"]] == [
            _message(n).payload_json for n in range(1, 11)
        ]
        assert [seq for _, seq in cp.received if seq < 5] == [1, 2, 3, 4]  # nothing committed sent again


async def test_the_resend_after_a_reconnect_comes_from_sqlite(tmp_path: Path) -> None:
    cp = ControlPlane()
    cp.hold_acks = True
    cp.stall_at = 8  # a hung control plane: the rest is sent and never journaled
    server, port = await start_server(cp)
    try:
        async with agent_process(tmp_path, port) as agent:
            await _connected(cp, agent)
            for n in range(1, 21):
                await agent.outbox.append("s-1", "t-1", _message(n))
            async with asyncio.timeout(10):  # all 20 taken from memory and sent
                while agent.relay.stream_status() is None or agent.relay.stream_status()[1] != 20:
                    await asyncio.sleep(0.01)
            assert len(agent.outbox.committed) == 0
            await server.stop(grace=None)
            cp.hold_acks, cp.stall_at = False, None
            reads = agent.db.reads
            server, _ = await start_server(cp, port)

            await cp.wait_until(lambda: len(cp.hellos) == 2 and cp.committed("s-1") == 20)

            assert agent.db.reads > reads
            welcomed, received = cp.streams[1]
            assert welcomed["s-1"] < 20
            assert received == [("s-1", n) for n in range(welcomed["s-1"] + 1, 21)]
            assert seqs(cp.journal["s-1"]) == list(range(1, 21))
            assert [o.engine_message.payload_json for o in cp.journal["s-1"]][-1] == _message(20).payload_json
    finally:
        await server.stop(grace=None)


async def test_a_backlog_beyond_memory_reaches_the_control_plane_once_in_order(tmp_path: Path) -> None:
    cp = ControlPlane()
    server, port = await start_server(cp)
    await server.stop(grace=None)  # the relay is stopped: no control plane
    async with agent_process(tmp_path, port) as agent:
        for chunk in range(100):

            def tx(c: sqlite3.Connection, chunk: int = chunk) -> None:
                for n in range(chunk * 100, chunk * 100 + 100):
                    agent.outbox.append_tx(c, f"s-{n % 4}", "t-1", _message(n))

            await agent.db.write(tx)
        assert len(agent.outbox.committed) == MAX_OUTPUTS

        server, _ = await start_server(cp, port)
        try:
            await cp.wait_until(lambda: all(cp.committed(f"s-{k}") == 2500 for k in range(4)), timeout=60)
        finally:
            await server.stop(grace=None)

        assert cp.refusals == 0
        assert sorted(cp.received) == sorted(set(cp.received))  # none sent twice
        for k in range(4):
            assert seqs(cp.journal[f"s-{k}"]) == list(range(1, 2501))
            assert cp.journal[f"s-{k}"][-1].engine_message.payload_json == _message(9996 + k).payload_json


def _n(output: pb.Output) -> int:
    n: int = json.loads(output.engine_message.payload_json)["n"]
    return n
