"""Agent files: the YAML an agent definition is written in, read by `astrabox agents apply` and
written by `astrabox agents show`.

    name: reviewer                                  # required; the rest is the AgentSpec
    description: Reviews pull requests
    engine: claude_code
    model: claude-sonnet-4-5
    permission_mode: default
    system_prompt: {append: "You review code."}     # or {replace: "..."}
    tools:
      enabled: [Bash, Read, Edit, WebFetch]
      default: ask                                  # allow | ask | deny
      rules: [{tool: Read, policy: allow}, {tool: "mcp__docs__*", policy: allow}]
    mcp_servers:
      - name: docs
        stdio: {command: python3, args: [/workspace/docs_mcp.py], env: {LOG: "1"}}
        enabled_tools: [search]
      - name: tickets                               # reached by the data-plane agent, not the sandbox
        http: {url: "https://mcp.example/mcp", credential: tickets-token}   # header: Authorization
    skills:
      - name: release-notes
        path: ./skills/release-notes                # a directory, relative to the file: all its files
      - name: inline
        files: [{path: SKILL.md, content: "..."}]   # or content_base64: for bytes that are not text
    limits: {max_turns: 20, max_cost_usd_per_session: 20, turn_timeout: 30m}
    custom_tools:                                   # run by the client; the model calls mcp__client__<name>
      - name: lookup_order
        description: Looks an order up by its id
        input_schema: {type: object, properties: {order_id: {type: string}}, required: [order_id]}
    subagents:                                      # agents it may call: mcp__subagents__<agent> {prompt}
      - {agent: linter, version: 2, description: Lints a change}   # version: 0 or absent, the newest
    memory:                                         # stores its sessions attach, unless a session names its own
      - {store: team-notes, mode: read-write}       # or read-only; /home/agent/memory/<store>/ in the sandbox

A file holds one agent per YAML document (separated by `---`). Reading is strict, so that a typo is
an error before anything reaches the server rather than a setting silently left out: an unknown or
repeated key, a value of the wrong type, a count or size over the contract's limits (agent.proto)
is an `AgentFileError` naming the file, the line, the key and what is valid there. A key whose
value is empty (`skills:`) is as good as absent.

Skill directories are read without following a symbolic link out of the directory, and with no
special file (a FIFO would hang the read). `dump` writes skills inline (`files:`), so what `show`
prints applies again to the same definition.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from google.protobuf import duration_pb2

from astrabox._yaml_nodes import Dumper, YamlNodes, parse_file, read_file
from astrabox.agents.v1 import agent_pb2
from astrabox.errors import AgentFileError
from astrabox.memory.v1 import memory_service_pb2 as memory_pb2
from astrabox.skill_directories import MAX_SKILL_BYTES, MAX_SKILL_FILES, MAX_SKILL_PATH_BYTES, read_skill_directory

__all__ = ["AgentFile", "dump", "load", "parse"]

# The contract's limits (agent.proto), checked here so that a file over one says so with its line.
MAX_SPEC_BYTES = 1 << 20
MAX_DESCRIPTION_BYTES = 1024
MAX_SYSTEM_PROMPT_BYTES = 256 * 1024
MAX_ENABLED_TOOLS = 128
MAX_RULES = 256
MAX_TOOL_BYTES = 256
MAX_MCP_SERVERS = 16
MAX_COMMAND_BYTES = 4096
MAX_URL_BYTES = 2048
MAX_ARGS = 64
MAX_ARG_BYTES = 4096
MAX_ENV = 64
MAX_SKILLS = 32
MAX_CUSTOM_TOOLS = 32
MAX_SUBAGENTS = 16
MAX_MEMORY = 4
# AgentSpec.memory's modes by the names an agent file gives them.
MEMORY_MODES = {"read-only": memory_pb2.MEMORY_MODE_READ_ONLY, "read-write": memory_pb2.MEMORY_MODE_READ_WRITE}
MAX_CUSTOM_TOOL_DESCRIPTION_BYTES = 4096
MAX_CUSTOM_TOOL_SCHEMA_BYTES = 64 * 1024
MAX_DURATION_SECONDS = 315_576_000_000  # google.protobuf.Duration's

_AGENT_NAME = re.compile(r"[a-z][a-z0-9-]{0,63}")
_MCP_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")
_CUSTOM_TOOL_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNITS = {"h": Decimal(3600), "m": Decimal(60), "s": Decimal(1), "ms": Decimal("0.001")}
_POLICIES = {
    "allow": agent_pb2.TOOL_POLICY_ALLOW,
    "ask": agent_pb2.TOOL_POLICY_ASK,
    "deny": agent_pb2.TOOL_POLICY_DENY,
}
_TOP = (
    "name",
    "description",
    "engine",
    "model",
    "permission_mode",
    "system_prompt",
    "tools",
    "mcp_servers",
    "skills",
    "limits",
    "custom_tools",
    "subagents",
    "memory",
)


@dataclass(frozen=True, slots=True)
class AgentFile:
    """One agent of a file: its name, its definition, and where it was written ("FILE:LINE")."""

    name: str
    spec: agent_pb2.AgentSpec
    source: str


def load(path: str | os.PathLike[str]) -> list[AgentFile]:
    """The agents of the file at `path`, in order; its skill directories are relative to the file."""
    path = Path(path)
    text = read_file(path, AgentFileError)
    return parse(text, source=str(path), base_dir=path.parent)


def parse(text: str, *, source: str = "<agent file>", base_dir: str | os.PathLike[str] = ".") -> list[AgentFile]:
    """The agents of `text` (an agent file's content), named `source` in errors; skill directories
    are relative to `base_dir`."""
    return parse_file(
        text, source, AgentFileError, "agent", lambda loader: _Reader(source, Path(base_dir), loader).agent
    )


class _Reader:
    """Reads the composed YAML nodes of one file into AgentSpecs, each value checked at its line."""

    def __init__(self, source: str, base_dir: Path, loader: yaml.SafeLoader) -> None:
        self._source = source
        self._base_dir = base_dir
        self._loader = loader
        self._nodes = YamlNodes(source, loader, AgentFileError, "agent")

    def agent(self, node: yaml.Node) -> AgentFile:
        fields = self._nodes.mapping(node, "", _TOP, required=("name",))
        name = self._nodes.text(fields["name"], "name")
        if not _AGENT_NAME.fullmatch(name):
            self._nodes.fail(
                fields["name"], "name", f"{name!r} is not 1-64 characters of a-z, 0-9 and -, starting with a letter"
            )
        spec = agent_pb2.AgentSpec()
        for key in ("engine", "model", "permission_mode"):
            if key in fields:
                setattr(spec, key, self._nodes.text(fields[key], key))
        if "description" in fields:
            spec.description = self._nodes.text(fields["description"], "description", most=MAX_DESCRIPTION_BYTES)
        if "system_prompt" in fields:
            self._system_prompt(fields["system_prompt"], spec.system_prompt)
        if "tools" in fields:
            self._tools(fields["tools"], spec.tools)
        if "mcp_servers" in fields:
            servers = self._nodes.sequence(fields["mcp_servers"], "mcp_servers", most=MAX_MCP_SERVERS)
            for i, server in enumerate(servers):
                self._mcp_server(server, f"mcp_servers[{i}]", spec.mcp_servers.add())
            self._nodes.unique(servers, [s.name for s in spec.mcp_servers], "mcp_servers")
        if "skills" in fields:
            skills = self._nodes.sequence(fields["skills"], "skills", most=MAX_SKILLS)
            for i, skill in enumerate(skills):
                self._skill(skill, f"skills[{i}]", spec.skills.add())
            self._nodes.unique(skills, [s.name for s in spec.skills], "skills")
        if "limits" in fields:
            self._limits(fields["limits"], spec.limits)
        if "custom_tools" in fields:
            tools = self._nodes.sequence(fields["custom_tools"], "custom_tools", most=MAX_CUSTOM_TOOLS)
            for i, tool in enumerate(tools):
                self._custom_tool(tool, f"custom_tools[{i}]", spec.custom_tools.add())
            self._nodes.unique(tools, [t.name for t in spec.custom_tools], "custom_tools")
        if "subagents" in fields:
            subagents = self._nodes.sequence(fields["subagents"], "subagents", most=MAX_SUBAGENTS)
            for i, sub in enumerate(subagents):
                self._subagent(sub, f"subagents[{i}]", spec.subagents.add())
            self._nodes.unique(subagents, [s.agent for s in spec.subagents], "subagents")
        if "memory" in fields:
            stores = self._nodes.sequence(fields["memory"], "memory", most=MAX_MEMORY)
            for i, attached in enumerate(stores):
                self._memory(attached, f"memory[{i}]", spec.memory.add())
            self._nodes.unique(stores, [m.store for m in spec.memory], "memory")
        if (size := spec.ByteSize()) > MAX_SPEC_BYTES:
            self._nodes.fail(node, name, f"the definition is {size} bytes, over the limit of {MAX_SPEC_BYTES} (1 MiB)")
        return AgentFile(name, spec, self._nodes.where(node))

    def _system_prompt(self, node: yaml.Node, prompt: agent_pb2.SystemPrompt) -> None:
        fields = self._nodes.mapping(node, "system_prompt", ("append", "replace"))
        if len(fields) != 1:
            self._nodes.fail(node, "system_prompt", "give exactly one of append or replace")
        [(key, value)] = fields.items()
        setattr(prompt, key, self._nodes.text(value, f"system_prompt.{key}", most=MAX_SYSTEM_PROMPT_BYTES))

    def _tools(self, node: yaml.Node, tools: agent_pb2.Tools) -> None:
        fields = self._nodes.mapping(node, "tools", ("enabled", "default", "rules"))
        tools.SetInParent()
        if "enabled" in fields:
            tools.enabled.extend(self._nodes.texts(fields["enabled"], "tools.enabled", most=MAX_ENABLED_TOOLS))
        if "default" in fields:
            tools.default_policy = self._policy(fields["default"], "tools.default")
        if "rules" in fields:
            for i, rule_node in enumerate(self._nodes.sequence(fields["rules"], "tools.rules", most=MAX_RULES)):
                what = f"tools.rules[{i}]"
                rule = self._nodes.mapping(rule_node, what, ("tool", "policy"), required=("tool", "policy"))
                tools.rules.add(
                    tool=self._nodes.text(rule["tool"], f"{what}.tool", most=MAX_TOOL_BYTES, empty=False),
                    policy=self._policy(rule["policy"], f"{what}.policy"),
                )

    def _mcp_server(self, node: yaml.Node, what: str, server: agent_pb2.McpServer) -> None:
        fields = self._nodes.mapping(node, what, ("name", "stdio", "http", "enabled_tools"), required=("name",))
        server.name = self._nodes.text(fields["name"], f"{what}.name")
        if not _MCP_NAME.fullmatch(server.name):
            self._nodes.fail(
                fields["name"],
                f"{what}.name",
                f"{server.name!r} is not 1-64 characters of a-z, 0-9, _ and -, starting with a letter",
            )
        if ("stdio" in fields) == ("http" in fields):
            self._nodes.fail(node, what, "must have one of 'stdio' (a program in the sandbox) or 'http' (a URL)")
        if "http" in fields:
            http = self._nodes.mapping(
                fields["http"], f"{what}.http", ("url", "credential", "header"), required=("url",)
            )
            server.http.url = self._nodes.text(http["url"], f"{what}.http.url", most=MAX_URL_BYTES, empty=False)
            if "credential" in http:
                server.http.credential = self._nodes.text(http["credential"], f"{what}.http.credential")
            if "header" in http:
                server.http.header = self._nodes.text(http["header"], f"{what}.http.header")
        else:
            self._stdio(fields["stdio"], what, server)
        if "enabled_tools" in fields:
            server.enabled_tools.extend(
                self._nodes.texts(fields["enabled_tools"], f"{what}.enabled_tools", most=MAX_ENABLED_TOOLS)
            )

    def _stdio(self, node: yaml.Node, what: str, server: agent_pb2.McpServer) -> None:
        stdio = self._nodes.mapping(node, f"{what}.stdio", ("command", "args", "env"), required=("command",))
        server.stdio.command = self._nodes.text(
            stdio["command"], f"{what}.stdio.command", most=MAX_COMMAND_BYTES, empty=False
        )
        if "args" in stdio:
            server.stdio.args.extend(
                self._nodes.texts(stdio["args"], f"{what}.stdio.args", most=MAX_ARGS, each_most=MAX_ARG_BYTES)
            )
        if "env" in stdio:
            env = self._nodes.mapping(stdio["env"], f"{what}.stdio.env", None)
            if len(env) > MAX_ENV:
                self._nodes.fail(
                    stdio["env"], f"{what}.stdio.env", f"{len(env)} variables, over the limit of {MAX_ENV}"
                )
            for key, value in env.items():
                server.stdio.env[key] = self._nodes.text(value, f"{what}.stdio.env.{key}")

    def _subagent(self, node: yaml.Node, what: str, sub: agent_pb2.SubAgent) -> None:
        fields = self._nodes.mapping(node, what, ("agent", "version", "description"), required=("agent",))
        sub.agent = self._nodes.text(fields["agent"], f"{what}.agent", most=64, empty=False)
        if "version" in fields:
            sub.version = self._nodes.count(fields["version"], f"{what}.version")
        if "description" in fields:
            sub.description = self._nodes.text(
                fields["description"], f"{what}.description", most=MAX_CUSTOM_TOOL_DESCRIPTION_BYTES
            )

    def _memory(self, node: yaml.Node, what: str, attachment: memory_pb2.MemoryAttachment) -> None:
        fields = self._nodes.mapping(node, what, ("store", "mode"), required=("store", "mode"))
        attachment.store = self._nodes.text(fields["store"], f"{what}.store", most=128, empty=False)
        mode = self._nodes.text(fields["mode"], f"{what}.mode")
        if mode not in MEMORY_MODES:
            self._nodes.fail(fields["mode"], f"{what}.mode", f"must be one of {', '.join(MEMORY_MODES)}, not {mode!r}")
        attachment.mode = MEMORY_MODES[mode]

    def _custom_tool(self, node: yaml.Node, what: str, tool: agent_pb2.CustomTool) -> None:
        fields = self._nodes.mapping(
            node, what, ("name", "description", "input_schema"), required=("name", "input_schema")
        )
        tool.name = self._nodes.text(fields["name"], f"{what}.name")
        if not _CUSTOM_TOOL_NAME.fullmatch(tool.name):
            self._nodes.fail(
                fields["name"],
                f"{what}.name",
                f"{tool.name!r} is not 1-64 characters of a-z, 0-9 and _, starting with a letter",
            )
        if "description" in fields:
            tool.description = self._nodes.text(
                fields["description"], f"{what}.description", most=MAX_CUSTOM_TOOL_DESCRIPTION_BYTES
            )
        schema_node = fields["input_schema"]
        if not isinstance(schema_node, yaml.MappingNode):
            self._nodes.fail(
                schema_node, f"{what}.input_schema", "must be a mapping: the JSON Schema of the tool's input"
            )
        schema = self._loader.construct_object(schema_node, deep=True)
        try:
            # Compact, so that applying the same file twice makes one version.
            tool.input_schema_json = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
        except (TypeError, ValueError) as error:
            self._nodes.fail(schema_node, f"{what}.input_schema", f"is not JSON ({error}): quote dates and the like")
        if (size := len(tool.input_schema_json.encode())) > MAX_CUSTOM_TOOL_SCHEMA_BYTES:
            self._nodes.fail(
                schema_node,
                f"{what}.input_schema",
                f"{size} bytes as JSON, over the limit of {MAX_CUSTOM_TOOL_SCHEMA_BYTES}",
            )

    def _skill(self, node: yaml.Node, what: str, skill: agent_pb2.Skill) -> None:
        fields = self._nodes.mapping(node, what, ("name", "path", "files"), required=("name",))
        skill.name = self._nodes.text(fields["name"], f"{what}.name")
        if not _AGENT_NAME.fullmatch(skill.name):
            self._nodes.fail(
                fields["name"],
                f"{what}.name",
                f"{skill.name!r} is not 1-64 characters of a-z, 0-9 and -, starting with a letter",
            )
        if ("path" in fields) == ("files" in fields):
            self._nodes.fail(node, what, "give exactly one of path (a directory) or files")
        if "path" in fields:
            directory = self._base_dir / os.path.expanduser(self._nodes.text(fields["path"], f"{what}.path"))
            try:
                skill.files.extend(read_skill_directory(directory))
            except AgentFileError as error:
                self._nodes.fail(fields["path"], f"{what}.path", str(error))
        else:
            file_nodes = self._nodes.sequence(fields["files"], f"{what}.files", most=MAX_SKILL_FILES)
            for i, file_node in enumerate(file_nodes):
                self._skill_file(file_node, f"{what}.files[{i}]", skill.files.add())
            self._nodes.unique(file_nodes, [f.path for f in skill.files], f"{what}.files")
        if "SKILL.md" not in (f.path for f in skill.files):
            self._nodes.fail(node, what, "a skill needs a SKILL.md")
        if (size := sum(len(f.content) for f in skill.files)) > MAX_SKILL_BYTES:
            self._nodes.fail(node, what, f"its files hold {size} bytes, over the limit of {MAX_SKILL_BYTES} (512 KiB)")

    def _skill_file(self, node: yaml.Node, what: str, file: agent_pb2.SkillFile) -> None:
        fields = self._nodes.mapping(node, what, ("path", "content", "content_base64"), required=("path",))
        file.path = self._nodes.text(fields["path"], f"{what}.path", most=MAX_SKILL_PATH_BYTES)
        if problem := _bad_skill_path(file.path):
            self._nodes.fail(fields["path"], f"{what}.path", problem)
        if ("content" in fields) == ("content_base64" in fields):
            self._nodes.fail(node, what, "give exactly one of content or content_base64")
        if "content" in fields:
            file.content = self._nodes.text(fields["content"], f"{what}.content").encode()
        else:
            try:
                file.content = base64.b64decode(self._nodes.text(fields["content_base64"], what), validate=True)
            except ValueError:
                self._nodes.fail(fields["content_base64"], f"{what}.content_base64", "not base64")

    def _limits(self, node: yaml.Node, limits: agent_pb2.Limits) -> None:
        keys = ("max_turns", "max_cost_usd_per_turn", "max_cost_usd_per_session", "turn_timeout")
        fields = self._nodes.mapping(node, "limits", keys)
        limits.SetInParent()
        if "max_turns" in fields:
            limits.max_turns = self._nodes.count(fields["max_turns"], "limits.max_turns")
        for key in ("max_cost_usd_per_turn", "max_cost_usd_per_session"):
            if key in fields:
                setattr(limits, key, self._dollars(fields[key], f"limits.{key}"))
        if "turn_timeout" in fields:
            limits.turn_timeout.CopyFrom(self._duration(fields["turn_timeout"], "limits.turn_timeout"))

    # Values

    def _dollars(self, node: yaml.Node, what: str) -> float:
        value = float(self._nodes.scalar(node, what, ("int", "float"), "a number of dollars"))
        if not (math.isfinite(value) and value >= 0):
            self._nodes.fail(node, what, f"{value} is not a finite number of dollars, 0 or more")
        return value

    def _duration(self, node: yaml.Node, what: str) -> duration_pb2.Duration:
        value = self._nodes.scalar(node, what, ("str", "int", "float"), "a duration such as 90s, 30m or 1h30m")
        try:
            seconds = parse_duration(value)
        except ValueError as error:
            self._nodes.fail(node, what, str(error))
        if seconds > MAX_DURATION_SECONDS:
            self._nodes.fail(node, what, f"{value} is over the longest duration, {MAX_DURATION_SECONDS} seconds")
        duration = duration_pb2.Duration()
        whole = int(seconds)
        duration.seconds, duration.nanos = whole, int((seconds - whole) * 1_000_000_000)
        return duration

    def _policy(self, node: yaml.Node, what: str) -> agent_pb2.ToolPolicy:
        name = self._nodes.text(node, what)
        if name not in _POLICIES:
            self._nodes.fail(node, what, f"unknown policy {name!r}; valid: {', '.join(_POLICIES)}")
        return _POLICIES[name]


def parse_duration(value: str | int | float) -> Decimal:
    """Seconds of "90s", "30m", "1h30m", "1.5s", "500ms", or a plain number of seconds; 0 or more."""
    if isinstance(value, int | float):
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{value} is not a duration of 0 seconds or more")
        return Decimal(str(value))
    parts = list(_DURATION_PART.finditer(value))
    if not parts or "".join(part.group(0) for part in parts) != value:
        raise ValueError(f"{value!r} is not a duration such as 90s, 30m or 1h30m (units h, m, s, ms)")
    return sum((Decimal(part.group(1)) * _UNITS[part.group(2)] for part in parts), Decimal(0))


def format_duration(duration: duration_pb2.Duration) -> str:
    """A Duration as `parse_duration` reads it: "1h30m", "45s", "1.5s"."""
    seconds = Decimal(duration.seconds) + Decimal(duration.nanos) / 1_000_000_000
    hours, rest = divmod(seconds, 3600)
    minutes, rest = divmod(rest, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    if rest or not text:
        text += f"{rest.normalize():f}s"
    return text


def _bad_skill_path(path: str) -> str:
    """Why `path` cannot name a file of a skill; empty when it can."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(part in ("", ".", "..") for part in parts) or "\0" in path:
        return f"{path!r} is not a relative path inside the skill (no '..', '.', empty part or leading '/')"
    return ""


# Writing


def dump(name: str, spec: agent_pb2.AgentSpec) -> str:
    """The agent file of the agent `name` defined by `spec`: `parse` reads it back to the same spec."""
    document: dict[str, Any] = {"name": name}
    for key in ("description", "engine", "model", "permission_mode"):
        if value := getattr(spec, key):
            document[key] = value
    if spec.HasField("system_prompt"):
        which = spec.system_prompt.WhichOneof("prompt")
        document["system_prompt"] = {which: getattr(spec.system_prompt, which)} if which else {}
    if spec.HasField("tools"):
        document["tools"] = _tools_document(spec.tools)
    if spec.mcp_servers:
        document["mcp_servers"] = [_mcp_server_document(server) for server in spec.mcp_servers]
    if spec.skills:
        document["skills"] = [
            {"name": skill.name, "files": [_skill_file_document(file) for file in skill.files]} for skill in spec.skills
        ]
    if spec.HasField("limits"):
        document["limits"] = _limits_document(spec.limits)
    if spec.custom_tools:
        document["custom_tools"] = [_custom_tool_document(tool) for tool in spec.custom_tools]
    if spec.subagents:
        document["subagents"] = [
            {
                "agent": sub.agent,
                **({"version": sub.version} if sub.version else {}),
                **({"description": sub.description} if sub.description else {}),
            }
            for sub in spec.subagents
        ]
    if spec.memory:
        modes = {number: name for name, number in MEMORY_MODES.items()}
        document["memory"] = [{"store": m.store, "mode": modes.get(m.mode, str(m.mode))} for m in spec.memory]
    return yaml.dump(document, Dumper=Dumper, sort_keys=False, allow_unicode=True, width=100)


def _tools_document(tools: agent_pb2.Tools) -> dict[str, Any]:
    names = {number: name for name, number in _POLICIES.items()}
    document: dict[str, Any] = {}
    if tools.enabled:
        document["enabled"] = list(tools.enabled)
    if tools.default_policy:
        document["default"] = names[tools.default_policy]
    if tools.rules:
        document["rules"] = [{"tool": rule.tool, "policy": names[rule.policy]} for rule in tools.rules]
    return document


def _mcp_server_document(server: agent_pb2.McpServer) -> dict[str, Any]:
    document: dict[str, Any] = {"name": server.name}
    if server.WhichOneof("transport") == "http":
        http = {"url": server.http.url, "credential": server.http.credential, "header": server.http.header}
        document["http"] = {key: value for key, value in http.items() if value}
    else:
        stdio: dict[str, Any] = {"command": server.stdio.command}
        if server.stdio.args:
            stdio["args"] = list(server.stdio.args)
        if server.stdio.env:
            stdio["env"] = dict(sorted(server.stdio.env.items()))
        document["stdio"] = stdio
    if server.enabled_tools:
        document["enabled_tools"] = list(server.enabled_tools)
    return document


def _custom_tool_document(tool: agent_pb2.CustomTool) -> dict[str, Any]:
    document: dict[str, Any] = {"name": tool.name}
    if tool.description:
        document["description"] = tool.description
    try:
        document["input_schema"] = json.loads(tool.input_schema_json or "{}")
    except ValueError:  # the server checks it is JSON; an unreadable one is shown as it is
        document["input_schema"] = tool.input_schema_json
    return document


def _skill_file_document(file: agent_pb2.SkillFile) -> dict[str, Any]:
    try:
        return {"path": file.path, "content": file.content.decode()}
    except UnicodeDecodeError:
        return {"path": file.path, "content_base64": base64.b64encode(file.content).decode()}


def _limits_document(limits: agent_pb2.Limits) -> dict[str, Any]:
    document: dict[str, Any] = {}
    if limits.max_turns:
        document["max_turns"] = limits.max_turns
    for key in ("max_cost_usd_per_turn", "max_cost_usd_per_session"):
        if value := getattr(limits, key):
            document[key] = value
    if limits.HasField("turn_timeout"):
        document["turn_timeout"] = format_duration(limits.turn_timeout)
    return document
