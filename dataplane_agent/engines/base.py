"""The engine adapter contract.

An engine session is one engine process in one sandbox. It has a single output
stream (`outputs()`) carrying every SDK message in order, whether it belongs
to a user turn, a turn the engine started on its own, or background-task
lifecycle after a turn's result; the agent's runtime decides which turn an
output belongs to. Tool approvals reach a human through the
`InteractionBroker` given at start.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from dataplane_agent.engines.agent_config import AgentConfig
from dataplane_agent.sandboxes.base import Sandbox, SandboxDriver


class EngineError(Exception):
    """The engine could not be started or failed mid-turn."""


class PermissionModeRefused(EngineError):
    """The engine, still running, refused to switch to a permission mode (its settings forbid it):
    nothing was sent, and the engine goes on in the mode it was in."""


@dataclass(frozen=True, slots=True)
class EngineDelta:
    """A piece of a message the engine is still writing: live only, never stored.

    `kind` is "text", "tool_input" or "thinking"; `index` the content block's."""

    message_id: str
    index: int
    kind: str
    text: str


@dataclass(frozen=True, slots=True)
class McpUnavailable:
    """An MCP server of the session's agent that the engine runs without, and why (never holding a
    secret); the runtime reports it (McpServerUnavailable)."""

    server: str
    reason: str


@dataclass(frozen=True, slots=True)
class EngineOutput:
    """One message the engine's SDK produced, verbatim.

    `payload` holds every field of the SDK message (JSON-serialisable); it is
    data, the one dict that travels between modules. An output with `delta`
    set is a partial message: it goes to live watchers, never to the outbox. An output with
    `unavailable` set is no message of the SDK's but the engine's report that it runs without one
    of the agent's MCP servers (a stdio server that did not start): the runtime reports it
    (McpServerUnavailable), once per engine start.
    """

    type_name: str
    payload: dict[str, Any]
    delta: EngineDelta | None = None
    unavailable: McpUnavailable | None = None

    @property
    def ends_turn(self) -> bool:
        return self.type_name == "ResultMessage"


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """The engine asks whether it may use a tool (Claude's can_use_tool).

    `AskUserQuestion` arrives here too; its answers go back as an allow whose
    updated input carries them."""

    interaction_id: str
    tool_name: str
    input: dict[str, Any]
    tool_use_id: str
    # A call of one of the agent's custom tools (tool_name is its declared name): the client runs
    # it and answers with its result (ToolDecision.result); no approval, no tool grant applies.
    custom_tool: bool = False
    # A call of one of the agent's sub-agents (tool_name is the agent's name): the control plane
    # runs it as a child session and answers with its result, as a custom tool's.
    subagent: bool = False


@dataclass(frozen=True, slots=True)
class ToolDecision:
    allow: bool
    # For allow: replacement tool input; None keeps the original.
    updated_input: dict[str, Any] | None = None
    # For deny: what the engine is told.
    message: str = ""
    # For deny: also stop the turn (used when the turn is being interrupted).
    interrupt: bool = False
    # For a custom tool's call: what the client's tool returned (allow is then True).
    result: ToolResult | None = None


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A custom tool's result, as the client answered it: the text the model reads, and whether
    the tool failed."""

    content: str
    is_error: bool = False


class InteractionBroker(Protocol):
    async def ask(self, request: ToolRequest) -> ToolDecision:
        """Park until a human answers or the turn is settled otherwise."""


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How to start an engine session."""

    # The session's permission mode (never one turn's own): a restarted engine starts in it.
    permission_mode: str = ""
    model: str = ""
    # The engine's own conversation id to resume; empty starts a new one.
    resume_engine_session_id: str = ""
    # The engine's transcript of that conversation, restored into the sandbox
    # before resuming (a new sandbox has none); empty when the sandbox has it.
    transcript: bytes = b""
    # Variables the CLI needs (model base URL, key, telemetry switches).
    env: Mapping[str, str] = field(default_factory=dict)
    # Where tool approvals and questions go; None lets the permission mode decide alone.
    interactions: InteractionBroker | None = None
    # The session's agent: system prompt, tools and their policies, MCP servers, skills, limits.
    # The same for every engine of the session (the agent's state keeps it); the default: none.
    agent_config: AgentConfig = field(default_factory=AgentConfig)
    # The session the engine runs for, whose credentials its HTTP MCP servers are sent; empty for an
    # engine started ahead of any session (a warm one, which has no MCP server).
    session_id: str = ""


@dataclass(frozen=True, slots=True)
class EngineManifest:
    """What an engine can do, declared by its adapter; the agent's Hello carries it to the
    control plane, which validates requests against it."""

    kind: str
    permission_modes: tuple[str, ...]
    supports_interactions: bool
    supports_background_tasks: bool
    supports_server_info: bool
    # The mode of a session whose creator names none; empty: the first of permission_modes.
    default_permission_mode: str = ""
    # The built-in tools the engine offers, by the names an agent definition gives them
    # (AgentSpec.tools); empty: the engine takes no tool configuration.
    tools: tuple[str, ...] = ()


class EngineSession(Protocol):
    """A connected engine running inside one sandbox."""

    @property
    def engine_session_id(self) -> str:
        """The engine's conversation id, empty until the engine reported it."""

    @property
    def ended(self) -> bool:
        """The engine's process is gone (it exited, or the session was closed)."""

    @property
    def mcp_unavailable(self) -> tuple[McpUnavailable, ...]:
        """The agent's MCP servers this engine was started without, known at its start (it could
        not reach them); the ones it finds out about later come on `outputs()` (`unavailable`)."""

    def outputs(self) -> AsyncIterator[EngineOutput]:
        """Every SDK message, in order, until the engine process ends."""

    async def send(self, text: str, permission_mode: str = "") -> None:
        """Give the engine a user message; its turn's outputs follow on `outputs()`.

        The turn runs in `permission_mode`, this message's own, if given, else in the session's
        mode; a message's own mode lasts until `end_turn_mode`. PermissionModeRefused, with
        nothing sent, if the engine cannot switch to the mode."""

    async def end_turn_mode(self) -> None:
        """The turn `send` started has ended: back to the session's mode if it ran in its own
        (PermissionModeRefused if the engine refuses; the next `send` tries again)."""

    async def interrupt(self) -> None:
        """Ask the engine to stop the running turn (it ends with a ResultMessage)."""

    async def set_permission_mode(self, mode: str) -> None:
        """Change the session's mode: now, for the rest of a running turn too, and for every
        later turn that names no mode of its own."""

    async def stop_task(self, task_id: str) -> None: ...

    async def server_info(self) -> dict[str, Any] | None:
        """The engine's server info (slash commands …), if the manifest says it has one."""

    async def transcript(self) -> bytes:
        """The engine's transcript of the current conversation, for a snapshot."""

    async def close(self) -> None:
        """Disconnect and stop the engine's process."""

    async def adopt(self, sandbox: Sandbox, config: EngineConfig) -> None:
        """Hand this engine, pre-started in an unused (warm-pool) sandbox before any conversation,
        to a session: `sandbox` is that sandbox rebound to the session; `config`'s permission mode,
        model and interactions apply from now on. Its environment (and so its model credential)
        stays the one it was started with. EngineError if the engine cannot take it (it ended, the
        config asks for a conversation to resume, or has an agent configuration, which applies at
        launch): the caller starts a fresh engine instead."""


class EngineAdapter(Protocol):
    """Starts engine sessions of one kind."""

    kind: str
    manifest: EngineManifest

    async def start(self, sandbox: Sandbox, driver: SandboxDriver, config: EngineConfig) -> EngineSession:
        """Start the engine's CLI inside `sandbox` (restoring `config.transcript`) and connect to it."""
