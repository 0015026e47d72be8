"""Agent definitions from the client's side, against a real control plane on PostgreSQL: the
`astrabox agents` commands (run as the user runs them) and `client.agents` (AgentService)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import grpc
import pytest_asyncio

from astrabox.agents.v1 import agent_pb2
from astrabox.cli import build_parser
from astrabox.client import AstraBoxClient
from controlplane.agents import AgentHello, Agents
from controlplane.engines import EngineManifest
from controlplane.server import RunningControlPlane, serve
from controlplane.settings import ControlPlaneSettings
from dataplane_agent.engines.claude_code import MANIFEST as CLAUDE_CODE
from dataplane_agent.relay.client import engine_manifest_proto

REVIEWER = """\
name: reviewer
description: Reviews pull requests
model: claude-sonnet-4-5
system_prompt:
  append: |
    You review code.
    Never push.
tools:
  enabled: [Bash, Read, Edit, WebFetch]
  default: ask
  rules: [{tool: Read, policy: allow}, {tool: Write, policy: deny}]
mcp_servers:
  - name: docs
    stdio: {command: python3, args: [/workspace/docs_mcp.py], env: {LOG: "1"}}
skills:
  - name: release-notes
    path: ./skills/release-notes
limits: {max_turns: 20, max_cost_usd_per_session: 1.5, turn_timeout: 30m}
"""


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str


@pytest_asyncio.fixture
async def running(database_url: str, bootstrap_key_file: str) -> AsyncIterator[RunningControlPlane]:
    settings = ControlPlaneSettings(
        database_url=database_url, listen="127.0.0.1:0", bootstrap_key_file=bootstrap_key_file
    )
    async with serve(settings) as control_plane:
        # A host has declared Claude Code's manifest, which definitions are validated against.
        manifest = EngineManifest.from_proto(engine_manifest_proto(CLAUDE_CODE))
        hello = AgentHello(
            agent_id="host-1", instance_id="t", drivers=["local"], engines=[manifest], capacity=1, sessions={}
        )
        await Agents(control_plane.pool, timedelta(seconds=30)).register(hello)
        yield control_plane


@pytest_asyncio.fixture
async def client(running: RunningControlPlane) -> AsyncIterator[AstraBoxClient]:
    async with AstraBoxClient.connect(running.address) as connected:
        yield connected


def agent_folder(tmp_path: Path) -> Path:
    skill = tmp_path / "skills" / "release-notes"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: release-notes\ndescription: Writes release notes\n---\nList them.\n")
    (tmp_path / "reviewer.yaml").write_text(REVIEWER)
    return tmp_path


async def astrabox(running: RunningControlPlane, *args: str, cwd: Path | None = None) -> Run:
    """`astrabox ARGS` run as a user runs it (the key from the environment, as every test's)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "astrabox",
        *args,
        cwd=cwd,
        env={**os.environ, "ASTRABOX_TARGET": running.address},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return Run(process.returncode, out.decode(), err.decode())


async def test_apply_twice_makes_one_version_a_change_makes_v2_and_show_round_trips(
    running: RunningControlPlane, tmp_path: Path
) -> None:
    folder = agent_folder(tmp_path)

    first = await astrabox(running, "agents", "apply", "reviewer.yaml", cwd=folder)
    assert (first.code, first.out, first.err) == (0, "created reviewer v1\n", "")
    again = await astrabox(running, "agents", "apply", "reviewer.yaml", cwd=folder)
    assert (again.code, again.out) == (0, "reviewer v1 (unchanged)\n"), again.err
    versions = await astrabox(running, "agents", "versions", "reviewer")
    assert [line.split()[0] for line in versions.out.splitlines()] == ["v1"]

    (folder / "reviewer.yaml").write_text(REVIEWER.replace("claude-sonnet-4-5", "claude-opus-4-1"))
    changed = await astrabox(running, "agents", "apply", "reviewer.yaml", cwd=folder)
    assert (changed.code, changed.out) == (0, "reviewer v2 (new version)\n"), changed.err
    versions = await astrabox(running, "agents", "versions", "reviewer")
    assert [line.split()[0] for line in versions.out.splitlines()] == ["v2", "v1"]

    # What show prints is an agent file: applied elsewhere (no skill directory there), it is the same definition.
    shown = await astrabox(running, "agents", "show", "reviewer", "-o", "yaml")
    assert shown.code == 0 and shown.out.startswith("# agent reviewer v2 of 2"), shown.err
    assert "model: claude-opus-4-1" in shown.out and "  append: |\n    You review code.\n    Never push.\n" in shown.out
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "shown.yaml").write_text(shown.out)
    reapplied = await astrabox(running, "agents", "apply", "shown.yaml", cwd=elsewhere)
    assert (reapplied.code, reapplied.out) == (0, "reviewer v2 (unchanged)\n"), reapplied.err

    old = await astrabox(running, "agents", "show", "reviewer", "--version", "1", "--output", "json")
    shown_v1 = json.loads(old.out)
    assert shown_v1["version"] == 1 and shown_v1["latest_version"] == 2
    assert shown_v1["spec"]["model"] == "claude-sonnet-4-5"
    assert shown_v1["spec"]["skills"][0]["files"][0]["path"] == "SKILL.md"


async def test_list_archive_and_errors_read_as_one_line_each(running: RunningControlPlane, tmp_path: Path) -> None:
    folder = agent_folder(tmp_path)
    (folder / "team.yaml").write_text("name: writer\n---\nname: tester\nmodel: claude-sonnet-4-5\n")
    applied = await astrabox(running, "agents", "apply", "reviewer.yaml", "team.yaml", cwd=folder)
    assert applied.out == "created reviewer v1\ncreated writer v1\ncreated tester v1\n", applied.err

    listed = await astrabox(running, "agents", "list")
    assert [line.split()[:2] for line in listed.out.splitlines()] == [
        ["reviewer", "v1"],
        ["tester", "v1"],
        ["writer", "v1"],
    ]

    archived = await astrabox(running, "agents", "archive", "writer")
    assert archived.out == "archived writer (at v1; its sessions go on)\n", archived.err
    listed = await astrabox(running, "agents", "list")
    assert [line.split()[0] for line in listed.out.splitlines()] == ["reviewer", "tester"]
    everything = await astrabox(running, "agents", "list", "--all")
    assert [line.split()[0] for line in everything.out.splitlines() if line.endswith("archived")] == ["writer"]

    missing = await astrabox(running, "agents", "show", "nobody")
    assert missing.code == 1 and missing.out == ""
    assert missing.err.startswith("astrabox: NOT_FOUND AGENT_NOT_FOUND: ") and len(missing.err.splitlines()) == 1

    # The server refuses what the file cannot know: a tool the engine does not have.
    (folder / "unknown-tool.yaml").write_text("name: odd\ntools: {enabled: [Teleport]}\n")
    refused = await astrabox(running, "agents", "apply", "unknown-tool.yaml", cwd=folder)
    assert refused.code == 1 and refused.err.startswith("astrabox: INVALID_ARGUMENT INVALID_AGENT_SPEC: ")
    assert "Teleport" in refused.err and len(refused.err.splitlines()) == 1


async def test_concurrent_applies_of_a_new_agent_make_it_once(client: AstraBoxClient) -> None:
    spec = agent_pb2.AgentSpec(description="raced", model="claude-sonnet-4-5")

    results = await asyncio.gather(*(client.agents.apply("raced", spec) for _ in range(4)))

    assert {(r.agent.name, r.version.version) for r in results} == {("raced", 1)}
    assert [r.new_agent for r in results].count(True) == 1
    assert [v.version async for v in client.agents.versions("raced")] == [1]


async def test_the_sdk_pages_through_agents_and_versions(client: AstraBoxClient) -> None:
    for name in ("gamma", "alpha", "beta"):
        await client.agents.create(name, agent_pb2.AgentSpec(description=name))
    for n in range(2, 5):
        applied = await client.agents.update("alpha", agent_pb2.AgentSpec(description=f"alpha {n}"))
        assert applied.created and applied.version.version == n
    unchanged = await client.agents.update("alpha", agent_pb2.AgentSpec(description="alpha 4"))
    assert not unchanged.created and unchanged.version.version == 4

    assert [a.name async for a in client.agents.list(page_size=1)] == ["alpha", "beta", "gamma"]
    versions = [v async for v in client.agents.versions("alpha", page_size=1)]
    assert [(v.version, v.spec.description) for v in versions] == [
        (4, "alpha 4"),
        (3, "alpha 3"),
        (2, "alpha 2"),
        (1, "alpha"),
    ]
    agent, version = await client.agents.get("alpha", version=2)
    assert (agent.latest_version, version.version, version.spec.description) == (4, 2, "alpha 2")
    assert len(version.spec_digest) == 64 and version.spec_digest != versions[0].spec_digest


def test_run_takes_an_agent_by_name_and_optionally_a_version() -> None:
    parser = build_parser({})
    assert parser.parse_args(["run", "hi", "--agent", "reviewer"]).agent == ("reviewer", 0)
    assert parser.parse_args(["run", "hi", "--agent", "reviewer@3"]).agent == ("reviewer", 3)
    assert parser.parse_args(["run", "hi"]).agent == ("", 0)


async def test_a_control_plane_without_agents_is_named_as_older_than_the_client() -> None:
    server = grpc.aio.server()  # serves nothing, as a control plane from before AgentService
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "astrabox", "agents", "--target", f"127.0.0.1:{port}", "list",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), 120)
    finally:
        await server.stop(None)
    assert (process.returncode, out) == (1, b"")
    assert err.decode() == (
        f"astrabox: UNIMPLEMENTED: the control plane at 127.0.0.1:{port} serves no agents (AgentService): "
        "it is older than this client\n"
    )
