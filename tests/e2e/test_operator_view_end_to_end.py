"""The operator's view and drains against a running stack (control plane, two real agents, the real CLI
on the offline model): `astrabox status` shows the agents, their sessions and lag; `astrabox hosts
drain` sends new sessions to the other agent and moves an idle session there on its next message,
which continues its conversation; a developer's key may neither see the status nor drain."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from astrabox.client import AstraBoxClient
from tests.e2e.test_session_end_to_end import collect_turn
from tests.support.processes import start_agent
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e


def astrabox(stack: Stack, *args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, **({"ASTRABOX_API_KEY": key} if key else {}))
    return subprocess.run(
        [sys.executable, "-m", "astrabox", args[0], "--target", stack.address, *args[1:]],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def agent_line(output: str, agent_id: str) -> str:
    [line] = [line for line in output.splitlines() if line.split()[:1] == [agent_id]]
    return line


async def test_status_shows_agents_sessions_and_lag_and_a_drain_moves_sessions_to_the_other_agent(
    stack: Stack, tmp_path: Path
) -> None:
    async with AstraBoxClient.connect(stack.address) as client:
        first = await client.create_session(request_id="before-drain")
        sid = first.session_id
        await client.wait_for_state(sid, ["READY"], timeout=120)
        accepted = await client.send_message(sid, "Please create hello.txt", client_message_id="m1")
        await collect_turn(client, sid, accepted.turn_id)
        assert (await client.get_session(sid)).agent_id == "e2e-agent"
        stack.agents.append(start_agent(stack.address, tmp_path / "agent-2-state", stack.log_dir, "e2e-agent-2"))

        status = astrabox(stack, "status")
        assert status.returncode == 0, status.stderr
        line = agent_line(status.stdout, "e2e-agent")
        # connected, one live session of its capacity, one placed, and the lag of its outputs measured.
        assert re.search(r"connected\s+1/\d+\s+1\s+0\s+\d+\.\ds\s+\d+s ago", line), status.stdout
        assert re.search(r"connected\s+0/\d+\s+0\s+0\s+-", agent_line(status.stdout, "e2e-agent-2")), status.stdout
        assert "sessions: ready 1" in status.stdout and "stuck: none" in status.stdout
        assert "\x1b[" not in status.stdout  # no color off a terminal

        developer = await client.admin.create_api_key("ops-dev", role="developer")
        refused = astrabox(stack, "hosts", "drain", "e2e-agent", key=developer.secret)
        assert refused.returncode != 0 and "ROLE_INSUFFICIENT" in refused.stderr + refused.stdout, refused
        assert astrabox(stack, "status", key=developer.secret).returncode != 0
        assert agent_line(astrabox(stack, "status").stdout, "e2e-agent").split()[2] == "connected"

        drained = astrabox(stack, "hosts", "drain", "e2e-agent", "--timeout", "600")
        assert drained.returncode == 0 and "e2e-agent draining" in drained.stdout, drained.stderr
        assert "DRAINING" in agent_line(astrabox(stack, "status").stdout, "e2e-agent")

        # New sessions go to the other agent at once.
        second = await client.create_session(request_id="after-drain")
        assert second.agent_id == "e2e-agent-2"
        # The idle session loses its runtime on the drained agent (the sweep), then its next message
        # starts it on the other agent, where the conversation goes on.
        async with asyncio.timeout(60):
            async for event in client.watch(sid, after_seq=accepted.seq):
                if event.WhichOneof("payload") == "runtime_lost":
                    assert "being drained" in event.runtime_lost.reason
                    break
        again = await client.send_message(sid, "What did you do last time?", client_message_id="m2")
        events = await collect_turn(client, sid, again.turn_id)
        assert events[-1].WhichOneof("payload") == "turn_completed"
        moved = await client.get_session(sid)
        assert moved.agent_id == "e2e-agent-2" and moved.runtime_available

        after = astrabox(stack, "status")
        assert re.search(r"DRAINING\s+0/\d+\s+0\s", agent_line(after.stdout, "e2e-agent")), after.stdout
        assert re.search(r"connected\s+2/\d+\s+2\s", agent_line(after.stdout, "e2e-agent-2")), after.stdout
        assert astrabox(stack, "top", "--once").stdout.count("e2e-agent") >= 2

        undone = astrabox(stack, "hosts", "uncordon", "e2e-agent")
        assert undone.returncode == 0 and "e2e-agent takes new sessions" in undone.stdout
        records = await client.admin.list_audit_records()
        methods = [(r.method, r.code, r.details.get("agent_id")) for r in records.records]
        assert ("DrainAgent", "OK", "e2e-agent") in methods and ("UncordonAgent", "OK", "e2e-agent") in methods
