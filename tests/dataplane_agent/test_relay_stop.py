"""The relay stops when it is asked to, even when its stream fails at that very moment.

On Python 3.11 a task group whose child fails while its task is being cancelled raises the child's
error instead of the cancellation; a reconnect loop that logs the error and goes round again then
never ends, and the agent's shutdown (or a test's) waits for it forever."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from astrabox.backoff import Backoff
from dataplane_agent.relay.client import RelayClient, RelayConfig
from dataplane_agent.relay.commands import CommandApplier
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.state import AgentState
from dataplane_agent.state_database import Database
from tests.dataplane_agent.test_relay_client import CountingRuntimes


@contextlib.asynccontextmanager
async def _relay(state_dir: Path) -> AsyncIterator[RelayClient]:
    """A relay of a real agent state, not yet running (the test runs and stops it)."""
    db = await Database.open(state_dir / "agent.db")
    try:
        state, outbox = AgentState(db), Outbox(db)
        commands = CommandApplier(db, state, CountingRuntimes(db, outbox))
        config = RelayConfig(
            target="127.0.0.1:1",
            agent_id="agent-1",
            enrollment_token="",
            instance_id="i-1",
            backoff=Backoff(initial=0.01, maximum=0.02),
        )
        yield RelayClient(config, state=state, outbox=outbox, commands=commands)
    finally:
        await db.close()


async def _stream_failing_as_it_is_cancelled(failed: asyncio.Event) -> None:
    """A stream whose reader fails in the same moment the relay is cancelled."""

    async def reader() -> None:
        await failed.wait()
        raise ConnectionResetError("the control plane went away")

    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(reader())
        await asyncio.Event().wait()


async def test_a_relay_cancelled_as_its_stream_fails_stops(tmp_path: Path, monkeypatch) -> None:
    failed = asyncio.Event()
    streams = 0

    async def run_stream(self: RelayClient) -> None:
        nonlocal streams
        streams += 1
        await _stream_failing_as_it_is_cancelled(failed)

    monkeypatch.setattr(RelayClient, "_run_stream", run_stream)
    async with _relay(tmp_path) as client:
        relay = asyncio.create_task(client.run())
        while streams == 0:
            await asyncio.sleep(0.01)
        failed.set()
        relay.cancel()
        done, _ = await asyncio.wait([relay], timeout=10)
        assert done == {relay} and relay.cancelled()
        assert streams == 1  # not reconnected after being told to stop


async def test_a_stream_failure_without_a_cancellation_still_reconnects(tmp_path: Path, monkeypatch) -> None:
    streams = 0

    async def run_stream(self: RelayClient) -> None:
        nonlocal streams
        streams += 1
        raise ConnectionResetError("the control plane went away")

    monkeypatch.setattr(RelayClient, "_run_stream", run_stream)
    async with _relay(tmp_path) as client:
        relay = asyncio.create_task(client.run())
        async with asyncio.timeout(10):
            while streams < 3:
                await asyncio.sleep(0.01)
        relay.cancel()
        await asyncio.gather(relay, return_exceptions=True)
        assert relay.cancelled()
