"""The cost of the typed view of engine messages (`EngineMessage.content`) on a watch's catch-up:
converting journal rows to WatchSessionEvents responses, with the view and without it.

A real control plane (`controlplane.server.serve`) on a fresh embedded PostgreSQL; one session
whose journal holds --events engine messages shaped as the agent relays a turn of the SDK
(`sdk_messages.message_payload`): the engine's init, assistant text, thinking with a Bash tool call,
its tool result, a task message and the result, in turn. The rows are read once, as a catch-up reads
them (`store.events.read_for_clients`, pages of 1,000); then, per round and in alternating order,
each mode converts them all as `WatchSessionEvents` does for a watch behind (`convert.watch_responses`,
--per-response events a response) and serializes the responses, as gRPC then does:

  bare           without the view (`content=False`: the conversion before the view existed)
  content        with it (the default for every watch and list)

Prints the median µs per event of each mode, and their ratio, from the same run; then the bytes a
response carries per event, with and without the view. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import os
import shutil
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from _common import api_key_file, embedded_postgres, percentile, revision

from controlplane import convert, store
from controlplane.agents import AgentHello, Agents
from controlplane.engines import EngineManifest
from controlplane.identity import store as identity_store
from controlplane.journal import ClientPage, EventKind, Journal, NewEvent
from controlplane.kernel import CreateSession
from controlplane.live import LiveTail
from controlplane.server import serve
from controlplane.settings import ControlPlaneSettings
from dataplane_agent.engines.claude_code import MANIFEST as CLAUDE_CODE
from dataplane_agent.relay.client import engine_manifest_proto
from serverkit import logs

MODES = ("bare", "content")


def turn_messages(i: int, text_bytes: int) -> list[tuple[str, dict[str, Any]]]:
    """One turn's engine messages as the agent relays them (type name, payload), the texts about
    `text_bytes` long."""
    text = (f"turn {i}: " + "lorem ipsum dolor sit amet " * (text_bytes // 27 + 1))[:text_bytes]
    tool_id = f"toolu_{i:08d}"
    common = {"session_id": "bench-engine-session", "uuid": str(uuid.uuid4())}
    assistant = {"model": "claude-sonnet-4-5", "parent_tool_use_id": None, "error": None, "stop_reason": None}
    usage = {"input_tokens": 1200, "output_tokens": 85, "cache_read_input_tokens": 4096}
    return [
        (
            "SystemMessage",
            {
                "subtype": "init",
                "data": {
                    "type": "system",
                    "subtype": "init",
                    "cwd": "/workspace",
                    "session_id": "bench-engine-session",
                    "tools": ["Bash", "Edit", "Glob", "Grep", "Read", "Write", "WebFetch", "TodoWrite", "Task"],
                    "mcp_servers": [],
                    "model": "claude-sonnet-4-5",
                    "permissionMode": "default",
                    "slash_commands": ["compact", "context", "cost", "init", "review", "security-review"],
                },
            },
        ),
        (
            "AssistantMessage",
            {
                "content": [
                    {"type_name": "ThinkingBlock", "thinking": text[: text_bytes // 2], "signature": "sig" * 20},
                    {
                        "type_name": "ToolUseBlock",
                        "id": tool_id,
                        "name": "Bash",
                        "input": {"command": f"ls -la /workspace/src/{i}", "description": "List the sources"},
                    },
                ],
                "message_id": f"msg_{i:08d}a",
                "usage": usage,
                **assistant,
                **common,
            },
        ),
        (
            "UserMessage",
            {
                "content": [
                    {"type_name": "ToolResultBlock", "tool_use_id": tool_id, "content": text, "is_error": False}
                ],
                "parent_tool_use_id": None,
                "tool_use_result": {"stdout": text, "stderr": "", "interrupted": False, "isImage": False},
                "uuid": common["uuid"],
            },
        ),
        (
            "AssistantMessage",
            {
                "content": [{"type_name": "TextBlock", "text": text}],
                "message_id": f"msg_{i:08d}b",
                "usage": usage,
                **assistant,
                **common,
            },
        ),
        (
            "TaskNotificationMessage",
            {
                "subtype": "task_notification",
                "data": {"task_id": f"task_{i}", "status": "completed"},
                "task_id": f"task_{i}",
                "status": "completed",
                "summary": "Ran the build",
                "tool_use_id": tool_id,
                **common,
            },
        ),
        (
            "ResultMessage",
            {
                "subtype": "success",
                "duration_ms": 5321,
                "duration_api_ms": 4100,
                "is_error": False,
                "num_turns": 2,
                "total_cost_usd": 0.0123,
                "usage": usage,
                "result": text,
                "errors": [],
                **common,
            },
        ),
    ]


async def journal(pool: Any, session_id: str, count: int, text_bytes: int) -> None:
    """`count` engine messages appended to the session's journal, in turns."""
    journal = Journal(pool, LiveTail())
    events: list[NewEvent] = []
    i = 0
    while len(events) < count:
        for type_name, payload in turn_messages(i, text_bytes):
            message = {"type_name": type_name, "message": payload}
            events.append(NewEvent(EventKind.ENGINE_MESSAGE, message, turn_id=f"turn-{i}"))
        i += 1
    for first in range(0, count, 500):
        async with journal.transaction() as tx:
            await tx.append(session_id, events[first : min(first + 500, count)])


def convert_all(pages: list[ClientPage], per_response: int, content: bool) -> tuple[float, int]:
    """Seconds to turn `pages` into serialized WatchSessionEvents responses; their bytes."""
    start = time.perf_counter()
    size = 0
    for page in pages:
        for response in convert.watch_responses(page, per_response, content):
            size += len(response.SerializeToString())
    return time.perf_counter() - start, size


async def run(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="astrabox-bench-content-"))
    try:
        async with embedded_postgres(fast=True) as dsn:
            key_file, _ = api_key_file(work)
            settings = ControlPlaneSettings(database_url=dsn, listen="127.0.0.1:0", bootstrap_key_file=str(key_file))
            async with serve(settings) as controlplane:
                pool = controlplane.pool
                manifest = EngineManifest.from_proto(engine_manifest_proto(CLAUDE_CODE))
                await Agents(pool, timedelta(seconds=30)).register(
                    AgentHello("bench-agent", "bench", ["local"], [manifest], 10, {})
                )
                async with pool.acquire() as conn:
                    project = await identity_store.operator_project(conn)
                session = await controlplane.kernel.create_session(CreateSession("bench", project.project_id))
                await journal(pool, session.session_id, args.events, args.text_bytes)
                pages, after = [], 0
                while True:
                    rows, more = await store.events.read_for_clients(pool, session.session_id, after, 1000, 1 << 40)
                    rows = [row for row in rows if row["kind"] == "engine_message"]
                    if rows:
                        pages.append(ClientPage(rows, more))
                        after = rows[-1]["seq"]
                    if not more:
                        break
    finally:
        shutil.rmtree(work, ignore_errors=True)

    events = sum(len(page) for page in pages)
    seconds: dict[str, list[float]] = {mode: [] for mode in MODES}
    sizes: dict[str, int] = {}
    for mode in MODES:  # untimed: warms the caches of both
        convert_all(pages, args.per_response, mode == "content")
    for r in range(args.rounds):
        for mode in MODES if r % 2 == 0 else reversed(MODES):
            gc.collect()
            took, sizes[mode] = convert_all(pages, args.per_response, mode == "content")
            seconds[mode].append(took)

    now = datetime.datetime.now().astimezone()
    print(
        f"engine_content  {now:%Y-%m-%d %H:%M %Z}  {revision()}  events={events} text={args.text_bytes}B"
        f" rounds={args.rounds} per-response={args.per_response} load={os.getloadavg()[0]:.1f}"
    )
    medians = {mode: percentile(values, 50) / events * 1e6 for mode, values in seconds.items()}
    for mode in MODES:
        print(f"  {mode:<8} median {medians[mode]:6.2f} µs/event  {sizes[mode] / events:8.0f} bytes/event")
    print(
        f"  content / bare: x{medians['content'] / medians['bare']:.2f} time, x{sizes['content'] / sizes['bare']:.2f} bytes"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=12_000, help="engine messages (default %(default)s)")
    parser.add_argument("--text-bytes", type=int, default=400, help="length of each text (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=11, help="rounds; the median is reported (default %(default)s)")
    parser.add_argument(
        "--per-response",
        type=int,
        default=500,
        help="events a response, as max_events_per_response (default %(default)s)",
    )
    args = parser.parse_args()
    logs.configure("json", "warning")
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
