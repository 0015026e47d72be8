"""The `claude_code` engine adapter: the real ClaudeSDKClient driving the Claude Code CLI inside a sandbox.

The SDK runs in the agent; the CLI (and so every tool it runs) runs inside the
sandbox, reached through the driver's launcher, which the SDK spawns as its
`cli_path`. The SDK hands the CLI the agent's whole environment; the launcher
replaces it with exactly the variables built here.

One reader task per session drains the SDK's message stream into a bounded
queue that `outputs()` serves, so messages the CLI sends between turns
(background-task lifecycle, a turn it starts on its own) are never lost.

Permission modes. Every CLI is launched with `--allow-dangerously-skip-permissions`
besides `--permission-mode <the session's mode>`: a CLI launched in any mode
but bypassPermissions otherwise refuses to switch to bypassPermissions ("the
session was not launched with --dangerously-skip-permissions"), and a message
may ask for any of the manifest's modes, a SetPermissionMode too, whatever mode
the CLI happened to be (re)started in. The flag only offers bypassPermissions;
the CLI starts, and stays, in the mode it is given, and asks in "default" as it
would without the flag (tests/dataplane_agent/test_claude_code_interactions.py).
That offers nothing the session's user could not already have: the sandbox is
the isolation boundary and bypassPermissions is the manifest's default.

A message's own mode (`send`) is this turn's only: the session keeps its mode
(`start`, `adopt`, `set_permission_mode`), the runtime calls `end_turn_mode`
when the turn has ended, and the next message naming no mode switches back.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import typing
import uuid
import warnings
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import claude_agent_sdk
import structlog
from claude_agent_sdk import (
    CanUseToolShadowedWarning,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    ClaudeSDKError,
    PermissionMode,
    ResultMessage,
    StreamEvent,
    SystemMessage,
)

from dataplane_agent.engines.agent_config import AgentConfig
from dataplane_agent.engines.base import (
    EngineConfig,
    EngineError,
    EngineManifest,
    EngineOutput,
    McpUnavailable,
    PermissionModeRefused,
)
from dataplane_agent.engines.claude_failures import Failures, Redactor, looks_secret
from dataplane_agent.engines.claude_options import PRESET_PROMPT, with_agent_config
from dataplane_agent.engines.claude_tool_gate import ToolGate
from dataplane_agent.engines.claude_transcripts import has_transcript, home, read_transcript, restore_transcript
from dataplane_agent.engines.http_mcp import HttpMcpConnector
from dataplane_agent.engines.mcp_servers import unavailable
from dataplane_agent.engines.partial import PartialMessages
from dataplane_agent.engines.sdk_messages import message_payload
from dataplane_agent.engines.skills import install_skills
from dataplane_agent.sandboxes.base import ENGINE_MARKER, Sandbox, SandboxDriver, SandboxError

log = structlog.get_logger(__name__)

# The SDK warns that bypassPermissions makes can_use_tool moot. Not here: the mode can change
# mid-session, and questions (AskUserQuestion) still reach can_use_tool in that mode.
warnings.filterwarnings("ignore", category=CanUseToolShadowedWarning)

BUNDLED_CLI = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"

MANIFEST = EngineManifest(
    kind="claude_code",
    permission_modes=typing.get_args(PermissionMode),
    supports_interactions=True,
    supports_background_tasks=True,
    supports_server_info=True,
    # Tools run inside the sandbox, which is the isolation boundary; sessions
    # that want a human to approve each tool ask for "default".
    default_permission_mode="bypassPermissions",
    # The built-in tools the bundled CLI offers a session, as its init message lists them
    # (tests/dataplane_agent/test_claude_code_manifest.py keeps the two equal).
    tools=(
        "AskUserQuestion",
        "Bash",
        "CronCreate",
        "CronDelete",
        "CronList",
        "Edit",
        "EnterPlanMode",
        "EnterWorktree",
        "ExitPlanMode",
        "ExitWorktree",
        "ListAgents",
        "Monitor",
        "NotebookEdit",
        "Read",
        "ReportFindings",
        "ScheduleWakeup",
        "SendMessage",
        "Skill",
        "Task",
        "TaskStop",
        "ToolSearch",
        "WebFetch",
        "WebSearch",
        "Workflow",
        "Write",
    ),
)

# What the CLI needs to stay quiet and offline-friendly. IS_SANDBOX tells it that it runs in a
# deliberate sandbox: without it, it refuses bypassPermissions when the sandbox user is root.
_CLI_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "IS_SANDBOX": "1",
}
# What the SDK itself sets for the CLI; the launcher's cleared environment would drop them.
_SDK_ENV = {
    "CLAUDE_CODE_ENTRYPOINT": "sdk-py",
    "CLAUDE_AGENT_SDK_VERSION": claude_agent_sdk.__version__,
    "CLAUDE_CODE_SDK_READS_SESSION_STATE": "1",
}
_STDERR_LINES = 40
_OUTPUT_BUFFER = 1024
# The mode the CLI starts in when it is given none.
_CLI_DEFAULT_MODE = "default"
# Every CLI can be switched to any mode, bypassPermissions included (see the module docstring).
_LAUNCH_FLAGS: dict[str, str | None] = {"allow-dangerously-skip-permissions": None}


def cli_environment(config_env: Mapping[str, str]) -> dict[str, str]:
    """The environment the CLI gets inside the sandbox for a given EngineConfig.env."""
    return {**_CLI_ENV, **_SDK_ENV, **config_env}


class ClaudeCodeAdapter:
    """Starts Claude Code engine sessions through the real claude-agent-sdk."""

    kind = MANIFEST.kind
    manifest = MANIFEST

    def __init__(
        self,
        cli_path: Path | None = None,
        *,
        connect_timeout: float = 90.0,
        control_timeout: float = 30.0,
        close_timeout: float = 30.0,
        http_mcp: HttpMcpConnector | None = None,
    ) -> None:
        self._cli_path = Path(cli_path) if cli_path is not None else BUNDLED_CLI
        self._timeouts = _Timeouts(connect_timeout, control_timeout, close_timeout)
        # The agent's HTTP MCP servers are reached from here, with credentials the sandbox never sees.
        self._http_mcp = http_mcp or HttpMcpConnector()

    async def start(self, sandbox: Sandbox, driver: SandboxDriver, config: EngineConfig) -> ClaudeCodeSession:
        if not self._cli_path.is_file():
            raise EngineError(f"the Claude Code CLI was not found at {self._cli_path}")
        if config.permission_mode:
            _check_mode(config.permission_mode)
        if config.transcript:
            await restore_transcript(sandbox, config)
        session_log = log.bind(sandbox_id=sandbox.sandbox_id)
        resume = config.resume_engine_session_id
        if resume and not await has_transcript(sandbox, resume):
            # Nothing to resume from: the CLI was killed before it wrote its conversation down (its
            # first turn, which was failed then) and no turn of it ever ended with a snapshot.
            # "No conversation found" would fail every later turn; a new conversation starts.
            session_log.warning("conversation_not_found", engine_session_id=resume)
            resume = ""
        await install_skills(sandbox, home(sandbox), config.agent_config.skills)
        # Marked, so that whatever of this engine outlives its launcher can be found and ended.
        marker = uuid.uuid4().hex
        env = {**cli_environment(config.env), ENGINE_MARKER: marker}
        redactor = Redactor(value for name, value in env.items() if looks_secret(name))
        try:
            launcher = await driver.launcher(sandbox, [str(self._cli_path)], env)
        except SandboxError as error:
            raise EngineError(redactor(f"cannot prepare the CLI in sandbox {sandbox.sandbox_id}: {error}")) from error
        stderr_tail: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES)
        gate = ToolGate(config.interactions, session_log) if config.interactions is not None else None
        base = ClaudeAgentOptions(
            cli_path=launcher,
            # The SDK starts the launcher in this directory on the host; the launcher enters the
            # sandbox's own workspace, so the CLI's working directory is sandbox.inner_workspace.
            cwd=sandbox.workspace,
            system_prompt=PRESET_PROMPT,
            permission_mode=config.permission_mode or None,  # type: ignore[arg-type]
            extra_args=dict(_LAUNCH_FLAGS),
            model=config.model or None,
            resume=resume or None,
            # The SDK switches the CLI's permission prompts to its control channel when this is set.
            can_use_tool=gate,
            stderr=stderr_tail.append,
            # Text as it is written, for live watchers (engines/partial.py); complete messages still follow.
            include_partial_messages=True,
        )
        # The session's agent: its system prompt, tools and their policies, MCP servers, skills, limits.
        http = await self._http_mcp.connect(config.agent_config, config.session_id)
        options = with_agent_config(base, config.agent_config, config.interactions, http.servers)
        session = ClaudeCodeSession(
            ClaudeSDKClient(options),
            sandbox,
            _Processes(driver, marker),
            self._timeouts,
            Failures(redactor, stderr_tail, session_log),
            permission_mode=config.permission_mode,
            model=config.model,
            engine_session_id=resume,
            gate=gate,
            mcp_unavailable=http.unavailable,
            agent_config=config.agent_config,
        )
        try:
            await session.connect()
        except EngineError as error:
            if not resume or _NO_CONVERSATION not in str(error):
                raise
            # The transcript is there but holds no conversation the CLI takes (killed while it
            # wrote its first turn down): as with no transcript, a new conversation starts.
            session_log.warning("conversation_not_resumable", engine_session_id=resume)
            return await self.start(sandbox, driver, dataclasses.replace(config, resume_engine_session_id=""))
        return session


# What the CLI says when it cannot resume a conversation from the transcript it finds.
_NO_CONVERSATION = "No conversation found with session ID"


class ClaudeCodeSession:
    """One connected Claude Code CLI.

    `outputs()` has one consumer; `send`, `interrupt` and the other commands
    may be called from other tasks while it is being read.
    """

    def __init__(
        self,
        client: ClaudeSDKClient,
        sandbox: Sandbox,
        processes: _Processes,
        timeouts: _Timeouts,
        failures: Failures,
        *,
        permission_mode: str,
        model: str,
        engine_session_id: str,
        gate: ToolGate | None,
        mcp_unavailable: tuple[McpUnavailable, ...] = (),
        agent_config: AgentConfig | None = None,
    ) -> None:
        agent_config = agent_config or AgentConfig()
        self._client = client
        self._mcp_unavailable = mcp_unavailable
        # What the CLI was launched with: a session with another configuration cannot adopt it.
        self._agent_config = agent_config
        # The agent's MCP servers, until the CLI's first `init` message told which did not start.
        self._mcp_servers_to_check = agent_config.mcp_servers
        self._sandbox = sandbox
        self._processes = processes
        self._timeouts = timeouts
        self._failures = failures
        self._log = failures.log
        # The session's mode, and the mode the CLI is in: another only while a turn runs in its own.
        self._session_mode = permission_mode or _CLI_DEFAULT_MODE
        self._mode = self._session_mode
        self._model = model
        self._engine_session_id = engine_session_id
        self._gate = gate
        self._queue: asyncio.Queue[EngineOutput | _End] = asyncio.Queue(maxsize=_OUTPUT_BUFFER)
        self._reader: asyncio.Task[None] | None = None
        self._ended: _End | None = None
        self._commands = asyncio.Lock()
        self._turn: object | None = None
        self._closed = False

    @property
    def engine_session_id(self) -> str:
        return self._engine_session_id

    @property
    def ended(self) -> bool:
        return self._closed or self._ended is not None

    @property
    def mcp_unavailable(self) -> tuple[McpUnavailable, ...]:
        return self._mcp_unavailable

    @property
    def permission_mode(self) -> str:
        """The mode the CLI is in now: the session's, or the running turn's own."""
        return self._mode

    async def connect(self) -> None:
        started = asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(self._timeouts.connect):
                await self._client.connect()
        except TimeoutError:
            await self.close()
            raise EngineError(
                self._failures.describe(f"the CLI did not start within {self._timeouts.connect:.0f}s")
            ) from None
        except (ClaudeSDKError, OSError) as error:
            await self.close()
            raise EngineError(self._failures.describe(f"the CLI could not start: {error}")) from error
        except asyncio.CancelledError:  # the starter went away (an agent shutting down): no CLI left behind
            await asyncio.shield(self.close())
            raise
        self._reader = asyncio.create_task(self._read(), name=f"claude-code-reader-{self._sandbox.sandbox_id}")
        self._log.debug("engine_connected", seconds=round(asyncio.get_running_loop().time() - started, 3))

    async def outputs(self) -> AsyncGenerator[EngineOutput, None]:
        """Every SDK message; ends when the CLI does (raising EngineError if it failed).

        What the bundled CLI sends besides a user turn's messages: a Bash command that runs
        for more than a few seconds becomes a task (TaskStarted/TaskNotification inside the
        turn, `is_backgrounded` false); a background command's TaskStarted comes inside its
        turn, its TaskUpdated and TaskNotification after that turn's Result, and then the CLI
        starts a turn of its own about it (init, assistant messages, a Result; no user message).
        """
        while True:
            if self._ended is not None and self._queue.empty():
                item: EngineOutput | _End = self._ended
            else:
                item = await self._queue.get()
            if isinstance(item, _End):
                self._ended = item
                if item.error is not None:
                    raise EngineError(item.error)
                return
            yield item

    async def send(self, text: str, permission_mode: str = "") -> None:
        mode = permission_mode or self._session_mode
        _check_mode(mode)
        async with self._command("take the message"):
            await self._switch(mode)
            await self._client.query(text)

    async def end_turn_mode(self) -> None:
        async with self._command("return to the session's permission mode"):
            await self._switch(self._session_mode)

    async def interrupt(self) -> None:
        async with self._command("acknowledge the interrupt"):
            await self._client.interrupt()

    async def set_permission_mode(self, mode: str) -> None:
        _check_mode(mode)
        async with self._command("switch the permission mode"):
            await self._switch(mode, always=True)
            self._session_mode = mode

    async def adopt(self, sandbox: Sandbox, config: EngineConfig) -> None:
        """Take a session on (see EngineSession.adopt): two control requests at most, no restart."""
        if config.resume_engine_session_id or config.transcript or self._engine_session_id:
            raise EngineError("a pre-started engine starts new conversations only; it cannot resume one")
        if config.agent_config != self._agent_config:
            # Its system prompt, tools, MCP servers and skills were fixed when it was launched.
            raise EngineError("the pre-started engine was launched with another agent configuration than the session's")
        if (config.agent_config.custom_tools or config.agent_config.subagents) or any(
            server.http for server in config.agent_config.mcp_servers
        ):
            # Bound at launch to the session it was started for: the client that answers custom
            # tools, the credentials of HTTP MCP servers.
            raise EngineError("a pre-started engine cannot take on custom tools or HTTP MCP servers")
        if config.interactions is not None and self._gate is None:
            raise EngineError("the engine was started without a tool gate, so it cannot ask the session's user")
        if config.permission_mode:
            _check_mode(config.permission_mode)
        async with self._command("take the session on"):
            if config.permission_mode:
                await self._switch(config.permission_mode)
                self._session_mode = config.permission_mode
            if config.model and config.model != self._model:
                await self._client.set_model(config.model)
                self._model = config.model
        self._sandbox = sandbox
        self._log = self._failures.log = log.bind(sandbox_id=sandbox.sandbox_id)
        if self._gate is not None:
            self._gate.adopt(config.interactions, self._log)
        self._log.debug("engine_adopted", permission_mode=self._session_mode)

    async def stop_task(self, task_id: str) -> None:
        async with self._command(f"stop task {task_id}"):
            await self._client.stop_task(task_id)

    async def server_info(self) -> dict[str, Any] | None:
        async with self._command("report its server info"):
            info = await self._client.get_server_info()
        return dict(info) if info is not None else None

    async def transcript(self) -> bytes:
        if not self._engine_session_id:
            return b""
        return await read_transcript(self._sandbox, self._engine_session_id, self._timeouts.control)

    async def close(self) -> None:
        self._closed = True
        try:
            async with asyncio.timeout(self._timeouts.close):
                await self._client.disconnect()
        except TimeoutError:
            self._log.warning("engine_close_timed_out", seconds=self._timeouts.close)
        except Exception as error:  # closing must not fail the caller; the process is gone or going
            self._log.warning("engine_close_failed", error=self._failures.redact(str(error)))
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._ended = self._ended or _End()
        # The SDK ends the launcher; under `docker exec` a CLI busy with a tool runs on without it,
        # and the engine that replaces this one would write the same conversation beside it.
        try:
            async with asyncio.timeout(self._timeouts.close):
                await self._processes.end(self._sandbox)
        except Exception as error:  # as above: closing must not fail the caller
            self._log.warning("engine_processes_not_ended", error=self._failures.redact(repr(error)))

    async def run_turn(self, text: str, permission_mode: str = "") -> AsyncIterator[EngineOutput]:
        """Send `text` and yield outputs through the next Result: a one-turn-at-a-time convenience."""
        if self._turn is not None:
            raise EngineError("a turn is already running in this engine session")
        turn = self._turn = object()
        try:
            await self.send(text, permission_mode)
            async with contextlib.aclosing(self.outputs()) as outputs:
                async for output in outputs:
                    if output.delta is not None or output.unavailable is not None:
                        continue  # a convenience for the SDK's whole messages
                    if output.ends_turn:
                        # Settled before the last yield: a caller may stop iterating at the Result.
                        self._turn = None
                        yield output
                        return
                    yield output
            raise EngineError(self._failures.describe("the CLI stopped before finishing the turn"))
        finally:
            if self._turn is turn:  # a generator abandoned at its Result is finalized later, maybe mid-turn
                self._turn = None

    async def _switch(self, mode: str, *, always: bool = False) -> None:
        """Put the CLI in `mode` (holding `_commands`); PermissionModeRefused if it says no."""
        if mode == self._mode and not always:
            return
        try:
            await self._client.set_permission_mode(mode)  # type: ignore[arg-type]
        except Exception as error:
            # The CLI's own answer reaches here as a bare Exception; a CLI that is gone, as the SDK's errors.
            if type(error) is not Exception:
                raise
            refused = self._failures.redact(f"the CLI refused permission mode {mode!r}: {error}")
            self._log.warning("engine_refused_permission_mode", mode=mode, error=refused)
            raise PermissionModeRefused(refused) from error
        self._mode = mode

    @contextlib.asynccontextmanager
    async def _command(self, what: str) -> AsyncIterator[None]:
        if self._closed or self._ended is not None:
            raise EngineError("the engine session is closed")
        try:
            async with asyncio.timeout(self._timeouts.control):
                async with self._commands:
                    yield
        except TimeoutError:
            raise EngineError(
                self._failures.describe(f"the CLI did not {what} within {self._timeouts.control:.0f}s")
            ) from None
        except EngineError:
            raise
        except Exception as error:  # the SDK raises its own errors and, for control failures, bare Exception
            raise EngineError(self._failures.describe(f"the CLI did not {what}: {error}")) from error

    async def _read(self) -> None:
        end = _End()
        try:
            partial = PartialMessages()
            async for message in self._client.receive_messages():
                if isinstance(message, StreamEvent):
                    # In the same queue as the complete messages: a delta keeps its place among them.
                    delta = partial.delta(message.event, message.parent_tool_use_id)
                    if delta is not None:
                        await self._queue.put(EngineOutput(type_name="StreamEvent", payload={}, delta=delta))
                    continue
                self._note_session_id(message)
                await self._queue.put(EngineOutput(type_name=type(message).__name__, payload=message_payload(message)))
                for failed in self._failed_mcp_servers(message):
                    await self._queue.put(EngineOutput(type_name="", payload={}, unavailable=failed))
            if not self._closed:
                self._log.info("engine_process_ended")
        except asyncio.CancelledError:
            raise
        except Exception as error:  # whatever ended the stream, the reader reports it rather than dying silently
            if not self._closed:
                end = _End(self._failures.describe(f"the CLI stopped: {error}"))
        finally:
            self._ended = end
            with contextlib.suppress(asyncio.QueueFull):
                self._queue.put_nowait(end)  # wakes a waiting consumer; a full queue is drained first

    def _failed_mcp_servers(self, message: object) -> list[McpUnavailable]:
        """At the CLI's first `init`: the agent's stdio servers it could not start."""
        if not self._mcp_servers_to_check or not (isinstance(message, SystemMessage) and message.subtype == "init"):
            return []
        servers, self._mcp_servers_to_check = self._mcp_servers_to_check, ()
        failed = unavailable(servers, message.data)
        for report in failed:
            self._log.warning("mcp_server_did_not_start", server=report.server)
        return failed

    def _note_session_id(self, message: object) -> None:
        session_id: Any = None
        if isinstance(message, SystemMessage) and message.subtype == "init":
            session_id = message.data.get("session_id")
        elif isinstance(message, ResultMessage):
            session_id = message.session_id
        if isinstance(session_id, str) and session_id and session_id != self._engine_session_id:
            self._engine_session_id = session_id
            self._log.debug("engine_session_id", engine_session_id=session_id)


@dataclass(frozen=True, slots=True)
class _End:
    """The reader is done: the CLI's stream ended, with `error` if it failed."""

    error: str | None = None


@dataclass(frozen=True, slots=True)
class _Processes:
    """What an engine runs in its sandbox: every process its `marker` (ENGINE_MARKER) is on."""

    driver: SandboxDriver
    marker: str

    async def end(self, sandbox: Sandbox) -> None:
        await self.driver.end_processes(sandbox, self.marker, ENGINE_MARKER)


@dataclass(frozen=True, slots=True)
class _Timeouts:
    connect: float
    control: float
    close: float


def _check_mode(mode: str) -> None:
    if mode not in MANIFEST.permission_modes:
        raise EngineError(f"unknown permission mode {mode!r}; valid: {', '.join(MANIFEST.permission_modes)}")
