"""The workspace calls of `AstraBoxClient` (files and commands in a session's sandbox, terminals), kept
apart from the session and turn calls; `astrabox.client` re-exports their names."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from astrabox.backoff import Backoff
from astrabox.errors import AstraBoxError
from astrabox.retries import within_deadline
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as api
from astrabox.terminals import Terminal

R = TypeVar("R")


UPLOAD_CHUNK = 512 * 1024
"""Bytes of an uploaded archive per message (the server accepts up to 1 MiB)."""
TRANSFER_TIMEOUTS = 10
"""An upload's or a download's deadline, in the client's `timeout`s: archives take longer than a call."""
DEFAULT_COMMAND_TIMEOUT = 600.0
"""Seconds a command run without a `timeout` may take: the agent's default (it stops the command then)."""


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What a command run in the sandbox printed, and how it ended (negative: killed by that signal)."""

    stdout: bytes
    stderr: bytes
    exit_code: int


class WorkspaceCalls:
    """Calls on a session's workspace; `AstraBoxClient` has them (and the connection they use)."""

    _stub: Any
    _metadata: tuple[tuple[str, str], ...]
    _timeout: float
    _reconnect: Backoff

    async def _unary(self, method: Callable[..., Awaitable[R]], request: Any, *, idempotent: bool = True) -> R:
        raise NotImplementedError  # AstraBoxClient's

    async def upload_archive(
        self, session_id: str, archive: bytes, path: str = ""
    ) -> api.UploadWorkspaceArchiveResponse:
        """Unpacks a tar archive into the workspace directory `path` (relative to the workspace)."""

        async def messages() -> AsyncIterator[api.UploadWorkspaceArchiveRequest]:
            yield api.UploadWorkspaceArchiveRequest(session_id=session_id, path=path, chunk=archive[:UPLOAD_CHUNK])
            for start in range(UPLOAD_CHUNK, len(archive), UPLOAD_CHUNK):
                yield api.UploadWorkspaceArchiveRequest(chunk=archive[start : start + UPLOAD_CHUNK])

        try:
            written: api.UploadWorkspaceArchiveResponse = await self._stub.UploadWorkspaceArchive(
                messages(), timeout=self._timeout * TRANSFER_TIMEOUTS, metadata=self._metadata
            )
            return written
        except grpc.aio.AioRpcError as error:
            raise AstraBoxError.from_rpc_error(error) from error

    async def upload_directory(
        self, session_id: str, local_dir: str | os.PathLike[str], path: str = ""
    ) -> api.UploadWorkspaceArchiveResponse:
        """Uploads the contents of a local directory into the workspace directory `path`."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            archive.add(os.fspath(local_dir), arcname=".")
        return await self.upload_archive(session_id, buffer.getvalue(), path)

    async def list_workspace(self, session_id: str, path: str = "") -> list[api.WorkspaceEntry]:
        """The entries of the workspace directory `path` (relative to the workspace)."""
        request = api.ListWorkspaceRequest(session_id=session_id, path=path)
        return list((await self._unary(self._stub.ListWorkspace, request)).entries)

    async def download_archive(self, session_id: str, path: str = "", *, timeout: float | None = None) -> bytes:
        """A tar archive of a file or directory of the workspace (all of it by default), within `timeout`
        seconds (default: `TRANSFER_TIMEOUTS` times the client's); a download cut by the server or its
        database being away is started again within them."""
        request = api.DownloadWorkspaceArchiveRequest(session_id=session_id, path=path)

        async def download(seconds_left: float) -> bytes:
            chunks = []
            call = self._stub.DownloadWorkspaceArchive(request, timeout=seconds_left, metadata=self._metadata)
            try:
                async for response in call:
                    chunks.append(response.chunk)
            finally:
                call.cancel()  # a no-op once the stream ended; otherwise the server stops sending
            return b"".join(chunks)

        deadline = self._timeout * TRANSFER_TIMEOUTS if timeout is None else timeout
        return await within_deadline(download, timeout=deadline, backoff=self._reconnect)

    async def run_command(self, session_id: str, command: str, timeout: float = 0) -> CommandResult:
        """Runs a shell command in the session's sandbox and collects its output. The command is stopped
        after `timeout` seconds (0: the agent's default, `DEFAULT_COMMAND_TIMEOUT`); the call's deadline
        is that plus the client's `timeout`. Not retried: a command may not be safe to run twice."""
        stdout, stderr, code = bytearray(), bytearray(), None
        call = self._stub.RunCommand(
            api.RunCommandRequest(session_id=session_id, command=command, timeout_ms=int(timeout * 1000)),
            timeout=(timeout if timeout > 0 else DEFAULT_COMMAND_TIMEOUT) + self._timeout,
            metadata=self._metadata,
        )
        try:
            async for response in call:
                which = response.WhichOneof("output")
                if which == "stdout":
                    stdout += response.stdout
                elif which == "stderr":
                    stderr += response.stderr
                elif which == "exit_code":
                    code = response.exit_code
        except grpc.aio.AioRpcError as error:
            raise AstraBoxError.from_rpc_error(error) from error
        if code is None:
            raise AstraBoxError(grpc.StatusCode.UNAVAILABLE, "the command's stream ended without an exit code")
        return CommandResult(bytes(stdout), bytes(stderr), code)

    def open_terminal(
        self, session_id: str, *, command: str = "", term: str = "", rows: int = 24, columns: int = 80
    ) -> Terminal:
        """An interactive program (a login shell unless `command` says) on a terminal in the session's
        sandbox; use it as an async context manager (`astrabox.terminals`). Not retried: input
        cannot be sent twice. `term`: TERM for the program ("" for xterm-256color)."""
        call = self._stub.OpenTerminal(metadata=self._metadata)
        size = api.TerminalSize(rows=rows, columns=columns)
        return Terminal(call, api.OpenTerminalRequest(session_id=session_id, command=command, term=term, size=size))
