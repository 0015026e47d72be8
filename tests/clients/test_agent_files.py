"""Agent files (astrabox.agent_files): the YAML of `astrabox agents apply` read into AgentSpecs, each
kind of mistake an error naming the file, the line and what is valid, and `dump` read back to the
same definition."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from google.protobuf import duration_pb2

from astrabox import agent_files
from astrabox.agents.v1 import agent_pb2
from astrabox.errors import AgentFileError
from astrabox.memory.v1 import memory_service_pb2 as memory_pb2

REVIEWER = """\
name: reviewer
description: Reviews pull requests
model: claude-sonnet-4-5
permission_mode: default
system_prompt: {append: "You review code. Never push."}
tools:
  enabled: [Bash, Read, Edit, WebFetch]
  default: ask
  rules: [{tool: Read, policy: allow}, {tool: Write, policy: deny}, {tool: "mcp__docs__*", policy: allow}]
mcp_servers:
  - name: docs
    stdio: {command: python3, args: [/workspace/docs_mcp.py], env: {LOG: "1"}}
    enabled_tools: [search]
skills:
  - name: release-notes
    path: ./skills/release-notes
limits: {max_turns: 20, max_cost_usd_per_turn: 1.5, max_cost_usd_per_session: 20, turn_timeout: 30m}
custom_tools:
  - name: lookup_order
    description: Looks an order up by its id
    input_schema:
      type: object
      properties: {order_id: {type: string, description: "like A-7"}}
      required: [order_id]
subagents:
  - {agent: linter, version: 2, description: Lints a change}
  - agent: summarizer
memory:
  - {store: team-notes, mode: read-write}
  - {store: house-rules, mode: read-only}
"""

SKILL_MD = b"---\nname: release-notes\ndescription: Writes release notes\n---\nList the merged changes.\n"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder holding reviewer.yaml and its skill directory."""
    skill = tmp_path / "skills" / "release-notes"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_bytes(SKILL_MD)
    (skill / "scripts" / "collect.sh").write_bytes(b"#!/bin/sh\ngit log --oneline\n")
    (tmp_path / "reviewer.yaml").write_text(REVIEWER)
    return tmp_path


def error_of(text: str, base_dir: Path | None = None) -> str:
    with pytest.raises(AgentFileError) as raised:
        agent_files.parse(textwrap.dedent(text), source="agent.yaml", base_dir=base_dir or Path("."))
    return str(raised.value)


def test_a_complete_file_reads_into_the_spec_it_says(folder: Path) -> None:
    [agent] = agent_files.load(folder / "reviewer.yaml")

    assert agent.name == "reviewer" and agent.source == f"{folder / 'reviewer.yaml'}:1"
    expected = agent_pb2.AgentSpec(
        description="Reviews pull requests",
        model="claude-sonnet-4-5",
        permission_mode="default",
        system_prompt=agent_pb2.SystemPrompt(append="You review code. Never push."),
        tools=agent_pb2.Tools(
            enabled=["Bash", "Read", "Edit", "WebFetch"],
            default_policy=agent_pb2.TOOL_POLICY_ASK,
            rules=[
                agent_pb2.ToolRule(tool="Read", policy=agent_pb2.TOOL_POLICY_ALLOW),
                agent_pb2.ToolRule(tool="Write", policy=agent_pb2.TOOL_POLICY_DENY),
                agent_pb2.ToolRule(tool="mcp__docs__*", policy=agent_pb2.TOOL_POLICY_ALLOW),
            ],
        ),
        mcp_servers=[
            agent_pb2.McpServer(
                name="docs",
                stdio=agent_pb2.StdioMcpServer(command="python3", args=["/workspace/docs_mcp.py"], env={"LOG": "1"}),
                enabled_tools=["search"],
            )
        ],
        skills=[
            agent_pb2.Skill(
                name="release-notes",
                files=[
                    agent_pb2.SkillFile(path="SKILL.md", content=SKILL_MD),
                    agent_pb2.SkillFile(path="scripts/collect.sh", content=b"#!/bin/sh\ngit log --oneline\n"),
                ],
            )
        ],
        limits=agent_pb2.Limits(
            max_turns=20,
            max_cost_usd_per_turn=1.5,
            max_cost_usd_per_session=20,
            turn_timeout=duration_pb2.Duration(seconds=1800),
        ),
        custom_tools=[
            agent_pb2.CustomTool(
                name="lookup_order",
                description="Looks an order up by its id",
                input_schema_json='{"type":"object","properties":{"order_id":{"type":"string","description":"like A-7"}},'
                '"required":["order_id"]}',
            )
        ],
        subagents=[
            agent_pb2.SubAgent(agent="linter", version=2, description="Lints a change"),
            agent_pb2.SubAgent(agent="summarizer"),
        ],
        memory=[
            memory_pb2.MemoryAttachment(store="team-notes", mode=memory_pb2.MEMORY_MODE_READ_WRITE),
            memory_pb2.MemoryAttachment(store="house-rules", mode=memory_pb2.MEMORY_MODE_READ_ONLY),
        ],
    )
    assert agent.spec == expected


def test_what_dump_writes_reads_back_to_the_same_definition(folder: Path) -> None:
    [agent] = agent_files.load(folder / "reviewer.yaml")
    spec = agent_pb2.AgentSpec()
    spec.CopyFrom(agent.spec)
    # Text a YAML writer can get wrong: lines with trailing or leading blanks, CRLF, tabs, no final newline.
    spec.system_prompt.replace = "  Indented first line\nwith trailing blanks   \r\nand\ta tab\n\n\nno end"
    spec.skills[0].files.add(path="logo.png", content=bytes(range(256)))
    spec.skills[0].files.add(path="notes.txt", content="ünïcode: yes\n".encode())
    spec.limits.turn_timeout.CopyFrom(duration_pb2.Duration(seconds=5400, nanos=500_000_000))
    spec.mcp_servers[0].stdio.env["EMPTY"] = ""
    spec.mcp_servers[0].stdio.env["NUMBER"] = "8080"
    spec.mcp_servers.add(
        name="tickets",
        http=agent_pb2.HttpMcpServer(url="https://mcp.example/mcp", credential="tickets.token", header="X-Api-Key"),
        enabled_tools=["search"],
    )
    spec.mcp_servers.add(name="public", http=agent_pb2.HttpMcpServer(url="http://127.0.0.1:8080/mcp"))

    written = agent_files.dump("reviewer", spec)
    [again] = agent_files.parse(written)

    assert again.name == "reviewer" and again.spec == spec
    assert "turn_timeout: 1h30m0.5s" in written and "content_base64:" in written
    assert "enabled: [Bash, Read, Edit, WebFetch]" in written  # written as a person would


def test_present_but_empty_sections_and_zero_durations_survive_a_round_trip() -> None:
    spec = agent_pb2.AgentSpec(tools=agent_pb2.Tools(), limits=agent_pb2.Limits(turn_timeout=duration_pb2.Duration()))
    [again] = agent_files.parse(agent_files.dump("bare", spec))
    assert again.spec == spec and again.spec.HasField("tools") and again.spec.limits.HasField("turn_timeout")
    [minimal] = agent_files.parse("name: minimal\n")
    assert minimal.spec == agent_pb2.AgentSpec()


def test_a_file_holds_one_agent_per_document_and_a_name_only_once() -> None:
    agents = agent_files.parse("name: one\nmodel: m1\n---\nname: two\n---\n", source="team.yaml")
    assert [(a.name, a.spec.model, a.source) for a in agents] == [
        ("one", "m1", "team.yaml:1"),
        ("two", "", "team.yaml:4"),
    ]
    assert (
        error_of("name: one\n---\nname: one\n") == "agent.yaml:3: name: 'one' is defined twice (first at agent.yaml:1)"
    )
    assert error_of("# nothing\n") == "agent.yaml: no agent in it (a document with at least `name:`)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "name: x\nmodle: y\n",
            "agent.yaml:2: agent: unknown key 'modle'; did you mean 'model'? valid keys: name, description, engine, "
            "model, permission_mode, system_prompt, tools, mcp_servers, skills, limits, custom_tools, subagents, memory",
        ),
        (
            "name: x\ntools:\n  enabled: [Bash]\n  policy: ask\n",
            "agent.yaml:4: tools: unknown key 'policy'; valid keys: enabled, default, rules",
        ),
        (
            "name: x\ntools:\n  rules:\n    - {tool: Bash, policy: maybe}\n",
            "agent.yaml:4: tools.rules[0].policy: unknown policy 'maybe'; valid: allow, ask, deny",
        ),
        ("name: x\ntools:\n  rules:\n    - {tool: Bash}\n", "agent.yaml:4: tools.rules[0]: 'policy' is required"),
        ("description: nameless\n", "agent.yaml:1: agent: 'name' is required"),
        (
            "name: Reviewer\n",
            "agent.yaml:1: name: 'Reviewer' is not 1-64 characters of a-z, 0-9 and -, starting with a letter",
        ),
        ("name: x\nmodel: 4\n", "agent.yaml:2: model: must be text (quote it to make it text)"),
        (
            "name: x\nmcp_servers:\n  - name: docs\n    stdio: {command: srv, env: {PORT: 8080}}\n",
            "agent.yaml:4: mcp_servers[0].stdio.env.PORT: must be text (quote it to make it text)",
        ),
        (
            "name: x\nmcp_servers:\n  - name: docs\n",
            "agent.yaml:3: mcp_servers[0]: must have one of 'stdio' (a program in the sandbox) or 'http' (a URL)",
        ),
        (
            "name: x\nmcp_servers:\n  - {name: docs, stdio: {command: s}, http: {url: 'https://m.example'}}\n",
            "agent.yaml:3: mcp_servers[0]: must have one of 'stdio' (a program in the sandbox) or 'http' (a URL)",
        ),
        (
            "name: x\nmcp_servers:\n  - {name: docs, http: {url: 'https://m.example', token: s3cret}}\n",
            "agent.yaml:3: mcp_servers[0].http: unknown key 'token'; valid keys: url, credential, header",
        ),
        (
            "name: x\nmcp_servers:\n  - {name: a, stdio: {command: s}}\n  - {name: a, stdio: {command: t}}\n",
            "agent.yaml:4: mcp_servers: 'a' is given twice",
        ),
        (
            "name: x\nsystem_prompt: {append: a, replace: b}\n",
            "agent.yaml:2: system_prompt: give exactly one of append or replace",
        ),
        ("name: x\nsystem_prompt: be nice\n", "agent.yaml:2: system_prompt: must be a mapping of append, replace"),
        ("name: x\nlimits: {max_turns: many}\n", "agent.yaml:2: limits.max_turns: must be a whole number"),
        ("name: x\nlimits: {max_turns: -1}\n", "agent.yaml:2: limits.max_turns: -1 is not between 0 and 2147483647"),
        (
            "name: x\nlimits: {turn_timeout: 30 minutes}\n",
            "agent.yaml:2: limits.turn_timeout: '30 minutes' is not a duration such as 90s, 30m or 1h30m (units h, m, s, ms)",
        ),
        (
            "name: x\nlimits: {max_cost_usd_per_turn: .nan}\n",
            "agent.yaml:2: limits.max_cost_usd_per_turn: nan is not a finite number of dollars, 0 or more",
        ),
        ("name: x\nmodel: a\nmodel: b\n", "agent.yaml:3: model: given twice"),
        ("name: x\ntools: {enabled: Bash}\n", "agent.yaml:2: tools.enabled: must be a list"),
        (
            "- name: x\n",
            "agent.yaml:1: agent: must be a mapping of name, description, engine, model, permission_mode, "
            "system_prompt, tools, mcp_servers, skills, limits, custom_tools, subagents, memory",
        ),
        (
            "name: x\ntools: {enabled: [Bash\n",
            "agent.yaml:3: not valid YAML: expected ',' or ']', but got '<stream end>'",
        ),
        (
            "name: x\nskills:\n  - name: s\n    files: [{path: ../SKILL.md, content: x}]\n",
            "agent.yaml:4: skills[0].files[0].path: '../SKILL.md' is not a relative path inside the skill "
            "(no '..', '.', empty part or leading '/')",
        ),
        (
            "name: x\nskills:\n  - name: s\n    files: [{path: README.md, content: x}]\n",
            "agent.yaml:3: skills[0]: a skill needs a SKILL.md",
        ),
        (
            "name: x\nskills:\n  - name: s\n    files: [{path: SKILL.md, content_base64: '!!'}]\n",
            "agent.yaml:4: skills[0].files[0].content_base64: not base64",
        ),
        (
            "name: x\ncustom_tools:\n  - name: look-up\n    input_schema: {type: object}\n",
            "agent.yaml:3: custom_tools[0].name: 'look-up' is not 1-64 characters of a-z, 0-9 and _, starting with a letter",
        ),
        (
            "name: x\ncustom_tools:\n  - name: t\n    input_schema: object\n",
            "agent.yaml:4: custom_tools[0].input_schema: must be a mapping: the JSON Schema of the tool's input",
        ),
        (
            "name: x\ncustom_tools:\n  - {name: t, input_schema: {type: object}}\n  - {name: t, input_schema: {}}\n",
            "agent.yaml:4: custom_tools: 't' is given twice",
        ),
        (
            "name: x\nmemory:\n  - {store: notes, mode: rw}\n",
            "agent.yaml:3: memory[0].mode: must be one of read-only, read-write, not 'rw'",
        ),
        (
            "name: x\nmemory:\n  - {store: notes, mode: read-only}\n  - {store: notes, mode: read-write}\n",
            "agent.yaml:4: memory: 'notes' is given twice",
        ),
    ],
)
def test_each_kind_of_mistake_names_its_line_key_and_what_is_valid(text: str, expected: str) -> None:
    assert error_of(text) == expected


def test_sizes_over_the_contracts_limits_are_refused_before_anything_is_sent() -> None:
    assert (
        error_of(f"name: x\ndescription: {'d' * 1025}\n")
        == "agent.yaml:2: description: 1025 bytes, over the limit of 1024"
    )
    servers = "".join(f"  - {{name: s{i}, stdio: {{command: c}}}}\n" for i in range(17))
    assert (
        error_of(f"name: x\nmcp_servers:\n{servers}") == "agent.yaml:3: mcp_servers: 17 entries, over the limit of 16"
    )
    rules = ", ".join(f"{{tool: T{i}, policy: allow}}" for i in range(257))
    assert (
        error_of(f"name: x\ntools: {{rules: [{rules}]}}\n")
        == "agent.yaml:2: tools.rules: 257 entries, over the limit of 256"
    )
    big = "p" * (200 * 1024)
    prompt = f"name: x\nsystem_prompt: {{append: {big}}}\n"
    assert agent_files.parse(prompt)[0].spec.system_prompt.append == big
    assert "system_prompt.append: 262145 bytes, over the limit of 262144" in error_of(prompt.replace(big, "p" * 262145))
    # Five skills of 250 KiB each: every one within its limit, the whole over 1 MiB.
    skills = "".join(
        f"  - {{name: s{i}, files: [{{path: SKILL.md, content: {'k' * 250 * 1024}}}]}}\n" for i in range(5)
    )
    assert error_of(f"name: x\nskills:\n{skills}").startswith("agent.yaml:1: x: the definition is ")


def test_a_skill_directory_is_read_without_leaving_it(folder: Path) -> None:
    skill = folder / "skills" / "release-notes"
    outside = folder / "secret.txt"
    outside.write_text("not for the sandbox")

    (skill / "inside-link.md").symlink_to(skill / "SKILL.md")
    [agent] = agent_files.load(folder / "reviewer.yaml")
    linked = {f.path: f.content for f in agent.spec.skills[0].files}
    assert linked["inside-link.md"] == SKILL_MD

    (skill / "leak.txt").symlink_to(outside)
    message = load_error(folder)
    assert message.startswith(f"{folder / 'reviewer.yaml'}:16: skills[0].path: leak.txt in ")
    assert "links outside it" in message
    (skill / "leak.txt").unlink()

    (skill / "elsewhere").symlink_to(folder, target_is_directory=True)
    assert "elsewhere in " in load_error(folder) and "is a symbolic link to a directory" in load_error(folder)
    (skill / "elsewhere").unlink()

    os.mkfifo(skill / "pipe")  # read, it would hang the command
    assert "pipe in " in load_error(folder) and "is not a regular file" in load_error(folder)
    (skill / "pipe").unlink()

    (skill / "big.bin").write_bytes(b"\0" * (512 * 1024))
    assert "hold more than 524288 bytes" in load_error(folder)
    (skill / "big.bin").unlink()

    (skill / "inside-link.md").unlink()
    (skill / "SKILL.md").unlink()
    assert load_error(folder) == f"{folder / 'reviewer.yaml'}:15: skills[0]: a skill needs a SKILL.md"
    (folder / "reviewer.yaml").write_text(REVIEWER.replace("./skills/release-notes", "./skills/missing"))
    assert "cannot read the directory" in load_error(folder) and "No such file or directory" in load_error(folder)


def load_error(folder: Path) -> str:
    with pytest.raises(AgentFileError) as raised:
        agent_files.load(folder / "reviewer.yaml")
    return str(raised.value)


def test_apply_of_a_bad_file_says_so_in_one_line_and_sends_nothing(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("name: good\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ntools:\n  enabled: [Bash]\n  allowed: [Read]\n")
    # Nothing listens on the target: reading the files fails first, before any call.
    result = subprocess.run(
        [sys.executable, "-m", "astrabox", "agents", "--target", "127.0.0.1:9", "apply", str(good), str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (f"astrabox: {bad}:4: tools: unknown key 'allowed'; valid keys: enabled, default, rules\n")
