"""Paths inside a sandbox's directory, read and written by the agent without ever following a link.

The agent runs with privileges the sandbox lacks (often as root), and the
sandbox may rewrite its own directories at any moment — a file swapped for a
symbolic link to /etc between a check and a use is enough to turn a root
`open` into a host compromise. So the agent never hands such a path to the
kernel to resolve. It walks it one component at a time from a directory file
descriptor of the sandbox directory, opening each with O_NOFOLLOW:

- A symbolic link met on the way is read (`readlinkat`) and interpreted as the
  sandbox sees it: a relative target from the link's directory, an absolute
  one only when it lies under the directory's inner mount point (`/workspace`,
  `/home/agent`); anything else leads outside and is refused. The kernel never
  follows a link for us, so a swap between our check and our use meets
  O_NOFOLLOW and fails instead of escaping.
- Lengths are bounded (components, whole path, depth, links followed) and a
  NUL is refused before any system call sees it.

`ConfinedRoot` is synchronous (it makes blocking system calls): call it
through `asyncio.to_thread`.
"""

from __future__ import annotations

import builtins
import contextlib
import enum
import errno
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255
MAX_DEPTH = 256
MAX_LINKS = 40
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Refusal(enum.Enum):
    """Why a path was refused."""

    INVALID = "invalid"  # NUL, a component or the whole path too long, too deep
    OUTSIDE = "outside"  # `..` above the root, an absolute path elsewhere, a link leading out
    NOT_FOUND = "not_found"
    NOT_A_DIRECTORY = "not_a_directory"
    LOOP = "loop"  # too many links, or the path changed under us


class PathRefused(Exception):
    """A path that names nothing the agent may touch beneath the root."""

    def __init__(self, refusal: Refusal, message: str) -> None:
        super().__init__(message)
        self.refusal = refusal


def split(path: str, inner_root: str) -> list[str]:
    """The components of a client's path, relative to the root: `''`, `.` or `inner_root` itself name
    the root; `inner_root/…` and relative paths name what is beneath; `..` and other absolute paths
    are refused. Bounds and NUL are checked here, before any system call."""
    if "\0" in path:
        raise PathRefused(Refusal.INVALID, "the path contains a NUL character")
    if len(path.encode()) > MAX_PATH_BYTES:
        raise PathRefused(Refusal.INVALID, f"the path is longer than {MAX_PATH_BYTES} bytes")
    text = path.strip()
    if text == inner_root or text.startswith(inner_root + "/"):
        text = text[len(inner_root) :]
    elif text.startswith("/"):
        raise PathRefused(Refusal.OUTSIDE, f"absolute paths must lie under {inner_root}")
    parts = [part for part in text.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise PathRefused(Refusal.OUTSIDE, "the path climbs out with '..'")
    check_parts(parts)
    return parts


def check_parts(parts: list[str]) -> None:
    """PathRefused(INVALID) unless every component and the depth are within bounds."""
    if len(parts) > MAX_DEPTH:
        raise PathRefused(Refusal.INVALID, f"the path is deeper than {MAX_DEPTH} directories")
    for part in parts:
        if len(part.encode()) > MAX_NAME_BYTES:
            raise PathRefused(Refusal.INVALID, f"a path component is longer than {MAX_NAME_BYTES} bytes")


@dataclass(frozen=True, slots=True)
class Entry:
    """One directory entry, as lstat saw it."""

    name: str
    info: os.stat_result


class ConfinedRoot:
    """A directory the agent works beneath; `inner_root` is where the sandbox sees it."""

    def __init__(self, root: Path, inner_root: str) -> None:
        self._root = root
        self._inner_root = inner_root.rstrip("/") or "/"

    def resolve(self, parts: list[str], *, follow_last: bool = True, allow_missing: bool = False) -> list[str]:
        """The canonical components `parts` lead to, links interpreted as the sandbox sees them.
        With `allow_missing`, a missing tail is kept as given (it may be made afterwards)."""
        pending = list(parts)
        resolved: list[str] = []
        links = 0
        with self._walk() as fds:
            while pending:
                name = pending.pop(0)
                if name in ("", "."):
                    continue
                if name == "..":
                    if not resolved:
                        raise PathRefused(Refusal.OUTSIDE, "a symbolic link on the path leads out")
                    resolved.pop()
                    os.close(fds.pop())
                    continue
                try:
                    info = os.stat(name, dir_fd=fds[-1], follow_symlinks=False)
                except FileNotFoundError:
                    if not allow_missing:
                        raise PathRefused(Refusal.NOT_FOUND, "the path does not exist") from None
                    if ".." in pending:
                        raise PathRefused(Refusal.OUTSIDE, "a symbolic link on the path leads out") from None
                    tail = [name, *(p for p in pending if p not in ("", "."))]
                    check_parts(resolved + tail)
                    return resolved + tail
                except OSError as error:
                    raise _refusal(error) from None
                if stat.S_ISLNK(info.st_mode) and (pending or follow_last):
                    links += 1
                    if links > MAX_LINKS:
                        raise PathRefused(Refusal.LOOP, f"more than {MAX_LINKS} symbolic links on the path")
                    from_root, target = self._link_target(fds[-1], name)
                    pending = target + pending
                    if from_root:
                        while fds[1:]:
                            os.close(fds.pop())
                        resolved.clear()
                    continue
                if pending and not stat.S_ISDIR(info.st_mode):
                    raise PathRefused(Refusal.NOT_A_DIRECTORY, "a component of the path is not a directory")
                resolved.append(name)
                check_parts(resolved)
                if pending:
                    fds.append(_open_dir(name, fds[-1]))
        return resolved

    def lstat(self, parts: list[str]) -> os.stat_result:
        """lstat of the canonical `parts` (the last one is not followed)."""
        with self._walk(parts[:-1]) as fds:
            if not parts:
                return os.fstat(fds[-1])
            try:
                return os.stat(parts[-1], dir_fd=fds[-1], follow_symlinks=False)
            except OSError as error:
                raise _refusal(error) from None

    def list(self, parts: list[str]) -> list[Entry]:
        """The entries of the directory at the canonical `parts`, sorted by name."""
        with self._walk(parts) as fds:
            entries = []
            with os.scandir(fds[-1]) as scan:
                for item in scan:
                    with contextlib.suppress(FileNotFoundError):  # removed while listed
                        entries.append(Entry(item.name, item.stat(follow_symlinks=False)))
        return sorted(entries, key=lambda e: e.name)

    def read_file(self, parts: builtins.list[str], max_bytes: int) -> bytes:
        """The regular file at the canonical `parts`, if not larger than `max_bytes`."""
        with self._walk(parts[:-1]) as fds:
            fd = _open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, fds[-1])
            with os.fdopen(fd, "rb") as handle:
                info = os.fstat(handle.fileno())
                if not stat.S_ISREG(info.st_mode):
                    raise PathRefused(Refusal.INVALID, "the path is not a regular file")
                if info.st_size > max_bytes:
                    raise PathRefused(Refusal.INVALID, f"the file is larger than {max_bytes} bytes")
                return handle.read(max_bytes + 1)[:max_bytes]

    def write_new_file(self, parts: builtins.list[str], content: bytes, mode: int = 0o600) -> bool:
        """Create the file at `parts` (and its missing directories) with `content`, owned like the
        root; False (and nothing written) when something is at `parts` already."""
        owner = os.stat(self._root, follow_symlinks=False)
        with self._walk(parts[:-1], create=True, owner=owner) as fds:
            with contextlib.suppress(FileNotFoundError):
                os.stat(parts[-1], dir_fd=fds[-1], follow_symlinks=False)
                return False
            _write_in(fds[-1], parts[-1], content, mode, owner)
            return True

    def replace_file(self, parts: builtins.list[str], content: bytes, mode: int = 0o644) -> None:
        """Make the file at `parts` (and its missing directories) hold `content`, owned like the
        root, whatever file or link was there: it is replaced, never written through (a directory
        there is refused)."""
        owner = os.stat(self._root, follow_symlinks=False)
        with self._walk(parts[:-1], create=True, owner=owner) as fds:
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISDIR(os.stat(parts[-1], dir_fd=fds[-1], follow_symlinks=False).st_mode):
                    raise PathRefused(Refusal.INVALID, "a directory is where the file should be")
            _write_in(fds[-1], parts[-1], content, mode, owner)

    def make_dirs(self, parts: builtins.list[str]) -> None:
        """Make the directory at `parts` and its missing parents, owned like the root (one that
        exists is kept; a link on the way is refused)."""
        owner = os.stat(self._root, follow_symlinks=False)
        with self._walk(parts, create=True, owner=owner):
            pass

    def remove(self, parts: builtins.list[str]) -> None:
        """Remove the file or link at the canonical `parts` (never what a link points to; a
        directory is refused)."""
        with self._walk(parts[:-1]) as fds:
            try:
                os.unlink(parts[-1], dir_fd=fds[-1])
            except IsADirectoryError:
                raise PathRefused(Refusal.INVALID, "the path is a directory") from None
            except OSError as error:
                raise _refusal(error) from None

    @contextlib.contextmanager
    def _walk(
        self, parts: Sequence[str] = (), *, create: bool = False, owner: os.stat_result | None = None
    ) -> Iterator[builtins.list[int]]:
        """Directory fds from the root down through `parts`, no link followed; closed on exit."""
        fds = [_open_root(self._root)]
        try:
            for name in parts:
                if create:
                    try:
                        os.mkdir(name, 0o755, dir_fd=fds[-1])
                        fd = _open_dir(name, fds[-1])
                        if owner is not None:
                            _take(fd, owner)
                        fds.append(fd)
                        continue
                    except FileExistsError:
                        pass
                    except OSError as error:
                        raise _refusal(error) from None
                fds.append(_open_dir(name, fds[-1]))
            yield fds
        finally:
            for fd in fds:
                os.close(fd)

    def _link_target(self, dir_fd: int, name: str) -> tuple[bool, builtins.list[str]]:
        """Whether a link's target starts again from the root, and its components."""
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError as error:
            raise _refusal(error) from None
        if not target.startswith("/"):
            return False, list(PurePosixPath(target).parts)
        if target != self._inner_root and not target.startswith(self._inner_root.rstrip("/") + "/"):
            raise PathRefused(Refusal.OUTSIDE, "a symbolic link on the path leads out")
        return True, [p for p in target[len(self._inner_root) :].split("/") if p]


def _open_root(root: Path) -> int:
    try:
        return os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        raise PathRefused(Refusal.NOT_FOUND, "the sandbox directory is gone") from None


def _open_dir(name: str, dir_fd: int) -> int:
    return _open(name, _DIR_FLAGS, dir_fd)


def _open(name: str, flags: int, dir_fd: int, mode: int = 0o600) -> int:
    try:
        return os.open(name, flags, mode, dir_fd=dir_fd)
    except OSError as error:
        raise _refusal(error) from None


def _write_in(dir_fd: int, name: str, content: bytes, mode: int, owner: os.stat_result) -> None:
    """Write `content` to a new file beside `name` and rename it to `name`: a reader never sees it
    half written, and whatever was at `name` (a link too) is replaced, not followed."""
    temporary = f".{name}.astrabox-{os.getpid()}"
    fd = _open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
            _take(handle.fileno(), owner)
            os.fchmod(handle.fileno(), mode)
        os.rename(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise


def _take(fd: int, owner: os.stat_result) -> None:
    """Give what the agent made to the owner of the root (the sandbox's user), when it may."""
    if os.geteuid() == 0:
        os.fchown(fd, owner.st_uid, owner.st_gid)


def _refusal(error: OSError) -> PathRefused:
    """The refusal an OS error on a confined path stands for."""
    if error.errno == errno.ENOENT:
        return PathRefused(Refusal.NOT_FOUND, "the path does not exist")
    if error.errno == errno.ENOTDIR:
        return PathRefused(Refusal.NOT_A_DIRECTORY, "a component of the path is not a directory")
    if error.errno == errno.ELOOP:  # O_NOFOLLOW met a link: it was swapped in under us
        return PathRefused(Refusal.LOOP, "the path changed while it was being read")
    if error.errno == errno.ENAMETOOLONG:
        return PathRefused(Refusal.INVALID, "the path is too long")
    if error.errno == errno.EEXIST:
        return PathRefused(Refusal.INVALID, "something else already exists at the path")
    if error.errno in (errno.EACCES, errno.EPERM):
        return PathRefused(Refusal.OUTSIDE, "the path is not accessible")
    raise error
