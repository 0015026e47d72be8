"""Isolation end to end: a real agent holding an API key, the real CLI in the local sandbox.

The model answers through the agent's route, yet from inside a session nothing
shows the key (environment, every process's environment, the process list, the
sandbox's files), the host's network is out of reach, and so are another
session's workspace and the agent's own files. Nor is the key in the journal,
the agent's state or either process's log.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from astrabox.client import AstraBoxClient
from tests.support import admission
from tests.support.processes import Process, start_controlplane
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

TURN_TIMEOUT = 180
REAL_KEY = f"sk-ant-api03-e2e-{uuid.uuid4().hex}"


@pytest.fixture
def stack(database_url: str, tmp_path: Path) -> Iterator[Stack]:
    """The e2e stack, but the agent holds a key and forwards to an offline model of its own process."""
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    model = Process("offline-model", [sys.executable, "-m", "dataplane_agent.offline_model"], log_dir / "model.log")
    upstream = model.wait_for_line(r"(http://\S+)").group(1)
    controlplane, address = start_controlplane(database_url, log_dir)
    stack = Stack(address, controlplane, tmp_path / "agent-state", log_dir, database_url)
    try:
        agent = Process(
            "agent",
            [sys.executable, "-m", "dataplane_agent", "--controlplane", address, "--state-dir", str(stack.agent_state),
             "--agent-id", "isolation-agent"],
            log_dir / "agent.log",
            env={"ANTHROPIC_API_KEY": REAL_KEY, "ASTRABOX_MODEL_BASE_URL": upstream, **admission.AGENT_ENV},
        )  # fmt: skip
        stack.agents.append(agent)
        agent.wait_for_line(r"relay_connected", timeout=60)
        yield stack
    finally:
        stack.stop()
        model.stop()


async def _ready_workspace(client: AstraBoxClient, stack: Stack, request_id: str) -> tuple[str, Path]:
    session = await client.create_session(request_id=request_id)
    await client.wait_for_state(session.session_id, ["READY"], timeout=120)
    async for event in client.iter_events(session.session_id):
        if event.WhichOneof("payload") == "runtime_ready":
            return session.session_id, stack.host_workspace([event])
    raise AssertionError("the session is ready without a runtime_ready event")


async def _turn(client: AstraBoxClient, session_id: str, text: str) -> list:
    accepted = await client.send_message(session_id, text)
    events = []
    async with asyncio.timeout(TURN_TIMEOUT):
        async for event in client.watch(session_id):
            events.append(event)
            if event.turn_id == accepted.turn_id and event.WhichOneof("payload") in ("turn_completed", "turn_failed"):
                return events
    raise AssertionError("watch ended")


def _files_holding(root: Path, needle: bytes) -> list[Path]:
    """Files under `root` containing `needle`; one that vanishes while this looks (the CLI's own temporary
    files come and go) held nothing any more."""
    holding = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
                holding.append(path)
        except FileNotFoundError:
            continue
    return holding


async def test_from_inside_a_session_only_the_model_route_is_reachable(client: AstraBoxClient, stack: Stack) -> None:
    other_id, other_workspace = await _ready_workspace(client, stack, "isolation-other")
    (other_workspace / "private.txt").write_text("the other session's secret")
    mine_id, workspace = await _ready_workspace(client, stack, "isolation-mine")
    controlplane_port = stack.address.rpartition(":")[2]
    command = (
        "{ env; cat /proc/[0-9]*/environ | tr '\\0' '\\n'; ps -eo pid,args; } > seen.txt 2>&1; "
        f"cat {other_workspace}/private.txt > other.txt 2>&1; ls -a {stack.agent_state} > state.txt 2>&1; "
        f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{controlplane_port}' > net.txt 2>&1 && echo REACHED >> net.txt; true"
    )

    events = await _turn(client, mine_id, f"run: {command}")

    assert events[-1].WhichOneof("payload") == "turn_completed" and not events[-1].turn_completed.is_error
    seen = (workspace / "seen.txt").read_text()
    assert "ANTHROPIC_API_KEY=astrabox." in seen  # the CLI's own environment was read: it holds a token
    assert "socat" in seen and "claude" in seen  # and so was the process list
    assert REAL_KEY not in seen
    assert "No such file or directory" in (workspace / "other.txt").read_text()
    assert "No such file or directory" in (workspace / "state.txt").read_text()
    assert "REACHED" not in (workspace / "net.txt").read_text()

    needle = REAL_KEY.encode()
    assert _files_holding(stack.agent_state, needle) == []  # sandboxes, launchers, transcripts, the agent's db
    assert _files_holding(stack.log_dir, needle) == []
    for session_id in (other_id, mine_id):
        journal = [str(event) async for event in client.iter_events(session_id)]
        assert journal and not any(REAL_KEY in event for event in journal)
