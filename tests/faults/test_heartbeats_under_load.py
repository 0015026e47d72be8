"""Heartbeats first: a connected agent that keeps heartbeating keeps its lease, however loaded the
control plane's process and machine are.

The control plane runs as its own process with a short lease (3 s, heartbeats every 1 s); the
agent is `tests.support.runner_stub`, a Runner client in a process of its own, whose sessions
get engine messages all along. Then 1,000 clients watch those sessions (each message wakes a
hundred of them) while one CPU hog per core competes for the machine.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from astrabox.client import API_KEY_METADATA, AstraBoxClient
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as api
from astrabox.sessionkernel.v1 import session_kernel_service_pb2_grpc as api_grpc
from tests.support.processes import Process, start_controlplane

pytestmark = pytest.mark.e2e

LEASE_TTL_S = 3
HEARTBEAT_INTERVAL_S = 1
WATCHERS = 1000
SESSIONS = 10
# Engine messages per second over all sessions: each wakes WATCHERS / SESSIONS watchers.
OUTPUTS_PER_SECOND = 20
# Ten leases' worth of heartbeats under load.
LOADED_FOR_S = 10 * LEASE_TTL_S
WATCHERS_PER_CHANNEL = 100


def cpu_hog() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)


async def test_no_lease_lapses_under_a_thousand_watchers_and_a_cpu_hog(database_url: str, tmp_path: Path, api_key):
    controlplane, address = start_controlplane(
        database_url,
        tmp_path,
        args=("--lease-ttl", str(LEASE_TTL_S), "--heartbeat-interval", str(HEARTBEAT_INTERVAL_S)),
    )
    agent = Process(
        "runner_stub",
        [sys.executable, "-m", "tests.support.runner_stub", "--target", address,
         "--outputs-per-second", str(OUTPUTS_PER_SECOND)],
        tmp_path / "runner_stub.log",
    )  # fmt: skip
    hogs: list[subprocess.Popen[bytes]] = []
    channels = [grpc.aio.insecure_channel(address) for _ in range(WATCHERS // WATCHERS_PER_CHANNEL)]
    watchers: list[asyncio.Task[None]] = []
    try:
        agent.wait_for_line("runner_stub connected")
        async with AstraBoxClient.connect(address, api_key=api_key) as client:
            sessions = [(await client.create_session()).session_id for _ in range(SESSIONS)]
            for session_id in sessions:
                await client.wait_for_state(session_id, ["READY"])

            delivered = [0] * WATCHERS
            metadata = ((API_KEY_METADATA, f"Bearer {api_key}"),)

            async def watch(i: int) -> None:
                stub = api_grpc.SessionKernelServiceStub(channels[i % len(channels)])
                request = api.WatchSessionEventsRequest(session_id=sessions[i % SESSIONS])
                async for _ in stub.WatchSessionEvents(request, metadata=metadata):
                    delivered[i] += 1

            watchers = [asyncio.create_task(watch(i)) for i in range(WATCHERS)]
            hogs = [cpu_hog() for _ in range(os.cpu_count() or 1)]
            await asyncio.sleep(LOADED_FOR_S)
            for hog in hogs:
                hog.kill()
            failed = [w for w in watchers if w.done()]
            for watcher in watchers:
                watcher.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)

            # The load was real: no client's watch failed, and events reached them (on a loaded
            # machine not every one of them is served within the time).
            assert not failed, failed[0].exception()
            assert sum(delivered) >= WATCHERS, sum(delivered)
            # The agent's stream was never ended or superseded...
            assert agent.proc.poll() is None, agent.tail()
            assert "stream ended" not in agent.tail()
            # ... and none of its sessions lost its runtime.
            for session_id in sessions:
                session = await client.get_session(session_id)
                lost = [e async for e in client.iter_events(session_id) if e.WhichOneof("payload") == "runtime_lost"]
                assert session.runtime_available and not lost, (session, lost)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
        for channel in channels:
            await channel.close()
        agent.stop()
        controlplane.stop()
