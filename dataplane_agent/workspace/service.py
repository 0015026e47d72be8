"""Workspace requests: list, download, upload and run commands in a session's sandbox.

These are not durable: a client waits on the other end of the control plane,
and a broken stream fails its call. The agent does nothing privileged with
what the sandbox controls:

- paths are walked beneath the workspace with directory descriptors, never
  letting the host follow a link (`sandboxes.confined`): `..`, absolute paths
  elsewhere and links leading out are refused;
- uploads are checked and re-written by `archives` and unpacked by `tar`
  inside the sandbox, as its user; downloads are packed there the same way;
- a command's timeout, cancellation or end ends every process it started
  (`SandboxDriver.end_processes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import stat
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO

import grpc
import structlog
from google.protobuf import any_pb2, timestamp_pb2
from google.rpc import error_details_pb2, status_pb2

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.sandboxes.base import END_MARKED, RUN_MARKER, Sandbox, SandboxDriver, SandboxError
from dataplane_agent.sandboxes.confined import ConfinedRoot, PathRefused, Refusal, split
from dataplane_agent.workspace import archives
from dataplane_agent.workspace.archives import ArchiveRefused, UnpackLimits
from dataplane_agent.workspace.terminal import Terminal, TerminalOverflow

log = structlog.get_logger(__name__)

CHUNK_BYTES = 256 * 1024
MAX_UPLOAD_BYTES = 256 * 1024 * 1024
DEFAULT_EXEC_TIMEOUT_S = 600.0
_EXEC_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_ECHO_CHARS = 64
_STDERR_BYTES = 2048
# A workspace command inside the sandbox: $2 with the marker $1 in its environment (and its
# children's), then whatever it left running ended, in the same process: no second round trip.
_RUN = f'/usr/bin/env {RUN_MARKER}="$1" /bin/bash -lc "$2"\ncode=$?\n{END_MARKED}\nend_marked "$1"\nexit $code\n'
# tar inside the sandbox, as its user: $1 is the marker, $2 where it unpacks or packs from, $3 what it packs.
_UNPACK = f'export {RUN_MARKER}="$1"; mkdir -p -- "$2" && cd -- "$2" && exec tar -x -f - --no-same-owner --no-same-permissions --no-overwrite-dir'
# A terminal's program when the client names none: an interactive shell (`_RUN` made it a login one).
_SHELL = "exec /bin/bash -i"
_PACK = f'export {RUN_MARKER}="$1"; cd -- "$2" && exec tar -c -f - --format=pax -- "$3"'

Reply = Callable[[pb.WorkspaceReply], Awaitable[None]]
SandboxLookup = Callable[[str], Awaitable[Sandbox | None]]

_REFUSALS = {
    Refusal.INVALID: (grpc.StatusCode.INVALID_ARGUMENT, "PATH_INVALID"),
    Refusal.OUTSIDE: (grpc.StatusCode.PERMISSION_DENIED, "PATH_OUTSIDE_WORKSPACE"),
    Refusal.NOT_FOUND: (grpc.StatusCode.NOT_FOUND, "PATH_NOT_FOUND"),
    Refusal.NOT_A_DIRECTORY: (grpc.StatusCode.INVALID_ARGUMENT, "NOT_A_DIRECTORY"),
    Refusal.LOOP: (grpc.StatusCode.INVALID_ARGUMENT, "PATH_LOOP"),
}
_ARCHIVE_CODES = {
    "PATH_OUTSIDE_WORKSPACE": grpc.StatusCode.PERMISSION_DENIED,
    "TOO_MANY_ENTRIES": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "UNPACKED_TOO_LARGE": grpc.StatusCode.RESOURCE_EXHAUSTED,
}


class WorkspaceError(Exception):
    """A request the agent refuses, with the gRPC code and reason the client sees."""

    def __init__(self, code: grpc.StatusCode, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def to_status(self) -> status_pb2.Status:
        detail = any_pb2.Any()
        detail.Pack(error_details_pb2.ErrorInfo(reason=self.reason, domain="astrabox.dev"))
        return status_pb2.Status(code=self.code.value[0], message=self.message, details=[detail])


def echo(path: str) -> str:
    """A client's path as an error message may quote it: a bounded prefix."""
    return repr(path[:_ECHO_CHARS] + ("…" if len(path) > _ECHO_CHARS else ""))


def locate(sandbox: Sandbox, path: str, *, allow_missing: bool = False) -> list[str]:
    """The canonical components of a client's path under the sandbox's workspace (blocking)."""
    try:
        parts = split(path, sandbox.inner_workspace)
    except PathRefused as refused:
        code = grpc.StatusCode.INVALID_ARGUMENT
        reason = "PATH_OUTSIDE_WORKSPACE" if refused.refusal is Refusal.OUTSIDE else "PATH_INVALID"
        raise WorkspaceError(code, reason, f"{echo(path)}: {refused}") from None
    try:
        return _root(sandbox).resolve(parts, allow_missing=allow_missing)
    except PathRefused as refused:
        raise _refused(path, refused) from None


def _root(sandbox: Sandbox) -> ConfinedRoot:
    return ConfinedRoot(sandbox.workspace, sandbox.inner_workspace)


def _refused(path: str, refused: PathRefused) -> WorkspaceError:
    code, reason = _REFUSALS[refused.refusal]
    return WorkspaceError(code, reason, f"{echo(path or '.')}: {refused}")


def _inner(sandbox: Sandbox, parts: Sequence[str]) -> str:
    return "/".join([sandbox.inner_workspace.rstrip("/"), *parts])


def _spool_file() -> IO[bytes]:
    """Where an upload's chunks wait until its last one (closed, so removed, when it is done)."""
    return tempfile.TemporaryFile(prefix="astrabox-upload-")


@dataclass
class _Upload:
    target: str
    spool: IO[bytes] = field(default_factory=_spool_file)
    size: int = 0


class WorkspaceService:
    """Serves the control plane's workspace requests; owns their tasks."""

    def __init__(
        self,
        sandbox_of: SandboxLookup,
        driver: SandboxDriver,
        limits: UnpackLimits = UnpackLimits(),
        room: Callable[[Sandbox], Awaitable[int]] | None = None,
        network_env: Callable[[str], Mapping[str, str]] | None = None,
    ) -> None:
        self._sandbox_of = sandbox_of
        # A session's way out (the egress proxy's variables; none without network access).
        self._network_env = network_env or (lambda session_id: {})
        self._driver = driver
        self._limits = limits
        # Bytes a workspace may still take: its file system's free space, or what a measured
        # disk limit leaves (runtimes.disk_limit).
        self._room = room or _free_bytes
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._uploads: dict[str, _Upload] = {}
        self._terminals: dict[str, Terminal] = {}

    def submit(self, request: pb.WorkspaceRequest, reply: Reply) -> None:
        """Start (or continue, for uploads; or cancel) a request; replies go to `reply`."""
        op = request.WhichOneof("op")
        if op == "cancel":
            self._cancel(request.request_id)
        elif op == "terminal_input":
            if terminal := self._terminals.get(request.request_id):  # else it ended: nothing to give it to
                terminal.feed(request.terminal_input)
        elif op == "write_archive" and not request.write_archive.last:
            self._spool(request)
        else:
            if op == "open_terminal" and request.request_id not in self._terminals:
                # Made now, not in the task: the first keystrokes may follow right behind.
                opening = request.open_terminal
                self._terminals[request.request_id] = Terminal(
                    opening.rows, opening.columns, raw=self._driver.relays_terminal
                )
            task = asyncio.create_task(self._serve(request, reply), name=f"workspace-{op}")
            self._tasks[request.request_id] = task
            task.add_done_callback(functools.partial(self._forget, request.request_id))

    def _forget(self, request_id: str, _task: asyncio.Task[None]) -> None:
        self._tasks.pop(request_id, None)

    async def close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        for upload in self._uploads.values():
            upload.spool.close()
        self._uploads.clear()
        for terminal in self._terminals.values():
            terminal.close()
        self._terminals.clear()

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
                raise WorkspaceError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    "RUNTIME_NOT_AVAILABLE",
                    f"session {request.session_id[:64]} has no sandbox on this agent right now; "
                    "send it a message to bring it back",
                )
            op = request.WhichOneof("op")
            if op == "list_directory":
                listing = await asyncio.to_thread(_list, sandbox, request.list_directory.path)
                await reply(pb.WorkspaceReply(request_id=rid, last=True, listing=listing))
            elif op == "read_archive":
                await self._download(sandbox, request.read_archive.path, rid, reply)
            elif op == "write_archive":
                self._spool(request)
                written = await self._unpack(sandbox, rid)
                await reply(pb.WorkspaceReply(request_id=rid, last=True, written=written))
            elif op == "exec_command":
                await self._exec(sandbox, request.exec_command, rid, reply)
            elif op == "open_terminal":
                await self._terminal(sandbox, request.open_terminal, rid, reply)
            else:
                raise WorkspaceError(
                    grpc.StatusCode.UNIMPLEMENTED,
                    "NOT_IMPLEMENTED",
                    f"this agent does not know the workspace operation {op!r}",
                )
        except WorkspaceError as error:
            await _report(reply, rid, error)
        except SandboxError as error:
            log.info("workspace_sandbox_unavailable", request_id=rid, error=str(error))
            await _report(
                reply,
                rid,
                WorkspaceError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    "RUNTIME_NOT_AVAILABLE",
                    "the session's sandbox is not running right now; send it a message to start it again",
                ),
            )
        except asyncio.CancelledError:
            log.info("workspace_request_cancelled", request_id=rid)
            raise
        except Exception:  # report, never leave the client hanging; the details stay in the log
            ref = uuid.uuid4().hex[:12]
            log.exception("workspace_request_failed", request_id=rid, ref=ref)
            await _report(
                reply, rid, WorkspaceError(grpc.StatusCode.INTERNAL, "INTERNAL", f"internal error (ref {ref})")
            )
        finally:
            if upload := self._uploads.pop(rid, None):
                upload.spool.close()
            if terminal := self._terminals.pop(rid, None):
                terminal.close()

    async def _download(self, sandbox: Sandbox, path: str, rid: str, reply: Reply) -> None:
        parts = await asyncio.to_thread(locate, sandbox, path)
        where, what = (parts[:-1], parts[-1]) if parts else ([], ".")

        async def send(stdout: asyncio.StreamReader | None) -> None:
            assert stdout is not None
            while chunk := await stdout.read(CHUNK_BYTES):
                await reply(pb.WorkspaceReply(request_id=rid, archive_chunk=chunk))

        async with self._in_sandbox(
            sandbox, ["/bin/sh", "-c", _PACK, "astrabox-download"], rid, _inner(sandbox, where), what
        ) as process:
            _, stderr = await asyncio.gather(send(process.stdout), _bounded(process.stderr))
            if await process.wait() not in (0, 1):  # 1: a file changed as it was read; the archive stands
                raise WorkspaceError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    "ARCHIVE_FAILED",
                    f"tar in the sandbox could not pack {echo(path)}: {stderr}",
                )
        await reply(pb.WorkspaceReply(request_id=rid, last=True, archive_chunk=b""))

    async def _unpack(self, sandbox: Sandbox, rid: str) -> pb.ArchiveWritten:
        upload = self._uploads[rid]
        if upload.size > MAX_UPLOAD_BYTES:
            raise WorkspaceError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "TOO_LARGE",
                f"the upload is larger than {MAX_UPLOAD_BYTES // 2**20} MiB",
            )
        parts = await asyncio.to_thread(locate, sandbox, upload.target, allow_missing=True)
        try:
            checked = await asyncio.to_thread(archives.check, upload.spool, parts, self._limits)
        except ArchiveRefused as refused:
            code = _ARCHIVE_CODES.get(refused.reason, grpc.StatusCode.INVALID_ARGUMENT)
            raise WorkspaceError(code, refused.reason, str(refused)) from None
        free = await self._room(sandbox)
        if checked.bytes > free:
            raise WorkspaceError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "WORKSPACE_FULL",
                f"the archive unpacks to {checked.bytes} bytes; the workspace has {free} bytes free",
            )
        reading, writing = os.pipe()
        try:
            async with self._in_sandbox(
                sandbox, ["/bin/sh", "-c", _UNPACK, "astrabox-upload"], rid, _inner(sandbox, parts), stdin=reading
            ) as process:
                os.close(reading)
                reading = -1
                feeding = asyncio.create_task(asyncio.to_thread(_feed, upload.spool, parts, self._limits, writing))
                writing = -1  # _feed closes it
                stderr = await _bounded(process.stderr)
                code = await process.wait()
                await feeding  # a failure to re-write the checked archive is the agent's: INTERNAL
        finally:
            for fd in (reading, writing):
                if fd >= 0:
                    os.close(fd)
        if code != 0:
            raise WorkspaceError(
                grpc.StatusCode.FAILED_PRECONDITION,
                "UNPACK_FAILED",
                f"tar in the sandbox could not unpack the archive: {stderr}",
            )
        return pb.ArchiveWritten(entries=checked.entries, bytes=checked.bytes)

    async def _exec(self, sandbox: Sandbox, command: pb.ExecCommand, rid: str, reply: Reply) -> None:
        if not command.command.strip():
            raise WorkspaceError(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", "command must not be empty")
        if "\0" in command.command:
            raise WorkspaceError(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", "command must not contain NUL")

        async def pump(stream: asyncio.StreamReader | None, name: str) -> None:
            assert stream is not None
            while chunk := await stream.read(CHUNK_BYTES):
                out = pb.WorkspaceReply(request_id=rid)
                setattr(out, name, chunk)  # stdout or stderr
                await reply(out)

        timeout = command.timeout_ms / 1000 if command.timeout_ms > 0 else DEFAULT_EXEC_TIMEOUT_S
        async with self._in_sandbox(
            sandbox, ["/bin/bash", "-c", _RUN, "astrabox-run"], rid, command.command
        ) as process:
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.gather(pump(process.stdout, "stdout"), pump(process.stderr, "stderr"))
                    code = await process.wait()
            except TimeoutError:
                code = None
        if code is None:
            await reply(pb.WorkspaceReply(request_id=rid, stderr=f"\nkilled after {timeout:g} s\n".encode()))
            code = -signal.SIGKILL
        await reply(pb.WorkspaceReply(request_id=rid, last=True, exit_code=code))

    async def _terminal(self, sandbox: Sandbox, opening: pb.OpenTerminal, rid: str, reply: Reply) -> None:
        if "\0" in opening.command:
            raise WorkspaceError(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", "command must not contain NUL")
        terminal = self._terminals[rid]

        async def send(chunk: bytes) -> None:
            await reply(pb.WorkspaceReply(request_id=rid, stdout=chunk))

        async def keepalive() -> None:
            await reply(pb.WorkspaceReply(request_id=rid))

        log.info("terminal_opened", request_id=rid, session_id=sandbox.session_id)
        try:
            async with self._in_sandbox(
                sandbox,
                ["/bin/bash", "-c", _RUN, "astrabox-terminal"],
                rid,
                opening.command or _SHELL,
                terminal=terminal,
                term=opening.term,  # the control plane's default when the client gave none
            ) as process:
                code = await terminal.serve(process, send, keepalive)
        except TerminalOverflow as overflow:
            raise WorkspaceError(overflow.code, overflow.reason, str(overflow)) from None
        log.info("terminal_closed", request_id=rid, session_id=sandbox.session_id, exit_code=code)
        await reply(pb.WorkspaceReply(request_id=rid, last=True, exit_code=code))

    @contextlib.asynccontextmanager
    async def _in_sandbox(
        self,
        sandbox: Sandbox,
        argv: list[str],
        rid: str,
        *args: str,
        stdin: int = asyncio.subprocess.DEVNULL,
        terminal: Terminal | None = None,
        term: str = "dumb",
    ) -> AsyncIterator[asyncio.subprocess.Process]:
        """`argv` running inside the sandbox as its user, given a fresh marker and then `args`; one
        that does not end by itself is ended with every process it started. On `terminal`, when
        given (its stdin, stdout and stderr), else on pipes."""
        marker = uuid.uuid4().hex
        env = {**self._network_env(sandbox.session_id), "PATH": _EXEC_PATH, "LANG": "C.UTF-8", "TERM": term}
        launcher = await self._driver.launcher(sandbox, argv[:1], env, terminal=terminal is not None)
        pipe = asyncio.subprocess.PIPE
        inward, outward, errors = (stdin, pipe, pipe) if terminal is None else (terminal.terminal_fd,) * 3
        process = await asyncio.create_subprocess_exec(
            str(launcher), *argv[1:], marker, *args, stdin=inward, stdout=outward, stderr=errors, start_new_session=True
        )
        if terminal is not None:
            terminal.started(process.pid)
        try:
            yield process
        finally:
            ended = process.returncode is not None
            _kill_group(process.pid)
            with contextlib.suppress(ProcessLookupError):
                await asyncio.shield(process.wait())
            if not ended:
                await asyncio.shield(self._driver.end_processes(sandbox, marker))


async def _report(reply: Reply, rid: str, error: WorkspaceError) -> None:
    try:
        await reply(pb.WorkspaceReply(request_id=rid, last=True, error=error.to_status()))
    except Exception as lost:  # the stream is gone: the client's call has failed already
        log.info("workspace_reply_lost", request_id=rid, error=repr(lost))


async def _bounded(stream: asyncio.StreamReader | None) -> str:
    """What a sandbox program wrote to `stream`, cut to a size an error message may quote."""
    if stream is None:
        return ""
    kept = b""
    while chunk := await stream.read(CHUNK_BYTES):
        kept = (kept + chunk)[:_STDERR_BYTES]
    return kept.decode(errors="replace").strip()


def _feed(spool: IO[bytes], parts: list[str], limits: UnpackLimits, fd: int) -> None:
    """Write the canonical copy of the checked upload into the sandbox's tar (a thread)."""
    with open(fd, "wb", closefd=True) as out, contextlib.suppress(BrokenPipeError):
        archives.rewrite(spool, parts, limits, out)


async def _free_bytes(sandbox: Sandbox) -> int:
    """Room left in the workspace's file system (its own image, under a disk limit)."""
    info = await asyncio.to_thread(os.statvfs, sandbox.workspace)
    return info.f_bavail * info.f_frsize


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _list(sandbox: Sandbox, path: str) -> pb.DirectoryListing:
    parts = locate(sandbox, path)
    try:
        if parts and not stat.S_ISDIR(_root(sandbox).lstat(parts).st_mode):
            raise WorkspaceError(
                grpc.StatusCode.INVALID_ARGUMENT, "NOT_A_DIRECTORY", f"{echo(path)} is not a directory"
            )
        found = _root(sandbox).list(parts)
    except PathRefused as refused:
        raise _refused(path, refused) from None
    entries = []
    for entry in found:
        info = entry.info
        kind = (
            "directory"
            if stat.S_ISDIR(info.st_mode)
            else "file"
            if stat.S_ISREG(info.st_mode)
            else "symlink"
            if stat.S_ISLNK(info.st_mode)
            else "other"
        )
        modified = timestamp_pb2.Timestamp()
        modified.FromNanoseconds(info.st_mtime_ns)
        entries.append(
            pb.DirectoryEntry(
                name=entry.name,
                type=kind,
                size=info.st_size if kind == "file" else 0,
                mode=stat.S_IMODE(info.st_mode),
                modify_time=modified,
            )
        )
    return pb.DirectoryListing(entries=entries)
