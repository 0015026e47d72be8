"""Releasing a session's sandbox with a real agent on the local driver: with --retain-sandboxes a
deleted session's sandbox is kept, stopped, for inspection (SANDBOX_RETAINED journaled, the session
released) and an agent restarted after a crash leaves it alone; without it, a destruction the host
refuses is journaled, shown on the session and retried until it succeeds."""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path

import asyncpg
import pytest

from astrabox.client import AstraBoxClient
from astrabox.render import render
from tests.e2e.test_idle_stop_local import cli_pids
from tests.e2e.test_session_end_to_end import collect_turn
from tests.support.stack import Stack, StartStack

pytestmark = pytest.mark.e2e

READY_TIMEOUT = 120


async def ready_with_a_file(client: AstraBoxClient, stack: Stack, request_id: str) -> tuple[str, Path]:
    """A session whose first turn wrote hello.txt; its workspace on this host."""
    session = await client.create_session(request_id=request_id)
    await client.wait_for_state(session.session_id, ["READY"], timeout=READY_TIMEOUT)
    accepted = await client.send_message(session.session_id, "Please create hello.txt")
    events = await collect_turn(client, session.session_id, accepted.turn_id)
    assert events[-1].WhichOneof("payload") == "turn_completed"
    workspace = stack.host_workspace(events)
    assert (workspace / "hello.txt").exists()
    return session.session_id, workspace


def log_line(event: str, *mentions: str) -> str:
    """A pattern for the agent's JSON log line of `event` that mentions each of `mentions`."""
    return f'(?=.*"event": "{event}")' + "".join(f"(?=.*{re.escape(m)})" for m in mentions)


async def journal_kinds(database_url: str, session_id: str) -> list[str]:
    """The session's journal as stored (a deleted session is hidden from clients)."""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT kind FROM events WHERE session_id = $1 ORDER BY seq", session_id)
        return [row["kind"] for row in rows]
    finally:
        await conn.close()


async def named_sandbox(database_url: str, session_id: str) -> str | None:
    """The sandbox the control plane still names for the session (None: released)."""
    conn = await asyncpg.connect(database_url)
    try:
        sandbox_id: str | None = await conn.fetchval(
            "SELECT sandbox_id FROM sessions WHERE session_id = $1", session_id
        )
        return sandbox_id
    finally:
        await conn.close()


@pytest.fixture
def retaining_stack(stacks: StartStack) -> Stack:
    return stacks(args=("--retain-sandboxes",))


async def test_a_retaining_agent_keeps_a_deleted_sessions_sandbox_and_a_restart_leaves_it_alone(
    retaining_stack: Stack,
) -> None:
    stack = retaining_stack
    async with AstraBoxClient.connect(stack.address) as client:
        sid, workspace = await ready_with_a_file(client, stack, "retained")
        # A live session too: the restarted agent's first reconciliation adopts it and says so.
        live = await client.create_session(request_id="live")
        await client.wait_for_state(live.session_id, ["READY"], timeout=READY_TIMEOUT)

        await client.delete_session(sid)
        async with asyncio.timeout(60):
            while "sandbox_retained" not in await journal_kinds(stack.database_url, sid):
                await asyncio.sleep(0.2)

        assert await named_sandbox(stack.database_url, sid) is None  # released: never destroyed again
        assert (workspace / "hello.txt").exists() and cli_pids(workspace.parent / "run") == []
        stack.agent.wait_for_line(log_line("sandbox_retained", sid))

        stack.agent.kill()
        restarted = stack.start_agent()
        restarted.wait_for_line(log_line("sandbox_retained_kept", sid))
        restarted.wait_for_line(log_line("reconciled"))  # the pass after the Welcome is over

        assert (workspace / "hello.txt").exists()
        kinds = await journal_kinds(stack.database_url, sid)
        assert kinds.count("sandbox_retained") == 1 and "runtime_destroy_failed" not in kinds
        # The live session still runs on the restarted agent, in its own sandbox.
        accepted = await client.send_message(live.session_id, "run: echo still here")
        events = await collect_turn(client, live.session_id, accepted.turn_id)
        assert events[-1].WhichOneof("payload") == "turn_completed"
        assert stack.host_workspace(events) != workspace


@pytest.fixture
def retrying_stack(stacks: StartStack) -> Stack:
    return stacks(controlplane_args=("--destroy-retry-first", "1", "--destroy-retry-longest", "2"))


async def test_a_destruction_the_host_refuses_is_journaled_shown_and_retried_until_it_succeeds(
    retrying_stack: Stack,
) -> None:
    stack = retrying_stack
    async with AstraBoxClient.connect(stack.address) as client:
        sid, workspace = await ready_with_a_file(client, stack, "pinned")
        pinned = workspace.parent / "home" / "pinned"
        pinned.write_text("an immutable file: not even root removes it")
        subprocess.run(["chattr", "+i", str(pinned)], check=True)
        try:
            await client.archive_session(sid)
            async with asyncio.timeout(60):
                while not (session := await client.get_session(sid)).HasField("destroy_failure"):
                    await asyncio.sleep(0.2)
            failure = session.destroy_failure
            assert failure.attempts >= 1 and not failure.abandoned and "unconfirmed" in failure.reason
            assert workspace.parent.is_dir()
            events = [e async for e in client.iter_events(sid)]
            failed = [e for e in events if e.WhichOneof("payload") == "runtime_destroy_failed"]
            assert render(failed[0])[0].split("] ", 1)[1].startswith("✗ sandbox not destroyed (attempt 1): ")
        finally:
            subprocess.run(["chattr", "-i", str(pinned)], check=True)

        async with asyncio.timeout(60):
            while (await client.get_session(sid)).HasField("destroy_failure"):
                await asyncio.sleep(0.2)
        assert not workspace.parent.exists()
        assert await named_sandbox(stack.database_url, sid) is None
