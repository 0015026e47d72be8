"""The `claude_code` engine adapter: the real ClaudeSDKClient driving the Claude Code CLI inside a sandbox.

The SDK runs in the agent; the CLI (and so every tool it runs) runs inside the
sandbox, reached through the driver's launcher, which the SDK spawns as its
`cli_path`. The SDK hands the CLI the agent's whole environment; the launcher
replaces it with exactly the variables built here.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import claude_agent_sdk
import structlog
from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient, ClaudeSDKError, ResultMessage, SystemMessage

from dataplane_agent.engines.base import EngineConfig, EngineError, EngineOutput
from dataplane_agent.engines.sdk_messages import message_payload
from dataplane_agent.sandboxes.base import Sandbox, SandboxDriver, SandboxError

log = structlog.get_logger(__name__)

BUNDLED_CLI = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"

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
_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH")
_STDERR_LINES = 40


def cli_environment(config_env: Mapping[str, str]) -> dict[str, str]:
    """The environment the CLI gets inside the sandbox for a given EngineConfig.env."""
    return {**_CLI_ENV, **_SDK_ENV, **config_env}


class ClaudeCodeAdapter:
    """Starts Claude Code engine sessions through the real claude-agent-sdk."""

    kind = "claude_code"

    def __init__(
        self,
        cli_path: Path | None = None,
        *,
        connect_timeout: float = 90.0,
        message_timeout: float = 600.0,
        control_timeout: float = 30.0,
        close_timeout: float = 30.0,
    ) -> None:
        self._cli_path = Path(cli_path) if cli_path is not None else BUNDLED_CLI
        self._timeouts = _Timeouts(connect_timeout, message_timeout, control_timeout, close_timeout)

    async def start(self, sandbox: Sandbox, driver: SandboxDriver, config: EngineConfig) -> ClaudeCodeSession:
        if not self._cli_path.is_file():
            raise EngineError(f"the Claude Code CLI was not found at {self._cli_path}")
        env = cli_environment(config.env)
        redactor = _Redactor(value for name, value in env.items() if _looks_secret(name))
        try:
            launcher = await driver.launcher(sandbox, [str(self._cli_path)], env)
        except SandboxError as error:
            raise EngineError(redactor(f"cannot prepare the CLI in sandbox {sandbox.sandbox_id}: {error}")) from error
        stderr_tail: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES)
        options = ClaudeAgentOptions(
            cli_path=launcher,
            # The SDK starts the launcher in this directory on the host; the launcher enters the
            # sandbox's own workspace, so the CLI's working directory is sandbox.inner_workspace.
            cwd=sandbox.workspace,
            system_prompt={"type": "preset", "preset": "claude_code"},
            permission_mode=config.permission_mode or None,  # type: ignore[arg-type]
            model=config.model or None,
            resume=config.resume_engine_session_id or None,
            stderr=stderr_tail.append,
        )
        session = ClaudeCodeSession(ClaudeSDKClient(options), self._timeouts, redactor, stderr_tail, sandbox.sandbox_id)
        await session.connect(config.permission_mode)
        return session


class ClaudeCodeSession:
    """One connected Claude Code CLI; turns run one at a time."""

    def __init__(
        self,
        client: ClaudeSDKClient,
        timeouts: _Timeouts,
        redactor: _Redactor,
        stderr_tail: collections.deque[str],
        sandbox_id: str,
    ) -> None:
        self._client = client
        self._timeouts = timeouts
        self._redact = redactor
        self._stderr = stderr_tail
        self._log = log.bind(sandbox_id=sandbox_id)
        self._engine_session_id = ""
        self._permission_mode = ""
        self._current_turn: object | None = None
        self._connected = False
        self._unfinished_turn = False

    @property
    def engine_session_id(self) -> str:
        return self._engine_session_id

    async def connect(self, permission_mode: str) -> None:
        started = asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(self._timeouts.connect):
                await self._client.connect()
        except TimeoutError:
            await self.close()
            raise EngineError(self._failure(f"the CLI did not start within {self._timeouts.connect:.0f}s")) from None
        except (ClaudeSDKError, OSError) as error:
            await self.close()
            raise EngineError(self._failure(f"the CLI could not start: {error}")) from error
        self._connected = True
        self._permission_mode = permission_mode
        self._log.debug("engine_connected", seconds=round(asyncio.get_running_loop().time() - started, 3))

    async def run_turn(self, text: str, permission_mode: str = "") -> AsyncIterator[EngineOutput]:
        if self._current_turn is not None:
            raise EngineError("a turn is already running in this engine session")
        if not self._connected:
            raise EngineError("the engine session is closed")
        if self._unfinished_turn:
            # Its remaining messages would be taken for this turn's: the caller must close and resume.
            raise EngineError("the previous turn did not finish; close this engine session and resume")
        turn = self._current_turn = object()
        self._unfinished_turn = True
        messages: AsyncIterator[Any] | None = None
        try:
            await self._send(text, permission_mode)
            messages = aiter(self._client.receive_response())
            while True:
                try:
                    async with asyncio.timeout(self._timeouts.message):
                        message = await anext(messages)
                except StopAsyncIteration:
                    raise EngineError(self._failure("the CLI stopped before finishing the turn")) from None
                except TimeoutError:
                    silence = f"{self._timeouts.message:.0f}s"
                    raise EngineError(self._failure(f"the CLI sent nothing for {silence} during a turn")) from None
                self._note_session_id(message)
                output = EngineOutput(type_name=type(message).__name__, payload=message_payload(message))
                if isinstance(message, ResultMessage):
                    # Settled before the last yield: a caller may stop iterating at the Result.
                    self._unfinished_turn = False
                    self._current_turn = None
                    with contextlib.suppress(Exception):
                        await messages.aclose()  # type: ignore[attr-defined]
                    messages = None
                    yield output
                    return
                yield output
        except EngineError:
            raise
        except Exception as error:  # the SDK raises its own errors and, for some CLI failures, bare Exception
            raise EngineError(self._failure(f"the turn failed: {error}")) from error
        finally:
            if self._current_turn is turn:
                self._current_turn = None
            if messages is not None:
                with contextlib.suppress(Exception):
                    await messages.aclose()  # type: ignore[attr-defined]

    async def _send(self, text: str, permission_mode: str) -> None:
        try:
            async with asyncio.timeout(self._timeouts.control):
                if permission_mode and permission_mode != self._permission_mode:
                    await self._client.set_permission_mode(permission_mode)  # type: ignore[arg-type]
                    self._permission_mode = permission_mode
                await self._client.query(text)
        except TimeoutError:
            raise EngineError(self._failure(f"the CLI did not take the message within {self._timeouts.control:.0f}s")) from None

    async def close(self) -> None:
        self._connected = False
        try:
            async with asyncio.timeout(self._timeouts.close):
                await self._client.disconnect()
        except TimeoutError:
            self._log.warning("engine_close_timed_out", seconds=self._timeouts.close)
        except Exception as error:  # closing must not fail the caller; the process is gone or going
            self._log.warning("engine_close_failed", error=self._redact(str(error)))

    def _note_session_id(self, message: object) -> None:
        session_id: Any = None
        if isinstance(message, SystemMessage) and message.subtype == "init":
            session_id = message.data.get("session_id")
        elif isinstance(message, ResultMessage):
            session_id = message.session_id
        if isinstance(session_id, str) and session_id and session_id != self._engine_session_id:
            self._engine_session_id = session_id
            self._log.debug("engine_session_id", engine_session_id=session_id)

    def _failure(self, what: str) -> str:
        message = what
        if self._stderr:
            message += "; CLI stderr: " + " | ".join(self._stderr)
        message = self._redact(message)
        self._log.warning("engine_failed", error=message)
        return message


@dataclass(frozen=True, slots=True)
class _Timeouts:
    connect: float
    message: float  # the longest silence allowed during a turn (a tool may run that long)
    control: float
    close: float


class _Redactor:
    """Blanks out secret values (API keys, tokens) from text meant for errors and logs."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self._secrets = sorted({secret for secret in secrets if len(secret) >= 4}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
        return text


def _looks_secret(name: str) -> bool:
    upper = name.upper()
    return any(marker in upper for marker in _SECRET_MARKERS)
