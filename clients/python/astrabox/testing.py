"""A whole AstraBox stack on this machine, for a program's tests: `LocalStack`.

    from astrabox.testing import LocalStack

    async def test_my_agent_workflow():
        async with LocalStack() as stack:
            session = await stack.client.start_session()
            result = await (await session.send("run: echo hello")).result()
            assert "hello" in result.text

`LocalStack` runs `astrabox up` in a child process, in a scratch directory:
an embedded PostgreSQL, the control plane on a free loopback port and one
data-plane agent with the local (bubblewrap) sandbox driver, answering with
the built-in offline model (no network, no API key; see the README for the
scripts it understands). It waits until the stack serves, hands out its
address and a connected client, and stops it on exit (SIGTERM, then SIGKILL
after `stop_timeout`), removing the scratch directory.

`astrabox up` comes with the server distribution (astrabox-server), which
must be installed in the same Python environment as the client; without it
`LocalStack` raises `ServerNotInstalledError` and runs nothing. The client
itself imports no server code either way: the stack is another process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from astrabox.cli import contributed_commands
from astrabox.client import AstraBoxClient
from astrabox.errors import LocalStackError, ServerNotInstalledError

__all__ = ["LocalStack", "LocalStackError", "ServerNotInstalledError"]

_READY = re.compile(r"AstraBox is up on (\S+)")
_TAIL_LINES = 40
_POLL_SECONDS = 0.05
# Left out of the stack's environment: the stack uses its own embedded database ...
_DATABASE_ENV = ("ASTRABOX_DATABASE_URL", "ASTRABOX_DATABASE_URL_FILE")
# ... its own first admin key (in its data directory) and its own config directory ...
_KEY_ENV = ("ASTRABOX_BOOTSTRAP_KEY_FILE", "ASTRABOX_API_KEY", "ASTRABOX_API_KEY_FILE")
# ... and, unless told otherwise, the offline model.
_MODEL_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY_FILE", "ASTRABOX_MODEL_BASE_URL")


class LocalStack:
    """The whole stack (`astrabox up`) in a child process; an async context manager.

    `offline_model` (default True) keeps the model keys and model URL of this
    process's environment from the stack, so its agent answers with the
    offline model; `env` adds or overrides variables of the stack's
    environment (for example `{"ANTHROPIC_API_KEY": key}` with
    `offline_model=False`). `startup_timeout` bounds the wait for the stack
    to serve, `stop_timeout` its orderly shutdown.
    """

    def __init__(
        self,
        *,
        offline_model: bool = True,
        env: Mapping[str, str] | None = None,
        startup_timeout: float = 180.0,
        stop_timeout: float = 30.0,
    ) -> None:
        self._offline_model = offline_model
        self._env = dict(env or {})
        self._startup_timeout = startup_timeout
        self._stop_timeout = stop_timeout
        self._scratch: Path | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._address = ""
        self._api_key = ""
        self._client: AstraBoxClient | None = None

    async def __aenter__(self) -> LocalStack:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    @property
    def address(self) -> str:
        """The control plane's address ("127.0.0.1:PORT"), for `AstraBoxClient.connect` or `--target`."""
        if not self._address:
            raise RuntimeError("the local stack is not running")
        return self._address

    @property
    def api_key(self) -> str:
        """The stack's admin key (operator project `default`), for other clients or `--api-key-file`."""
        if not self._api_key:
            raise RuntimeError("the local stack is not running")
        return self._api_key

    @property
    def client(self) -> AstraBoxClient:
        """A client connected to the stack, closed when the stack stops."""
        if self._client is None:
            raise RuntimeError("the local stack is not running")
        return self._client

    @property
    def data_dir(self) -> Path:
        """The stack's state directory (database, agent state, workspaces), removed when it stops."""
        if self._scratch is None:
            raise RuntimeError("the local stack is not running")
        return self._scratch / "data"

    @property
    def log_path(self) -> Path:
        """The file holding everything the stack printed so far, removed when it stops."""
        if self._scratch is None:
            raise RuntimeError("the local stack is not running")
        return self._scratch / "astrabox-up.log"

    async def start(self) -> None:
        """Starts the stack and waits until it serves (`LocalStackError` if it does not)."""
        if self._process is not None:
            raise RuntimeError("the local stack is already running")
        if "up" not in contributed_commands():
            raise ServerNotInstalledError(
                "astrabox.testing.LocalStack runs `astrabox up`, which the server distribution provides: install "
                f"astrabox-server into the environment of {sys.executable} (the client alone cannot run a stack)"
            )
        self._scratch = Path(tempfile.mkdtemp(prefix="astrabox-localstack-"))
        # Traversable by others: a root stack runs its embedded PostgreSQL as `postgres`.
        self._scratch.chmod(0o711)
        try:
            # Its output goes to a file, not a pipe: the stack never waits for this process to read.
            log = self.log_path.open("wb")
            try:
                self._process = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "astrabox",
                    "up",
                    "--data-dir",
                    str(self.data_dir),
                    "--listen",
                    "127.0.0.1:0",
                    "--web-listen",
                    "127.0.0.1:0",
                    # Its logs in its output too (log_path), not only in the data directory's log file.
                    "--verbose",
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log,
                    stderr=asyncio.subprocess.STDOUT,
                    env=self._environment(),
                    # Its own process group: the stack and everything it started can be killed together.
                    start_new_session=True,
                )
            finally:
                log.close()  # the child holds its own copy
            try:
                async with asyncio.timeout(self._startup_timeout):
                    self._address = await self._serving(self._process)
            except TimeoutError:
                raise LocalStackError(
                    f"the local stack did not serve within {self._startup_timeout:g}s; it printed:\n{self._tail()}"
                ) from None
            self._api_key = (self.data_dir / "admin-key").read_text().strip()
            self._client = AstraBoxClient.connect(self._address, api_key=self._api_key)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stops the stack (SIGTERM, then SIGKILL after `stop_timeout`) and removes its directory. Idempotent."""
        if self._client is not None:
            await self._client.close()
            self._client = None
        process, self._process = self._process, None
        if process is not None:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._stop_timeout):
                        await process.wait()
            # Whatever of its process group is left (all of it, if it did not stop in time).
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
        self._address = ""
        self._api_key = ""
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def _environment(self) -> dict[str, str]:
        dropped = _DATABASE_ENV + _KEY_ENV + (_MODEL_ENV if self._offline_model else ())
        env = {name: value for name, value in os.environ.items() if name not in dropped}
        assert self._scratch is not None
        return {**env, "PYTHONUNBUFFERED": "1", "XDG_CONFIG_HOME": str(self._scratch / "config"), **self._env}

    async def _serving(self, process: asyncio.subprocess.Process) -> str:
        """The address the stack says it serves on, read from its output as it comes."""
        read = 0
        while True:
            exited = process.returncode is not None
            output = self.log_path.read_bytes()
            for line in output[read : output.rfind(b"\n") + 1].splitlines():
                if match := _READY.search(line.decode(errors="replace")):
                    return match.group(1)
            read = max(read, output.rfind(b"\n") + 1)
            if exited:
                raise LocalStackError(
                    f"the local stack exited with status {process.returncode} before it "
                    f"served; it printed:\n{self._tail()}"
                )
            await asyncio.sleep(_POLL_SECONDS)

    def _tail(self) -> str:
        lines = self.log_path.read_bytes().decode(errors="replace").splitlines()
        return "\n".join(lines[-_TAIL_LINES:])
