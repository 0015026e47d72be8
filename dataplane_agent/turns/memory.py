"""A session's memory stores in its sandbox: put there before the engine starts, and what a turn
changed in the READ_WRITE ones read back when it ends.

Each store is a directory `~/memory/<store>/` of the sandbox's home (`/home/agent/memory/<store>/`
inside it). The agent writes it through `ConfinedRoot`, which follows no link, replacing each file
rather than writing through it, and removes what the store no longer holds; a READ_ONLY store's
files are made read-only (mode 0444: a hint to the sandbox's programs, which own them; whatever
they change is never sent back).

At a turn's end the READ_WRITE directories are read back as hostile input: walked one entry at a
time without following any link (links, devices, FIFOs are skipped and reported), bounded in
depth, number of files, size of each file and bytes per turn, and compared with what the agent put
there or last sent (`baseline`): only what differs is sent (`MemoryChanges`), before the output
that ends the turn. A change left out by the bytes-per-turn bound is sent at a later turn's end.
The control plane checks every path and content again.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field

import structlog

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.sandboxes.base import Sandbox
from dataplane_agent.sandboxes.confined import ConfinedRoot, PathRefused

log = structlog.get_logger(__name__)

MEMORY_DIR = "memory"
INNER_HOME = "/home/agent"
# The bounds of memory_service.proto (a store's documents, their size, their paths).
MAX_FILES = 500
MAX_FILE_BYTES = 256 * 1024
MAX_PATH_BYTES = 256
MAX_DEPTH = 16
# What one turn sends at most; the rest waits for a later turn's end.
MAX_TURN_BYTES = 2 * 1024 * 1024
MAX_REFUSED = 32
_NAME = re.compile(r"[a-z][a-z0-9-]{0,63}")
# ConfinedRoot's temporary files (`.<name>.astrabox-<pid>`), seen if a write is caught halfway.
_TEMPORARY = re.compile(r"\..*\.astrabox-\d+")
_READ_WRITE_MODE = 0o644
_READ_ONLY_MODE = 0o444


class MemoryRefused(Exception):
    """A store or document the control plane sent that the agent will not write."""


@dataclass
class MountedStore:
    """One store in the sandbox, and what the agent knows its directory holds: path → (sha256,
    the store's version the session's copy was; 0 for a document the session made)."""

    store_id: str
    name: str
    read_write: bool
    baseline: dict[str, tuple[str, int]] = field(default_factory=dict)
    # What the last read skipped: the same again is not reported at every turn's end.
    reported: tuple[str, ...] = ()


@dataclass
class SessionMemory:
    """A session's mounted stores."""

    stores: list[MountedStore]


def _digest(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def _parts(path: str) -> list[str]:
    """A document path as components; MemoryRefused unless it is one (the control plane checked it)."""
    parts = path.split("/")
    if (
        not path
        or len(path.encode()) > MAX_PATH_BYTES
        or len(parts) > MAX_DEPTH
        or any(p in ("", ".", "..") for p in parts)
        or any(ord(c) < 0x20 or c in "\x7f\\" for c in path)
    ):
        raise MemoryRefused(f"{path[:64]!r} is not a memory document path")
    return parts


async def install(sandbox: Sandbox, mounts: Sequence[pb.MemoryMount]) -> SessionMemory:
    """Write every store's documents under the sandbox's `~/memory/<store>/`, removing files the
    store does not hold; MemoryRefused (naming the store and the path) when one cannot be written."""
    home = ConfinedRoot(sandbox.home, INNER_HOME)
    stores = []
    for mount in mounts:
        if not _NAME.fullmatch(mount.name):
            raise MemoryRefused(f"{mount.name[:64]!r} is not a memory store name")
        planned = [(_parts(f.path), f) for f in mount.files]
        mode = _READ_WRITE_MODE if mount.read_write else _READ_ONLY_MODE
        root = [MEMORY_DIR, mount.name]
        try:
            await asyncio.to_thread(_install_store, home, root, planned, mode)
        except (OSError, PathRefused) as error:
            raise MemoryRefused(
                f"cannot put memory store {mount.name!r} into sandbox {sandbox.sandbox_id}: {error}"
            ) from error
        baseline = {document.path: (_digest(document.content), document.version) for _, document in planned}
        stores.append(MountedStore(mount.store_id, mount.name, mount.read_write, baseline))
    if stores:
        log.info("memory_installed", sandbox_id=sandbox.sandbox_id, stores=[s.name for s in stores])
    return SessionMemory(stores)


def _install_store(
    home: ConfinedRoot, root: list[str], planned: list[tuple[list[str], pb.MemoryFile]], mode: int
) -> None:
    """Write one store's documents (blocking: one thread for the whole store), then remove the files
    a previous start left that the store no longer holds (deleted or restored away)."""
    home.make_dirs(root)
    for parts, document in planned:
        home.replace_file([*root, *parts], document.content, mode)
    wanted = {document.path for _, document in planned}
    found, _ = _read_tree(home, root, MAX_FILES * 2, 0)
    for path in found:
        if path not in wanted:
            home.remove([*root, *path.split("/")])


async def changes(sandbox: Sandbox, memory: SessionMemory) -> pb.MemoryChanges | None:
    """What the turn changed in the READ_WRITE stores' directories (None: nothing), and the
    baselines moved on to it."""
    home = ConfinedRoot(sandbox.home, INNER_HOME)
    found = pb.MemoryChanges()
    budget = MAX_TURN_BYTES
    for mounted in memory.stores:
        if not mounted.read_write:
            continue
        try:
            files, refused = await asyncio.to_thread(
                _read_tree, home, [MEMORY_DIR, mounted.name], MAX_FILES, MAX_FILE_BYTES
            )
        except (OSError, PathRefused) as error:
            # Unreadable (replaced by a link, removed): nothing is taken for deleted.
            files, refused = dict.fromkeys(mounted.baseline), [f"the store's directory could not be read: {error}"]
        store = pb.MemoryStoreChanges(store_id=mounted.store_id)
        if tuple(refused) != mounted.reported:
            store.refused.extend(refused[:MAX_REFUSED])
            mounted.reported = tuple(refused)
        for path in sorted(set(files) | set(mounted.baseline)):
            content = files.get(path, b"")
            if content is None:
                continue
            known = mounted.baseline.get(path)
            base_version = known[1] if known is not None else 0
            if path not in files:
                store.changes.append(pb.MemoryFileChange(path=path, deleted=True, base_version=base_version))
                del mounted.baseline[path]
                continue
            digest = _digest(content)
            if known is not None and known[0] == digest:
                continue
            if len(content) > budget:
                if len(store.refused) < MAX_REFUSED:
                    store.refused.append(f"{path}: left for a later turn (this turn sent {MAX_TURN_BYTES} bytes)")
                continue
            budget -= len(content)
            store.changes.append(pb.MemoryFileChange(path=path, content=content, base_version=base_version))
            mounted.baseline[path] = (digest, base_version)
        if store.changes or store.refused:
            found.stores.append(store)
    return found if found.stores else None


def _plain_name(name: str) -> bool:
    """Whether a directory entry's name can be a path component of a document (the control plane
    checks the whole path again): UTF-8 (no surrogate escapes), no control character, no backslash."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c == "\\" for c in name)


def _shown(path: str) -> str:
    """A path the sandbox chose, fit to be quoted: escaped, bounded."""
    return ascii(path[:MAX_PATH_BYTES])


def _read_tree(
    home: ConfinedRoot, root: list[str], max_files: int, max_bytes: int
) -> tuple[dict[str, bytes | None], list[str]]:
    """The regular files under `root` by path (content unless `max_bytes` is 0), and what was
    skipped, and why. No link is followed; the walk stops at `max_files` files."""
    files: dict[str, bytes | None] = {}
    refused: list[str] = []
    pending: list[list[str]] = [[]]
    while pending:
        relative = pending.pop()
        for entry in home.list([*root, *relative]):
            parts = [*relative, entry.name]
            path = "/".join(parts)
            mode = entry.info.st_mode
            if _TEMPORARY.fullmatch(entry.name):
                continue
            if not _plain_name(entry.name):
                if len(refused) < MAX_REFUSED:
                    refused.append(f"{_shown(path)}: not UTF-8, or holds a control character or backslash; not read")
                continue
            if stat.S_ISDIR(mode):
                if len(parts) < MAX_DEPTH:
                    pending.append(parts)
                elif len(refused) < MAX_REFUSED:
                    refused.append(f"{_shown(path)}: deeper than {MAX_DEPTH} directories, not read")
                continue
            if not stat.S_ISREG(mode):
                if len(refused) < MAX_REFUSED:
                    refused.append(f"{_shown(path)}: not a regular file (a link?), not read")
                continue
            if len(files) >= max_files:
                if len(refused) < MAX_REFUSED:
                    refused.append(f"more than {max_files} files: the rest were not read")
                return files, refused
            if not max_bytes:
                files[path] = None
                continue
            if entry.info.st_size > max_bytes:
                if len(refused) < MAX_REFUSED:
                    refused.append(f"{_shown(path)}: larger than {max_bytes} bytes, not read")
                continue
            try:
                files[path] = home.read_file([*root, *parts], max_bytes)
            except PathRefused as error:  # changed while read
                if len(refused) < MAX_REFUSED:
                    refused.append(f"{_shown(path)}: {error}")
    return files, refused
