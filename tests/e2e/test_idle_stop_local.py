"""Idle stop with the local (bubblewrap) driver and the real CLI: a session idle for two seconds has its
CLI closed and its sandbox's processes stopped (RUNTIME_STOPPED), its files kept; the next message
starts a CLI that resumes the conversation and reads the file the first turn wrote."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from astrabox.client import AstraBoxClient
from tests.e2e.test_session_end_to_end import collect_turn
from tests.support.stack import Stack, StartStack

pytestmark = pytest.mark.e2e


@pytest.fixture
def hibernating_stack(stacks: StartStack) -> Stack:
    return stacks(controlplane_args=("--idle-stop-after", "2"))


def cli_pids(sandbox_run: Path) -> list[int]:
    """The launched processes still alive (the local driver records each launcher's pid)."""
    alive = []
    for pid in (sandbox_run / "pids").read_text().split():
        try:
            if (Path("/proc") / pid / "cwd").resolve() == sandbox_run:
                alive.append(int(pid))
        except OSError:
            continue
    return alive


async def test_an_idle_local_session_is_stopped_and_resumed_with_its_files_and_conversation(
    hibernating_stack: Stack,
) -> None:
    async with AstraBoxClient.connect(hibernating_stack.address) as client:
        session = await client.create_session(request_id="local-idle")
        sid = session.session_id
        await client.wait_for_state(sid, ["READY"], timeout=120)
        accepted = await client.send_message(sid, "Please create hello.txt", client_message_id="m1")
        events = await collect_turn(client, sid, accepted.turn_id)
        workspace = hibernating_stack.host_workspace(events)
        run = workspace.parent / "run"
        assert cli_pids(run)  # the CLI runs in the sandbox

        async with asyncio.timeout(60):
            async for event in client.watch(sid, after_seq=accepted.seq):
                if event.WhichOneof("payload") == "runtime_stopped":
                    break
        assert cli_pids(run) == [] and (workspace / "hello.txt").exists()
        assert (await client.get_session(sid)).runtime_stopped

        again = await client.send_message(sid, "run: cat hello.txt", client_message_id="m2")
        events = await collect_turn(client, sid, again.turn_id)
        assert events[-1].WhichOneof("payload") == "turn_completed"
        assert "Hello from AstraBox" in events[-1].turn_completed.result
        results = [
            json.loads(e.engine_message.payload_json)["session_id"]
            for e in events
            if e.WhichOneof("payload") == "engine_message" and e.engine_message.type_name == "ResultMessage"
        ]
        assert len(results) == 2 and len(set(results)) == 1  # the conversation was resumed, not restarted
        assert not (await client.get_session(sid)).runtime_stopped
