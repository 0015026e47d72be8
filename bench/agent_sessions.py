"""Sessions started from an agent definition against sessions without one, on one real stack.

Brings up, in a temp dir, an embedded PostgreSQL, the control plane and one data-plane agent
(separate processes; local bubblewrap driver; the offline model), applies one agent definition
(an appended system prompt, tool policies on every built-in tool the manifest lists, a skill,
limits), then alternates, one session at a time:

  plain   CreateSession with no agent           -> RUNTIME_READY seen by a watch, then one turn
  agent   CreateSession(agent="bench-reviewer") -> RUNTIME_READY seen by a watch, then one turn

The turn is the offline model's default script (one Bash call, then a text). With `--warm-pool N`
the agent keeps N sandboxes ready with a pre-started engine: a plain session adopts the default
engine, and once a session of the agent version started, the pool keeps one of them (N >= 2) with
an engine launched with that version's configuration, which its next session adopts (the warmup
session starts its own). Prints p50/p90/max per figure and the medians' ratios; timings are
printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from _common import (
    CONTROLPLANE_ADMISSION_ENV,
    Process,
    api_key_file,
    embedded_postgres,
    offline_agent,
    percentile,
    revision,
    summary_row,
)

from astrabox.agents.v1 import agent_pb2
from astrabox.client import AstraBoxClient

TIMEOUT = 180.0
PROMPT = "Please create hello.txt"
SKILL_MD = b"---\nname: review-checklist\ndescription: What to check in a review\n---\nCheck tests first.\n"


def spec(tools: list[str]) -> agent_pb2.AgentSpec:
    rules = [agent_pb2.ToolRule(tool=tool, policy=agent_pb2.TOOL_POLICY_ALLOW) for tool in tools]
    return agent_pb2.AgentSpec(
        description="the benchmark's agent",
        permission_mode="bypassPermissions",
        system_prompt=agent_pb2.SystemPrompt(append="You review code for the benchmark."),
        tools=agent_pb2.Tools(rules=rules, default_policy=agent_pb2.TOOL_POLICY_ALLOW),
        skills=[
            agent_pb2.Skill(name="review-checklist", files=[agent_pb2.SkillFile(path="SKILL.md", content=SKILL_MD)])
        ],
        limits=agent_pb2.Limits(max_turns=20, max_cost_usd_per_session=50),
    )


async def one_session(
    client: AstraBoxClient, sandboxes: Path, label: str, index: int, agent: str
) -> tuple[float, float]:
    """(CreateSession -> READY, SendMessage -> TURN_COMPLETED) in ms; the session is deleted after."""
    start = time.perf_counter()
    session = await client.create_session(request_id=f"{label}-{index}", agent=agent)
    watch = client.watch(session.session_id)
    ready_ms = turn_ms = 0.0
    async with asyncio.timeout(TIMEOUT):
        async for event in watch:
            kind = event.WhichOneof("payload")
            if kind in ("runtime_failed", "turn_failed"):
                raise RuntimeError(f"{label} session: {event}")
            if kind == "runtime_ready":
                ready_ms = (time.perf_counter() - start) * 1000
                start = time.perf_counter()
                await client.send_message(session.session_id, PROMPT, client_message_id=f"{label}-{index}-m")
            elif kind == "turn_completed":
                turn_ms = (time.perf_counter() - start) * 1000
                break
    await watch.aclose()
    await client.delete_session(session.session_id)
    directory = sandboxes / f"local-{session.session_id}"
    async with asyncio.timeout(60):  # untimed: its CLI is gone before the next measurement
        while directory.exists():
            await asyncio.sleep(0.05)
    return ready_ms, turn_ms


async def bench(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="astrabox-bench-agents-"))
    processes: list[Process] = []
    try:
        async with embedded_postgres(args.fast_postgres) as dsn:
            key_file, api_key = api_key_file(work)
            controlplane = Process(
                "controlplane",
                [sys.executable, "-m", "controlplane", "--listen", "127.0.0.1:0"],
                work / "controlplane.log",
                env={
                    "ASTRABOX_DATABASE_URL": dsn,
                    "ASTRABOX_BOOTSTRAP_KEY_FILE": str(key_file),
                    **CONTROLPLANE_ADMISSION_ENV,
                },
            )
            processes.append(controlplane)
            address = (await asyncio.to_thread(controlplane.wait_for_line, r"listening on (\S+)")).group(1)
            agent = offline_agent(address, work, "--warm-pool", str(args.warm_pool))
            processes.append(agent)
            await asyncio.to_thread(agent.wait_for_line, r"relay_connected")
            figures: dict[str, list[float]] = defaultdict(list)
            async with AstraBoxClient.connect(address, api_key=api_key) as client:
                probe = await client.create_session(request_id="probe")
                tools = list(probe.capabilities.tools)
                await client.delete_session(probe.session_id)
                applied = await client.agents.apply("bench-reviewer", spec(tools))
                print(f"agent bench-reviewer v{applied.version.version}: {len(tools)} tool rules", file=sys.stderr)
                for index in range(args.warmup + args.sessions):
                    for label, name in (("plain", ""), ("agent", "bench-reviewer")):
                        ready, turn = await one_session(client, work / "agent" / "sandboxes", label, index, name)
                        if index >= args.warmup:
                            figures[f"{label}: CreateSession -> READY"].append(ready)
                            figures[f"{label}: SendMessage -> TURN_COMPLETED"].append(turn)
                        print(f"{label} {index}: ready {ready:.0f} ms, turn {turn:.0f} ms", file=sys.stderr)
            report(figures, args)
    finally:
        for process in reversed(processes):
            process.stop()
        if args.keep:
            print(f"logs and state kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def report(figures: dict[str, list[float]], args: argparse.Namespace) -> None:
    now = datetime.datetime.now().astimezone()
    print(
        f"agent_sessions  {now:%Y-%m-%d %H:%M %Z}  {revision()}  sessions={args.sessions} warmup={args.warmup}"
        f" warm_pool={args.warm_pool}"
    )
    for name in sorted(figures, key=lambda n: (n.split(":")[1], n)):
        print(summary_row(name, figures[name]))
    med = {name: percentile(values, 50) for name, values in figures.items()}
    for what in ("CreateSession -> READY", "SendMessage -> TURN_COMPLETED"):
        print(f"  {what}: with an agent / without = {med[f'agent: {what}'] / med[f'plain: {what}']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=8, help="measured sessions of each kind (default 8)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured sessions of each kind first (default 1)")
    parser.add_argument("--warm-pool", type=int, default=0, help="the agent's --warm-pool (default 0: none)")
    parser.add_argument("--fast-postgres", action="store_true", help="PostgreSQL without fsync")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, state)")
    asyncio.run(bench(parser.parse_args()))


if __name__ == "__main__":
    main()
