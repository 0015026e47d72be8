"""What an agent definition (an AgentSpec) may hold, and its canonical form.

Two checks, both raising InvalidArgument with reason INVALID_AGENT_SPEC, the offending
field's path in the metadata (`spec.skills[1].files[0].path`) and a message that says what
is valid, quoting the bad value only through `validation.echo`:

- `check_shape`: every bound agent.proto documents (sizes, counts, names, enums that must be
  specified, SKILL.md present, safe relative skill paths, unique names), before any database
  or agent sees the definition;
- `check_against`: the engine's capability manifest, as the data-plane agents declared it: the
  engine is one of theirs, the permission mode one of its modes, every built-in tool the
  definition names one of its tools. The platform has no tool vocabulary of its own.

CreateSession's inline configuration goes through the same two checks (`field` names where
the spec sits in its request).

`canonical` is the form stored and digested: the deterministic serialization without unknown
fields, so that equal definitions have equal digests whatever client wrote them.
"""

from __future__ import annotations

import json
import math
import re
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import jsonschema

from astrabox.agents.v1 import agent_pb2
from astrabox.memory.v1 import memory_service_pb2 as memory_pb2
from controlplane import named_definitions, validation
from controlplane.engines import DEFAULT_ENGINE, EngineManifest
from controlplane.errors import InvalidArgument, NoAgentAvailable
from controlplane.validation import echo

INVALID_AGENT_SPEC = "INVALID_AGENT_SPEC"

MAX_SPEC_BYTES = 1024 * 1024
MAX_DESCRIPTION_BYTES = 1024
MAX_NAME_BYTES = 64  # engine, permission mode
MAX_SYSTEM_PROMPT_BYTES = 256 * 1024
MAX_ENABLED_TOOLS = 128
MAX_TOOL_RULES = 256
MAX_TOOL_NAME_BYTES = 256
MAX_MCP_SERVERS = 16
MAX_MCP_COMMAND_BYTES = 4096
MAX_MCP_ARGS = 64
MAX_MCP_ARG_BYTES = 4096
MAX_MCP_ENV = 64
MAX_MCP_ENV_VALUE_BYTES = 4096
MAX_MCP_URL_BYTES = 2048
MAX_SKILLS = 32
MAX_SKILL_FILES = 64
MAX_SKILL_BYTES = 512 * 1024
MAX_SKILL_PATH_BYTES = 256
MAX_TURN_TIMEOUT_SECONDS = 7 * 24 * 3600
MAX_CUSTOM_TOOLS = 32
MAX_CUSTOM_TOOL_DESCRIPTION_BYTES = 4096
MAX_CUSTOM_TOOL_SCHEMA_BYTES = 64 * 1024
# The MCP server the data-plane agent serves an agent's custom tools as (`mcp__client__<name>`).
CUSTOM_TOOLS_SERVER = "client"
MAX_SUBAGENTS = 16
# Memory stores an agent's sessions attach (controlplane.memory.sessions.MAX_ATTACHMENTS).
MAX_MEMORY = 4
SUBAGENTS_SERVER = "subagents"
SKILL_FILE = "SKILL.md"
# The prefix of the tools an MCP server offers (`mcp__<server>__<tool>`).
MCP_PREFIX = "mcp__"

_MCP_SERVER_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")
_SKILL_NAME = re.compile(r"[a-z][a-z0-9-]{0,63}")
_CUSTOM_TOOL_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_CREDENTIAL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_HEADER_NAME = re.compile(r"[A-Za-z0-9-]{1,64}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_POLICIES = frozenset(agent_pb2.ToolPolicy.values())


def refused(field: str, message: str) -> InvalidArgument:
    return InvalidArgument(field, message, INVALID_AGENT_SPEC)


@contextmanager
def _as_spec_error() -> Iterator[None]:
    """A check shared with other requests (the model's) refuses as the spec's."""
    try:
        yield
    except InvalidArgument as error:
        raise refused(error.metadata.get("field", ""), error.message) from None


def _size(value: str) -> int:
    return len(value.encode("utf-8", "surrogatepass"))


def _text(field: str, value: str, max_bytes: int, printable: bool = False) -> None:
    """At most `max_bytes` of UTF-8, no NUL; `printable`: no control character at all."""
    if _size(value) > max_bytes:
        raise refused(field, f"{field} must be at most {max_bytes} bytes, got {_size(value)}")
    if "\x00" in value or (printable and _CONTROL.search(value)):
        what = "control characters" if printable else "NUL characters"
        raise refused(field, f"{field} must not contain {what}, got {echo(value)}")


def _name(field: str, value: str, pattern: re.Pattern[str], explain: str) -> None:
    if not pattern.fullmatch(value):
        raise refused(field, f"{field} must be {explain}, got {echo(value)}")


def _count(field: str, values: Sequence[object] | Mapping[str, str], most: int) -> None:
    if len(values) > most:
        raise refused(field, f"{field} may have at most {most} entries, got {len(values)}")


def _unique(field: str, values: Sequence[str], what: str) -> None:
    seen: set[str] = set()
    for index, value in enumerate(values):
        if value in seen:
            raise refused(f"{field}[{index}]", f"{what} {echo(value)} appears twice in {field}")
        seen.add(value)


def check_shape(spec: agent_pb2.AgentSpec, field: str = "spec") -> None:
    """Every bound agent.proto documents, field by field; the first one broken is raised."""
    if (size := spec.ByteSize()) > MAX_SPEC_BYTES:
        raise refused(field, f"{field} must be at most {MAX_SPEC_BYTES} bytes in all (1 MiB), got {size}")
    _text(f"{field}.description", spec.description, MAX_DESCRIPTION_BYTES)
    _text(f"{field}.engine", spec.engine, MAX_NAME_BYTES, printable=True)
    _text(f"{field}.permission_mode", spec.permission_mode, MAX_NAME_BYTES, printable=True)
    with _as_spec_error():
        validation.FIELDS["model"](f"{field}.model", spec.model)
    if spec.HasField("system_prompt"):
        _system_prompt(f"{field}.system_prompt", spec.system_prompt)
    _tools(f"{field}.tools", spec.tools)
    _count(f"{field}.mcp_servers", spec.mcp_servers, MAX_MCP_SERVERS)
    for index, server in enumerate(spec.mcp_servers):
        _mcp_server(f"{field}.mcp_servers[{index}]", server)
    _unique(f"{field}.mcp_servers", [s.name for s in spec.mcp_servers], "the MCP server name")
    _count(f"{field}.skills", spec.skills, MAX_SKILLS)
    for index, skill in enumerate(spec.skills):
        _skill(f"{field}.skills[{index}]", skill)
    _unique(f"{field}.skills", [s.name for s in spec.skills], "the skill name")
    _limits(f"{field}.limits", spec.limits)
    _count(f"{field}.custom_tools", spec.custom_tools, MAX_CUSTOM_TOOLS)
    for index, tool in enumerate(spec.custom_tools):
        _custom_tool(f"{field}.custom_tools[{index}]", tool)
    _unique(f"{field}.custom_tools", [t.name for t in spec.custom_tools], "the custom tool name")
    if spec.custom_tools:
        for index, server in enumerate(spec.mcp_servers):
            if server.name == CUSTOM_TOOLS_SERVER:
                raise refused(
                    f"{field}.mcp_servers[{index}].name",
                    f"an agent with custom tools serves them as the MCP server {CUSTOM_TOOLS_SERVER!r}:"
                    " name its own MCP server otherwise",
                )
    _subagents(field, spec)
    _memory(field, spec)


def _memory(field: str, spec: agent_pb2.AgentSpec) -> None:
    _count(f"{field}.memory", spec.memory, MAX_MEMORY)
    for index, attachment in enumerate(spec.memory):
        where = f"{field}.memory[{index}]"
        try:
            named_definitions.ref("memory store", attachment.store, f"{where}.store")
        except InvalidArgument as error:
            raise refused(f"{where}.store", error.message) from None
        if attachment.mode not in (memory_pb2.MEMORY_MODE_READ_ONLY, memory_pb2.MEMORY_MODE_READ_WRITE):
            raise refused(f"{where}.mode", f"{where}.mode must be MEMORY_MODE_READ_ONLY or MEMORY_MODE_READ_WRITE")
    _unique(f"{field}.memory", [a.store for a in spec.memory], "the memory store")


def _subagents(field: str, spec: agent_pb2.AgentSpec) -> None:
    _count(f"{field}.subagents", spec.subagents, MAX_SUBAGENTS)
    for index, sub in enumerate(spec.subagents):
        where = f"{field}.subagents[{index}]"
        _name(
            f"{where}.agent",
            sub.agent,
            named_definitions.NAME,
            "an agent's name: 1-64 characters of [a-z0-9-], starting with a letter",
        )
        if sub.version < 0:
            raise refused(f"{where}.version", f"{where}.version must be 0 (the newest) or a version, got {sub.version}")
        _text(f"{where}.description", sub.description, MAX_CUSTOM_TOOL_DESCRIPTION_BYTES)
    _unique(f"{field}.subagents", [s.agent for s in spec.subagents], "the sub-agent")
    if spec.subagents:
        for index, server in enumerate(spec.mcp_servers):
            if server.name == SUBAGENTS_SERVER:
                raise refused(
                    f"{field}.mcp_servers[{index}].name",
                    f"an agent with sub-agents offers them as the MCP server {SUBAGENTS_SERVER!r}:"
                    " name its own MCP server otherwise",
                )


def _custom_tool(field: str, tool: agent_pb2.CustomTool) -> None:
    _name(f"{field}.name", tool.name, _CUSTOM_TOOL_NAME, "1-64 characters of [a-z0-9_], starting with a letter")
    _text(f"{field}.description", tool.description, MAX_CUSTOM_TOOL_DESCRIPTION_BYTES)
    schema_field = f"{field}.input_schema_json"
    _text(schema_field, tool.input_schema_json, MAX_CUSTOM_TOOL_SCHEMA_BYTES)
    schema = input_schema(schema_field, tool.input_schema_json)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as error:
        where = "/".join(str(part) for part in error.absolute_path) or "(top)"
        raise refused(
            schema_field, f"{schema_field} is not a valid JSON Schema at {echo(where)}: {echo(error.message)}"
        ) from None
    except RecursionError:
        raise refused(schema_field, f"{schema_field} is nested too deeply") from None


def input_schema(field: str, text: str) -> dict[str, Any]:
    """A custom tool's input schema: a JSON object whose "type" is "object" (a tool's input is one)."""
    try:
        schema = json.loads(text)
    except RecursionError:
        raise refused(field, f"{field} is nested too deeply") from None
    except ValueError as error:
        raise refused(field, f"{field} must be a JSON Schema (a JSON object): {echo(str(error))}") from None
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise refused(field, f'{field} must be a JSON object with "type": "object" (a tool\'s input is an object)')
    return schema


def _system_prompt(field: str, prompt: agent_pb2.SystemPrompt) -> None:
    which = prompt.WhichOneof("prompt")
    if which is None:
        raise refused(field, f"{field} must set append or replace (or be left unset to keep the engine's own)")
    _text(f"{field}.{which}", getattr(prompt, which), MAX_SYSTEM_PROMPT_BYTES)


def _policy(field: str, value: int, required: bool) -> None:
    if value not in _POLICIES or (required and value == agent_pb2.TOOL_POLICY_UNSPECIFIED):
        valid = [agent_pb2.ToolPolicy.Name(v) for v in sorted(_POLICIES) if v or not required]
        raise refused(field, f"{field} must be one of {', '.join(valid)}, got {value}")


def _tools(field: str, tools: agent_pb2.Tools) -> None:
    _count(f"{field}.enabled", tools.enabled, MAX_ENABLED_TOOLS)
    for index, tool in enumerate(tools.enabled):
        _tool_name(f"{field}.enabled[{index}]", tool)
    _unique(f"{field}.enabled", tools.enabled, "the tool")
    _count(f"{field}.rules", tools.rules, MAX_TOOL_RULES)
    for index, rule in enumerate(tools.rules):
        _tool_name(f"{field}.rules[{index}].tool", rule.tool)
        _policy(f"{field}.rules[{index}].policy", rule.policy, required=True)
    _policy(f"{field}.default_policy", tools.default_policy, required=False)


def _tool_name(field: str, value: str) -> None:
    if not value:
        raise refused(field, f"{field} must name a tool")
    _text(field, value, MAX_TOOL_NAME_BYTES, printable=True)


def _mcp_server(field: str, server: agent_pb2.McpServer) -> None:
    _name(f"{field}.name", server.name, _MCP_SERVER_NAME, "1-64 characters of [a-z0-9_-], starting with a letter")
    transport = server.WhichOneof("transport")
    if transport == "stdio":
        _stdio_server(f"{field}.stdio", server.stdio)
    elif transport == "http":
        _http_server(f"{field}.http", server.http)
    else:
        raise refused(f"{field}.stdio", f"{field} must say how the engine reaches it: set stdio or http")
    _count(f"{field}.enabled_tools", server.enabled_tools, MAX_ENABLED_TOOLS)
    for index, tool in enumerate(server.enabled_tools):
        _tool_name(f"{field}.enabled_tools[{index}]", tool)
    _unique(f"{field}.enabled_tools", server.enabled_tools, "the tool")


def _stdio_server(field: str, stdio: agent_pb2.StdioMcpServer) -> None:
    if not stdio.command:
        raise refused(f"{field}.command", f"{field}.command must name the program to run")
    _text(f"{field}.command", stdio.command, MAX_MCP_COMMAND_BYTES)
    _count(f"{field}.args", stdio.args, MAX_MCP_ARGS)
    for index, arg in enumerate(stdio.args):
        _text(f"{field}.args[{index}]", arg, MAX_MCP_ARG_BYTES)
    _count(f"{field}.env", stdio.env, MAX_MCP_ENV)
    for key in sorted(stdio.env):
        _name(f"{field}.env", key, _ENV_NAME, "keyed by environment variable names ([A-Za-z_][A-Za-z0-9_]*)")
        _text(f"{field}.env[{echo(key)}]", stdio.env[key], MAX_MCP_ENV_VALUE_BYTES)


def _http_server(field: str, http: agent_pb2.HttpMcpServer) -> None:
    """An http(s) URL with a host and no user information (a secret there would be in the definition,
    the journal and the agent's requests' logs), a credential's name, a header's name."""
    if _size(http.url) > MAX_MCP_URL_BYTES:
        raise refused(f"{field}.url", f"{field}.url must be at most {MAX_MCP_URL_BYTES} bytes, got {_size(http.url)}")
    if "@" in http.url.split("?", 1)[0].split("#", 1)[0]:
        # Not echoed: what stands before the host may be a secret.
        raise refused(
            f"{field}.url", f"{field}.url must not carry user information; name a credential in {field}.credential"
        )
    _text(f"{field}.url", http.url, MAX_MCP_URL_BYTES, printable=True)
    try:
        url = urllib.parse.urlsplit(http.url)
        url.port  # noqa: B018 - raises ValueError for a port that is not one
    except ValueError:
        url = urllib.parse.urlsplit("")
    if url.scheme not in ("http", "https") or not url.hostname:
        raise refused(f"{field}.url", f"{field}.url must be an http or https URL with a host, got {echo(http.url)}")
    if http.credential:
        _name(f"{field}.credential", http.credential, _CREDENTIAL_NAME, "1-64 characters of [A-Za-z0-9_.-]")
    if http.header:
        _name(f"{field}.header", http.header, _HEADER_NAME, "an HTTP header name: 1-64 characters of [A-Za-z0-9-]")


def _skill(field: str, skill: agent_pb2.Skill) -> None:
    _name(f"{field}.name", skill.name, _SKILL_NAME, "1-64 characters of [a-z0-9-], starting with a letter")
    _count(f"{field}.files", skill.files, MAX_SKILL_FILES)
    total = 0
    for index, file in enumerate(skill.files):
        skill_path(f"{field}.files[{index}].path", file.path)
        total += len(file.content)
    if total > MAX_SKILL_BYTES:
        raise refused(f"{field}.files", f"{field}.files must be at most {MAX_SKILL_BYTES} bytes in all, got {total}")
    paths = [file.path for file in skill.files]
    _unique(f"{field}.files", paths, "the path")
    if SKILL_FILE not in paths:
        raise refused(f"{field}.files", f"{field}.files must include {SKILL_FILE} (the skill's description)")
    directories = {"/".join(parts[:end]) for parts in (p.split("/") for p in paths) for end in range(1, len(parts))}
    for index, path in enumerate(paths):
        if path in directories:
            raise refused(f"{field}.files[{index}].path", f"{echo(path)} is a file and a directory of other files")


def skill_path(field: str, value: str) -> None:
    """A path inside a skill's directory: relative, at most MAX_SKILL_PATH_BYTES, no empty, '.' or
    '..' part, no backslash and no control character (the files are written into a sandbox)."""
    _text(field, value, MAX_SKILL_PATH_BYTES, printable=True)
    parts = value.split("/")
    if not value or value.startswith("/") or "\\" in value or any(p in ("", ".", "..") for p in parts):
        raise refused(
            field,
            f"{field} must be a relative path inside the skill's directory (no leading '/', no empty,"
            f" '.' or '..' part, no backslash), got {echo(value)}",
        )


def _limits(field: str, limits: agent_pb2.Limits) -> None:
    if limits.max_turns < 0:
        raise refused(f"{field}.max_turns", f"{field}.max_turns must be 0 (no limit) or more, got {limits.max_turns}")
    for name in ("max_cost_usd_per_turn", "max_cost_usd_per_session"):
        value = getattr(limits, name)
        if not math.isfinite(value) or value < 0:
            raise refused(f"{field}.{name}", f"{field}.{name} must be 0 (no limit) or a positive amount, got {value}")
    if limits.max_cost_usd_per_turn:
        # Refused rather than ignored: nothing could hold it (claude_options.py says why).
        raise refused(
            f"{field}.max_cost_usd_per_turn",
            f"{field}.max_cost_usd_per_turn is not supported yet: the engine tells a turn's cost only when the turn"
            " has ended, so no turn can be stopped at a budget. Bound the session's cost with"
            " max_cost_usd_per_session and each turn with max_turns and turn_timeout",
        )
    timeout = limits.turn_timeout
    if (
        timeout.seconds < 0
        or not 0 <= timeout.nanos <= 999_999_999
        or timeout.seconds + (timeout.nanos > 0) > MAX_TURN_TIMEOUT_SECONDS
    ):
        raise refused(
            f"{field}.turn_timeout",
            f"{field}.turn_timeout must be between 0 (no limit) and {MAX_TURN_TIMEOUT_SECONDS} seconds (7 days),"
            f" got {timeout.seconds}s {timeout.nanos}ns",
        )


def check_against(
    spec: agent_pb2.AgentSpec, manifests: Mapping[str, EngineManifest], field: str = "spec"
) -> EngineManifest:
    """The manifest of the spec's engine, once the spec names only what it offers.

    `manifests` are the engines the data-plane agents declared, by kind; none at all is
    NoAgentAvailable (there is nothing to check the definition against yet)."""
    engine = spec.engine or DEFAULT_ENGINE
    manifest = manifests.get(engine)
    if manifest is None:
        if not manifests:
            raise NoAgentAvailable(
                f"no data-plane agent has declared engine {engine} yet, so the definition cannot be checked"
                " against what it offers; start one with `astrabox agent`"
            )
        raise refused(f"{field}.engine", f"unknown engine {echo(engine)}; agents run: {', '.join(sorted(manifests))}")
    if spec.permission_mode and spec.permission_mode not in manifest.permission_modes:
        raise refused(
            f"{field}.permission_mode",
            f"unknown permission mode {echo(spec.permission_mode)} for {engine};"
            f" valid: {', '.join(manifest.permission_modes)}",
        )
    for index, tool in enumerate(spec.tools.enabled):
        _built_in(f"{field}.tools.enabled[{index}]", tool, manifest)
    for index, rule in enumerate(spec.tools.rules):
        if names_built_in_tool(rule.tool):
            _built_in(f"{field}.tools.rules[{index}].tool", rule.tool, manifest)
    return manifest


def names_built_in_tool(pattern: str) -> bool:
    """A rule's `tool` names one built-in tool when it is no pattern and no MCP tool."""
    return "*" not in pattern and not pattern.startswith(MCP_PREFIX)


def _built_in(field: str, tool: str, manifest: EngineManifest) -> None:
    if tool in manifest.tools:
        return
    if not manifest.tools:
        raise refused(field, f"{manifest.kind} takes no tool configuration (its agents declare no built-in tools)")
    raise refused(
        field,
        f"unknown tool {echo(tool)} for {manifest.kind}; its built-in tools: {', '.join(sorted(manifest.tools))}"
        f" (MCP tools are named {MCP_PREFIX}<server>__<tool>)",
    )


def canonical(spec: agent_pb2.AgentSpec) -> bytes:
    """The form a spec is stored and compared in (`named_definitions.canonical`)."""
    return named_definitions.canonical(spec)


digest = named_definitions.digest
