"""Workspace requests: list, download, upload and run commands in a session's sandbox.

These are not durable: a client waits on the other end of the control plane,
and a broken stream fails its call. Every path is confined to the session's
workspace: ".." is refused, and so is anything that resolves outside the
workspace through a symlink. Uploads are unpacked with tarfile's "data"
filter, which also refuses members and links that would land outside.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import stat
import tarfile
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO

import grpc
import structlog
from google.protobuf import any_pb2, timestamp_pb2
from google.rpc import error_details_pb2, status_pb2

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.sandboxes.base import Sandbox, SandboxDriver

log = structlog.get_logger(__name__)

CHUNK_BYTES = 256 * 1024
MAX_UPLOAD_BYTES = 256 * 1024 * 1024
DEFAULT_EXEC_TIMEOUT_S = 600.0
_EXEC_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

Reply = Callable[[pb.WorkspaceReply], Awaitable[None]]
SandboxLookup = Callable[[str], Awaitable[Sandbox | None]]


class WorkspaceError(Exception):
    """A request the agent refuses, with the gRPC code and reason the client sees."""

    def __init__(self, code: grpc.StatusCode, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def to_status(self) -> status_pb2.Status:
        detail = any_pb2.Any()
        detail.Pack(error_details_pb2.ErrorInfo(reason=self.reason, domain="astrabox.dev"))
        return status_pb2.Status(code=self.code.value[0], message=self.message, details=[detail])


def confine(workspace: Path, path: str) -> Path:
    """The host path of `path` (relative to the workspace, or under /workspace)."""
    text = path.strip()
    if text == "/workspace" or text.startswith("/workspace/"):
        text = text.removeprefix("/workspace")
    elif text.startswith("/"):
        raise WorkspaceError(grpc.StatusCode.INVALID_ARGUMENT, "PATH_OUTSIDE_WORKSPACE",
                             f"{path!r} is outside the workspace; give a path relative to it")
    parts = PurePosixPath(text.lstrip("/")).parts
    if ".." in parts:
        raise WorkspaceError(grpc.StatusCode.INVALID_ARGUMENT, "PATH_OUTSIDE_WORKSPACE",
                             f"{path!r} climbs out of the workspace with '..'")
    root = workspace.resolve()
    resolved = root.joinpath(*parts).resolve()
    if resolved != root and root not in resolved.parents:
        raise WorkspaceError(grpc.StatusCode.PERMISSION_DENIED, "PATH_OUTSIDE_WORKSPACE",
                             f"{path!r} leads outside the workspace through a symbolic link")
    return resolved


def _not_found(path: str) -> WorkspaceError:
    return WorkspaceError(grpc.StatusCode.NOT_FOUND, "PATH_NOT_FOUND", f"{path or '.'!r} does not exist in the workspace")


@dataclass
class _Upload:
    target: str
    spool: IO[bytes] = field(default_factory=lambda: tempfile.TemporaryFile(prefix="astrabox-upload-"))
    size: int = 0


class WorkspaceService:
    """Serves the control plane's workspace requests; owns their tasks."""

    def __init__(self, sandbox_of: SandboxLookup, driver: SandboxDriver) -> None:
        self._sandbox_of = sandbox_of
        self._driver = driver
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._uploads: dict[str, _Upload] = {}

    def submit(self, request: pb.WorkspaceRequest, reply: Reply) -> None:
        """Start (or continue, for uploads; or cancel) a request; replies go to `reply`."""
        op = request.WhichOneof("op")
        if op == "cancel":
            self._cancel(request.request_id)
        elif op == "write_archive" and not request.write_archive.last:
            self._spool(request)
        else:
            task = asyncio.create_task(self._serve(request, reply), name=f"workspace-{op}")
            self._tasks[request.request_id] = task
            task.add_done_callback(lambda _t, rid=request.request_id: self._tasks.pop(rid, None))

    async def close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        for upload in self._uploads.values():
            upload.spool.close()
        self._uploads.clear()

    def _cancel(self, request_id: str) -> None:
        if task := self._tasks.get(request_id):
            task.cancel()
        if upload := self._uploads.pop(request_id, None):
            upload.spool.close()

    def _spool(self, request: pb.WorkspaceRequest) -> None:
        upload = self._uploads.setdefault(request.request_id, _Upload(request.write_archive.path))
        upload.size += len(request.write_archive.chunk)
        if upload.size <= MAX_UPLOAD_BYTES:
            upload.spool.write(request.write_archive.chunk)

    async def _serve(self, request: pb.WorkspaceRequest, reply: Reply) -> None:
        rid = request.request_id
        try:
            sandbox = await self._sandbox_of(request.session_id)
            if sandbox is None or not sandbox.workspace.is_dir():
                raise WorkspaceError(grpc.StatusCode.FAILED_PRECONDITION, "RUNTIME_NOT_AVAILABLE",
                                     f"session {request.session_id} has no sandbox on this agent right now; "
                                     "send it a message to bring it back")
            op = request.WhichOneof("op")
            if op == "list_directory":
                listing = await asyncio.to_thread(_list, sandbox.workspace, request.list_directory.path)
                await reply(pb.WorkspaceReply(request_id=rid, last=True, listing=listing))
            elif op == "read_archive":
                await self._download(sandbox, request.read_archive.path, rid, reply)
            elif op == "write_archive":
                self._spool(request)
                written = await self._unpack(sandbox, rid)
                await reply(pb.WorkspaceReply(request_id=rid, last=True, written=written))
            elif op == "exec_command":
                await self._exec(sandbox, request.exec_command, rid, reply)
            else:
                raise WorkspaceError(grpc.StatusCode.UNIMPLEMENTED, "NOT_IMPLEMENTED", f"unknown workspace op {op!r}")
        except WorkspaceError as error:
            await _report(reply, rid, error)
        except asyncio.CancelledError:
            log.info("workspace_request_cancelled", request_id=rid)
            raise
        except Exception as error:  # report, never leave the client hanging
            log.warning("workspace_request_failed", request_id=rid, error=repr(error))
            await _report(reply, rid, WorkspaceError(grpc.StatusCode.INTERNAL, "INTERNAL", f"the agent failed: {error}"))
        finally:
            if upload := self._uploads.pop(rid, None):
                upload.spool.close()

    async def _download(self, sandbox: Sandbox, path: str, rid: str, reply: Reply) -> None:
        target = confine(sandbox.workspace, path)
        if not target.exists():
            raise _not_found(path)
        with tempfile.SpooledTemporaryFile(max_size=8 * CHUNK_BYTES) as spool:
            await asyncio.to_thread(_pack, target, sandbox.workspace.resolve(), spool)
            spool.seek(0)
            while chunk := spool.read(CHUNK_BYTES):
                await reply(pb.WorkspaceReply(request_id=rid, archive_chunk=chunk))
        await reply(pb.WorkspaceReply(request_id=rid, last=True, archive_chunk=b""))

    async def _unpack(self, sandbox: Sandbox, rid: str) -> pb.ArchiveWritten:
        upload = self._uploads[rid]
        if upload.size > MAX_UPLOAD_BYTES:
            raise WorkspaceError(grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_LARGE",
                                 f"the upload is larger than {MAX_UPLOAD_BYTES // 2**20} MiB")
        destination = confine(sandbox.workspace, upload.target)
        upload.spool.seek(0)
        return await asyncio.to_thread(_extract, upload.spool, destination, sandbox.workspace)

    async def _exec(self, sandbox: Sandbox, command: pb.ExecCommand, rid: str, reply: Reply) -> None:
        if not command.command.strip():
            raise WorkspaceError(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", "command must not be empty")
        env = {"PATH": _EXEC_PATH, "LANG": "C.UTF-8", "TERM": "dumb"}
        launcher = await self._driver.launcher(sandbox, ["/bin/bash", "-lc"], env)
        process = await asyncio.create_subprocess_exec(
            str(launcher), command.command, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )

        async def pump(stream: asyncio.StreamReader, name: str) -> None:
            while chunk := await stream.read(CHUNK_BYTES):
                await reply(pb.WorkspaceReply(request_id=rid, **{name: chunk}))

        timeout = command.timeout_ms / 1000 if command.timeout_ms > 0 else DEFAULT_EXEC_TIMEOUT_S
        try:
            async with asyncio.timeout(timeout):
                assert process.stdout is not None and process.stderr is not None
                await asyncio.gather(pump(process.stdout, "stdout"), pump(process.stderr, "stderr"))
                code = await process.wait()
        except TimeoutError:
            _kill_group(process.pid)
            await process.wait()
            await reply(pb.WorkspaceReply(request_id=rid, stderr=f"\nkilled after {timeout:g} s\n".encode()))
            code = -signal.SIGKILL
        except asyncio.CancelledError:
            _kill_group(process.pid)
            raise
        await reply(pb.WorkspaceReply(request_id=rid, last=True, exit_code=code))


async def _report(reply: Reply, rid: str, error: WorkspaceError) -> None:
    try:
        await reply(pb.WorkspaceReply(request_id=rid, last=True, error=error.to_status()))
    except Exception as lost:  # the stream is gone: the client's call has failed already
        log.info("workspace_reply_lost", request_id=rid, error=repr(lost))


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _list(workspace: Path, path: str) -> pb.DirectoryListing:
    directory = confine(workspace, path)
    if not directory.is_dir():
        raise _not_found(path) if not directory.exists() else WorkspaceError(
            grpc.StatusCode.INVALID_ARGUMENT, "NOT_A_DIRECTORY", f"{path!r} is not a directory")
    entries = []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        info = entry.stat(follow_symlinks=False)
        kind = ("directory" if stat.S_ISDIR(info.st_mode) else "file" if stat.S_ISREG(info.st_mode)
                else "symlink" if stat.S_ISLNK(info.st_mode) else "other")
        modified = timestamp_pb2.Timestamp()
        modified.FromNanoseconds(info.st_mtime_ns)
        entries.append(pb.DirectoryEntry(name=entry.name, type=kind, size=info.st_size if kind == "file" else 0,
                                         mode=stat.S_IMODE(info.st_mode), modify_time=modified))
    return pb.DirectoryListing(entries=entries)


def _pack(target: Path, root: Path, out: IO[bytes]) -> None:
    # Symbolic links are archived as links, never followed, so nothing outside leaks in.
    arcname = "." if target == root else target.name
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        archive.add(target, arcname=arcname, recursive=True)


def _extract(spool: IO[bytes], destination: Path, workspace: Path) -> pb.ArchiveWritten:
    owner = workspace.stat()
    entries = size = 0
    destination.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(fileobj=spool, mode="r:*") as archive:
            members = []
            for member in archive:
                member = tarfile.data_filter(member, str(destination))
                members.append(member)
                entries += 1
                size += member.size if member.isfile() else 0
            archive.extractall(destination, members=members, filter="data")
    except tarfile.FilterError as error:
        raise WorkspaceError(grpc.StatusCode.PERMISSION_DENIED, "PATH_OUTSIDE_WORKSPACE",
                             f"the archive writes outside the workspace: {error}") from None
    except tarfile.TarError as error:
        raise WorkspaceError(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARCHIVE", f"not a tar archive: {error}") from None
    # Files belong to whoever owns the workspace (the sandbox's user), not to the agent.
    for path in [destination, *(destination / m.name for m in members)]:
        with contextlib.suppress(OSError):
            os.lchown(path, owner.st_uid, owner.st_gid)
    return pb.ArchiveWritten(entries=entries, bytes=size)
