"""AdminService.GetStatus over real gRPC on real PostgreSQL: every agent with its sessions and lag, paged;
sessions by state; and each kind of stuck item with its reason — what the sweep has not settled (its
interval here is an hour, so the test sees what a stalled sweep would leave)."""

from __future__ import annotations

import asyncio
import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import AsyncIterator
from datetime import timedelta

import grpc
import pytest
import pytest_asyncio

from astrabox.admin.v1 import admin_service_pb2 as pb
from astrabox.admin.v1 import admin_service_pb2_grpc as pb_grpc
from controlplane import store
from controlplane.conversation import SendMessage
from controlplane.drains import Drains
from controlplane.server import RunningControlPlane, serve
from controlplane.settings import ControlPlaneSettings
from tests.controlplane.conftest import Plane
from tests.controlplane.test_capacity import create, ready
from tests.support import auth


@pytest_asyncio.fixture
async def running(database_url: str, plane: Plane, bootstrap_key_file: str) -> AsyncIterator[RunningControlPlane]:
    settings = ControlPlaneSettings(
        database_url=database_url,
        listen="127.0.0.1:0",
        sweep_interval=timedelta(hours=1),
        startup_deadline=timedelta(seconds=180),
        bootstrap_key_file=bootstrap_key_file,
    )
    async with serve(settings) as served:
        yield served


async def status(running: RunningControlPlane, **request: object) -> pb.GetStatusResponse:
    async with auth.channel(running.address) as channel:
        answer: pb.GetStatusResponse = await pb_grpc.AdminServiceStub(channel).GetStatus(
            pb.GetStatusRequest(**request)  # type: ignore[arg-type]
        )
        return answer


async def test_status_shows_each_agent_sessions_by_state_and_every_kind_of_stuck_item(
    running: RunningControlPlane, plane: Plane
) -> None:
    await plane.connect_agent("agent-1", capacity=4)
    busy = await ready(plane, "busy")
    await plane.conversation.send_message(SendMessage(busy, "m1", "hello"))  # a DeliverInput, unacknowledged
    slow = await create(plane, "slow-start")
    await plane.pool.execute(
        "UPDATE sessions SET created_at = now() - interval '1 hour' WHERE session_id = $1", slow.session_id
    )
    await plane.pool.execute("UPDATE agent_commands SET created_at = now() - interval '5 minutes'")
    await plane.connect_agent("agent-2", capacity=9)
    stranded = await ready(plane, "stranded", agent_id="agent-2")
    async with plane.pool.acquire() as conn:
        await store.agents.expire(conn, "agent-2")
    await plane.connect_agent("agent-3", capacity=5)
    held = await ready(plane, "held", agent_id="agent-3")
    await Drains(plane.pool, plane.journal, plane.turns, plane.agents).cordon("agent-3", drain_for=timedelta(0))

    found = await status(running)
    agents = {a.agent_id: a for a in found.agents}
    assert list(agents) == ["agent-1", "agent-2", "agent-3"] and not found.next_page_token
    one = agents["agent-1"]
    assert (one.connected, one.capacity, one.live_sessions, one.placed_sessions) == (True, 4, 2, 2)
    assert one.pending_commands >= 2 and one.HasField("oldest_pending_command_time")
    assert one.HasField("last_heartbeat_time") and not one.HasField("cordon_time")
    assert not agents["agent-2"].connected and agents["agent-2"].placed_sessions == 1
    assert agents["agent-3"].HasField("cordon_time") and agents["agent-3"].HasField("drain_deadline")
    assert dict(found.sessions_by_state) == {"running": 1, "creating": 1, "ready": 2}

    stuck = {(pb.StuckKind.Name(i.kind), i.session_id or i.agent_id): i.reason for i in found.stuck}
    assert "startup deadline" in stuck[("STUCK_KIND_SESSION_STARTUP_OVERDUE", slow.session_id)]
    assert "lease lapsed" in stuck[("STUCK_KIND_SESSION_ON_LAPSED_AGENT", stranded)]
    assert "1 session(s) placed" in stuck[("STUCK_KIND_AGENT_LEASE_LAPSED", "agent-2")]
    assert "command(s) unacknowledged" in stuck[("STUCK_KIND_RELAY_LAGGING", "agent-1")]
    assert "drain deadline passed with 1 session(s)" in stuck[("STUCK_KIND_DRAIN_OVERDUE", "agent-3")]
    assert len(stuck) == 5 and not found.stuck_truncated
    assert held not in {i.session_id for i in found.stuck}  # an idle session on it is the drain's to move
    times = [i.since.ToDatetime() for i in found.stuck]
    assert times == sorted(times)


async def test_agents_are_paged_by_id_and_a_bad_token_is_refused(running: RunningControlPlane, plane: Plane) -> None:
    for i in range(5):
        await plane.connect_agent(f"agent-{i}", capacity=1)
    seen, token = [], ""
    while True:
        page = await status(running, page_size=2, page_token=token)
        assert len(page.agents) <= 2
        seen += [a.agent_id for a in page.agents]
        if not (token := page.next_page_token):
            break
    assert seen == [f"agent-{i}" for i in range(5)]
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await status(running, page_token="not-one-of-ours")
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT


async def test_a_developer_key_neither_sees_the_status_nor_drains(
    running: RunningControlPlane, plane: Plane, api_key: str
) -> None:
    await plane.connect_agent("agent-1")
    async with auth.channel(running.address) as channel:
        admin = pb_grpc.AdminServiceStub(channel)
        made = await admin.CreateApiKey(pb.CreateApiKeyRequest(name="dev", role=pb.ROLE_DEVELOPER))
    async with auth.channel(running.address, key=made.secret) as channel:
        developer = pb_grpc.AdminServiceStub(channel)
        for call in (
            developer.GetStatus(pb.GetStatusRequest()),
            developer.DrainAgent(pb.DrainAgentRequest(agent_id="agent-1")),
            developer.CordonAgent(pb.CordonAgentRequest(agent_id="agent-1")),
            developer.UncordonAgent(pb.UncordonAgentRequest(agent_id="agent-1")),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call
            assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert (await store.agents.draining(plane.pool)) == []
    assert (await create(plane, "still-placed")).agent_id == "agent-1"


def top_on_a_terminal(address: str) -> tuple[int | None, bytes]:
    """Run `astrabox top` on a pseudo-terminal until it shows agent-1, type q; its exit status and output."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 140, 0, 0))
    top = subprocess.Popen(
        [sys.executable, "-m", "astrabox", "top", "--target", address, "--interval", "0.2"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    shown, typed, deadline = b"", False, time.monotonic() + 60
    try:
        while top.poll() is None and time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                try:
                    shown += os.read(master, 65536)
                except OSError:  # the terminal's other end closed: top has exited
                    break
            if not typed and shown.count(b"agent-1") >= 2:  # shown, and refreshed at least once
                os.write(master, b"q")
                typed = True
        return top.wait(timeout=30), shown
    finally:
        if top.poll() is None:
            top.kill()
        os.close(master)


async def test_top_refreshes_on_a_terminal_in_color_and_q_quits(running: RunningControlPlane, plane: Plane) -> None:
    await plane.connect_agent("agent-1", capacity=3)
    code, shown = await asyncio.to_thread(top_on_a_terminal, running.address)
    assert code == 0, shown[-2000:]
    assert b"agent-1" in shown and b"connected" in shown and b"\x1b[" in shown  # color, on a terminal
