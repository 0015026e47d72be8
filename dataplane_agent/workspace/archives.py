"""What an uploaded tar archive may contain, checked and re-written before the sandbox unpacks it.

An upload is never unpacked by the agent: the sandbox's own `tar` unpacks it,
as the sandbox's user, inside the sandbox, so whatever an archive or a tar
implementation gets wrong can only reach what the sandbox could reach anyway.
The agent only reads the archive (never trusting `tarfile`'s extraction
filters) and hands the sandbox a canonical copy in which:

- names are relative, normalised and bounded (no `..`, no absolute names, no
  NUL; components, total length and depth capped);
- only regular files, directories and links survive. A symbolic link must
  point, read from where it is, somewhere inside the workspace (a relative
  target that does not climb out, or an absolute one under /workspace); a
  hard link must name a regular file earlier in the same archive. No member
  may be written through a symbolic link the archive itself made. Device
  nodes, FIFOs and anything else are refused;
- permissions keep their rwx bits only (setuid, setgid and sticky are
  dropped) and owners are dropped (the sandbox's user owns what it unpacks);
- the unpacked size and the number of entries are capped, counted from the
  decompressed stream itself, so a compression bomb or a giant header stops
  at the limit instead of filling memory or disk.

`check` reads the whole archive first, so a refused upload writes nothing;
`rewrite` then streams the canonical copy.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import posixpath
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Protocol, cast

from dataplane_agent.sandboxes.confined import MAX_DEPTH, MAX_NAME_BYTES, MAX_PATH_BYTES

# Room for headers (PAX records, long names) above the unpacked bytes allowed.
_HEADER_ALLOWANCE = 64 * 1024 * 1024
_READ_BYTES = 1024 * 1024


DEFAULT_MAX_BYTES = 1024 * 1024 * 1024
DEFAULT_MAX_ENTRIES = 100_000


@dataclass(frozen=True, slots=True)
class UnpackLimits:
    """Bounds on what one upload may unpack to (the agent's --upload-* settings)."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_entries: int = DEFAULT_MAX_ENTRIES


class ArchiveRefused(Exception):
    """The archive breaks the policy above; `reason` is the ErrorInfo reason a client sees."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Checked:
    """What a checked archive will unpack."""

    entries: int
    bytes: int


def check(source: IO[bytes], destination: list[str], limits: UnpackLimits) -> Checked:
    """Read the whole archive and refuse it (ArchiveRefused) if anything in it breaks the policy.
    `destination` is where it unpacks, as components under the workspace."""
    entries = size = 0
    for archive, member, _name in _members(source, destination, limits):
        entries += 1
        size += member.size if member.isreg() else 0
        if entries > limits.max_entries:
            raise ArchiveRefused("TOO_MANY_ENTRIES", f"the archive has more than {limits.max_entries} entries")
        if size > limits.max_bytes:
            raise ArchiveRefused("UNPACKED_TOO_LARGE", f"the archive unpacks to more than {limits.max_bytes} bytes")
        if member.isreg():
            _read_through(archive, member)
    return Checked(entries=entries, bytes=size)


def _read_through(archive: tarfile.TarFile, member: tarfile.TarInfo) -> None:
    """Read a member's data to its end: a truncated archive is refused here, not half-unpacked."""
    data = archive.extractfile(member)
    assert data is not None
    left = member.size
    try:
        while left > 0:
            chunk = data.read(min(left, _READ_BYTES))
            if not chunk:
                raise ArchiveRefused("INVALID_ARCHIVE", "the archive is truncated")
            left -= len(chunk)
    except _UNREADABLE as error:
        raise _unreadable(error) from None


def rewrite(source: IO[bytes], destination: list[str], limits: UnpackLimits, out: IO[bytes]) -> None:
    """Write the canonical copy of a checked archive to `out`."""
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as copy:
        for archive, member, name in _members(source, destination, limits):
            clean = tarfile.TarInfo(name)
            clean.type = member.type
            clean.mode = member.mode & 0o777
            clean.mtime = max(0, int(member.mtime))
            if member.issym() or member.islnk():
                clean.linkname = _canonical_link(member, name)
            data = None
            if member.isreg():
                clean.size = member.size
                data = archive.extractfile(member)
            copy.addfile(clean, data)


def _members(
    source: IO[bytes], destination: list[str], limits: UnpackLimits
) -> Iterator[tuple[tarfile.TarFile, tarfile.TarInfo, str]]:
    """Each member, checked against the policy, with its archive (streamed: only the current
    member's data can be read) and its canonical name."""
    source.seek(0)
    reader = _Bounded(_decompressed(source), limits.max_bytes + _HEADER_ALLOWANCE)
    links: set[str] = set()
    files: set[str] = set()
    try:
        # tarfile reads a stream with `read` alone; its stubs ask for a whole file object.
        with tarfile.open(fileobj=cast(IO[bytes], reader), mode="r|") as archive:
            for member in archive:
                name = _canonical_name(member.name)
                if not name:
                    continue  # the archive's own root ("." or "./")
                _check_member(member, name, destination, links, files)
                yield archive, member, name
    except ArchiveRefused:
        raise
    except _UNREADABLE as error:
        raise _unreadable(error) from None


# What the tar, gzip, bzip2 and xz readers raise on input that is not what it claims to be.
_UNREADABLE = (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError, ValueError)


def _unreadable(error: Exception) -> ArchiveRefused:
    return ArchiveRefused("INVALID_ARCHIVE", f"not a readable tar archive: {type(error).__name__}")


def _check_member(member: tarfile.TarInfo, name: str, destination: list[str], links: set[str], files: set[str]) -> None:
    parts = name.split("/")
    if len(destination) + len(parts) > MAX_DEPTH or len(name.encode()) > MAX_PATH_BYTES:
        raise ArchiveRefused(
            "PATH_TOO_LONG", f"a member's path is deeper than {MAX_DEPTH} or longer than {MAX_PATH_BYTES} bytes"
        )
    if any(len(part.encode()) > MAX_NAME_BYTES for part in parts):
        raise ArchiveRefused("PATH_TOO_LONG", f"a member's name has a component longer than {MAX_NAME_BYTES} bytes")
    if any("/".join(parts[:i]) in links for i in range(1, len(parts))):
        raise ArchiveRefused("PATH_OUTSIDE_WORKSPACE", "a member is written through a symbolic link the archive made")
    if member.issym():
        _check_symlink(member.linkname, destination + parts[:-1])
        links.add(name)
    elif member.islnk():
        if _canonical_name(member.linkname) not in files:
            raise ArchiveRefused(
                "PATH_OUTSIDE_WORKSPACE", "a hard link names a file that is not earlier in the archive"
            )
    elif member.isreg():
        files.add(name)
    elif not member.isdir():
        raise ArchiveRefused(
            "ARCHIVE_MEMBER_UNSUPPORTED",
            "the archive holds a device node, FIFO or other special file; only files, "
            "directories and links are unpacked",
        )
    if not member.issym():
        links.discard(name)  # replaced by a file or directory: writing beneath it no longer follows a link


def _check_symlink(target: str, directory: list[str]) -> None:
    if not target or "\0" in target or len(target.encode()) > MAX_PATH_BYTES:
        raise ArchiveRefused("PATH_OUTSIDE_WORKSPACE", "a symbolic link has an empty or invalid target")
    if target.startswith("/"):
        if target == "/workspace" or target.startswith("/workspace/"):
            return
        raise ArchiveRefused("PATH_OUTSIDE_WORKSPACE", "a symbolic link points outside the workspace")
    depth = len(directory)
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                raise ArchiveRefused("PATH_OUTSIDE_WORKSPACE", "a symbolic link points outside the workspace")
        elif part not in ("", "."):
            depth += 1


def _canonical_name(name: str) -> str:
    """The member's name relative to the archive root; ArchiveRefused if it leaves it."""
    if name.startswith("/"):
        raise ArchiveRefused("PATH_OUTSIDE_WORKSPACE", "a member has an absolute name")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ArchiveRefused("PATH_OUTSIDE_WORKSPACE", "a member climbs out of the destination with '..'")
    return "/".join(parts)


def _canonical_link(member: tarfile.TarInfo, name: str) -> str:
    if member.islnk():
        return _canonical_name(member.linkname)
    return posixpath.normpath(member.linkname) if not member.linkname.startswith("/") else member.linkname


class _Reader(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def _decompressed(source: IO[bytes]) -> _Reader:
    """The tar stream inside `source`, whichever compression (gzip, bzip2, xz or none) it has."""
    magic = source.read(6)
    source.seek(0)
    if magic.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=source, mode="rb")
    if magic.startswith(b"BZh"):
        return bz2.BZ2File(source)
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(source)
    return source


class _Bounded:
    """A reader that refuses to deliver more than `limit` bytes in all."""

    def __init__(self, inner: _Reader, limit: int) -> None:
        self._inner = inner
        self._left = limit

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > self._left:
            size = self._left + 1
        data = self._inner.read(size)
        self._left -= len(data)
        if self._left < 0:
            raise ArchiveRefused("UNPACKED_TOO_LARGE", "the archive unpacks to more than the upload limit allows")
        return data
