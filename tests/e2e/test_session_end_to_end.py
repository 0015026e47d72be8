"""One real session end to end: separate processes, the real bundled Claude Code CLI
inside the local sandbox, the offline model's scripted Bash call."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from astrabox.client import AstraBoxClient
from astrabox.sessionkernel.v1 import events_pb2, session_pb2

pytestmark = pytest.mark.e2e

TURN_TIMEOUT = 180


async def collect_turn(client: AstraBoxClient, session_id: str, turn_id: str) -> list[events_pb2.SessionEvent]:
    events = []
    async with asyncio.timeout(TURN_TIMEOUT):
        async for event in client.watch(session_id):
            events.append(event)
            if event.turn_id == turn_id and event.WhichOneof("payload") in ("turn_completed", "turn_failed"):
                return events
    raise AssertionError("watch ended")


def engine_messages(events: list[events_pb2.SessionEvent]) -> list[tuple[str, dict]]:
    return [
        (e.engine_message.type_name, json.loads(e.engine_message.payload_json))
        for e in events
        if e.WhichOneof("payload") == "engine_message"
    ]


async def test_real_cli_runs_bash_in_the_sandbox_and_the_stream_shows_the_whole_turn(client, stack):
    session = await client.create_session(request_id="e2e-create")
    ready = await client.wait_for_state(session.session_id, ["READY"], timeout=120)
    assert ready.runtime_available
    accepted = await client.send_message(session.session_id, "Please create hello.txt", client_message_id="e2e-m1")

    events = await collect_turn(client, session.session_id, accepted.turn_id)

    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[:2] == ["session_created", "startup_requested"]
    assert kinds.index("runtime_ready") < kinds.index("user_message_accepted")
    assert kinds[-1] == "turn_completed" and not events[-1].turn_completed.is_error
    assert events[kinds.index("user_message_accepted")].seq == accepted.seq

    messages = engine_messages(events)
    tool_uses = [
        block
        for type_name, payload in messages
        if type_name == "AssistantMessage"
        for block in payload["content"]
        if block.get("type_name") == "ToolUseBlock"
    ]
    assert tool_uses and tool_uses[0]["name"] == "Bash"
    assert "hello.txt" in tool_uses[0]["input"]["command"]
    assert any(t == "ResultMessage" for t, _ in messages)
    # Engine messages keep the agent's output order.
    output_seqs = [e.engine_message.output_seq for e in events if e.WhichOneof("payload") == "engine_message"]
    assert output_seqs == sorted(set(output_seqs)) and output_seqs[0] > 0

    workspace = stack.host_workspace(events)
    assert (workspace / "hello.txt").read_text() == "Hello from AstraBox\n"

    final = await client.get_session(session.session_id)
    assert final.state == session_pb2.SESSION_STATE_READY
    assert final.engine_session_id
    assert final.last_seq == events[-1].seq


async def test_retried_create_and_send_have_one_effect(client, stack):
    first = await client.create_session(request_id="same-create")
    again = await client.create_session(request_id="same-create")
    assert again.session_id == first.session_id
    await client.wait_for_state(first.session_id, ["READY"], timeout=120)
    a = await client.send_message(first.session_id, "run: echo once", client_message_id="same-msg")
    b = await client.send_message(first.session_id, "run: echo once", client_message_id="same-msg")
    assert (a.turn_id, a.seq) == (b.turn_id, b.seq)
    events = await collect_turn(client, first.session_id, a.turn_id)
    assert sum(1 for e in events if e.WhichOneof("payload") == "user_message_accepted") == 1
    assert sum(1 for e in events if e.WhichOneof("payload") == "turn_completed") == 1
    sessions = [s async for s in client.iter_sessions()]
    assert [s.session_id for s in sessions] == [first.session_id]


def grpcurl(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("grpcurl") or str(Path(sys.executable).parent / "grpcurl")
    return subprocess.run([binary, "-plaintext", *args], capture_output=True, text=True, timeout=60)


async def test_grpcurl_lists_services_and_calls_get_session(client, stack, api_key):
    auth = ("-H", f"authorization: Bearer {api_key}")
    listed = grpcurl(stack.address, "list")
    assert listed.returncode == 0, listed.stderr
    services = set(listed.stdout.split())
    assert {
        "astrabox.sessionkernel.v1.SessionKernelService",
        "astrabox.admin.v1.AdminService",
        "astrabox.runner.v1.RunnerService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    } <= services

    session = await client.create_session(request_id="grpcurl")
    get = ("-d", json.dumps({"session_id": session.session_id}), stack.address)
    method = "astrabox.sessionkernel.v1.SessionKernelService/GetSession"
    anonymous = grpcurl(*get, method)
    assert anonymous.returncode != 0 and "Unauthenticated" in anonymous.stderr
    assert session.session_id not in anonymous.stdout + anonymous.stderr
    got = grpcurl(*auth, *get, method)
    assert got.returncode == 0, got.stderr
    shown = json.loads(got.stdout)["session"]
    assert session.session_id in (shown.get("sessionId"), shown.get("session_id"))

    missing = grpcurl(
        *auth,
        "-d",
        '{"session_id": "nope"}',
        stack.address,
        "astrabox.sessionkernel.v1.SessionKernelService/GetSession",
    )
    assert missing.returncode != 0 and "InvalidArgument" in missing.stderr
    health = grpcurl(stack.address, "grpc.health.v1.Health/Check")
    assert json.loads(health.stdout)["status"] == "SERVING"


def test_grpcurl_describes_methods_and_messages_with_the_protos_comments(stack):
    method = grpcurl(stack.address, "describe", "astrabox.sessionkernel.v1.SessionKernelService.SendMessage")
    assert method.returncode == 0, method.stderr
    assert "rpc SendMessage ( .astrabox.sessionkernel.v1.SendMessageRequest )" in method.stdout
    message = grpcurl(stack.address, "describe", "astrabox.sessionkernel.v1.SendMessageRequest")
    assert message.returncode == 0, message.stderr
    assert "string client_message_id = 2;" in message.stdout
    assert "//" in message.stdout  # the proto's comments came along
    service = grpcurl(stack.address, "describe", "astrabox.admin.v1.AdminService")
    assert service.returncode == 0, service.stderr
    assert "rpc WhoAmI" in service.stdout
    missing = grpcurl(stack.address, "describe", "astrabox.sessionkernel.v1.SessionKernelService.NoSuchMethod")
    assert missing.returncode != 0
    health = grpcurl(stack.address, "describe", "grpc.health.v1.Health.Check")  # a file outside the set
    assert health.returncode == 0, health.stderr
