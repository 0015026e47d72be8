"""The latest engine transcript of every session, kept in the agent's state directory.

The engine keeps its conversation inside the sandbox; a copy outside it lets
the agent restore the conversation into a new sandbox when the old one is
lost. One file per session, replaced atomically, so a crash mid-write leaves
the previous snapshot intact.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


class TranscriptStore:
    """Save, load and forget the latest transcript per session."""

    def __init__(self, root: Path) -> None:
        self._root = root

    async def save(self, session_id: str, content: bytes) -> None:
        await asyncio.to_thread(self._save, session_id, content)

    async def load(self, session_id: str) -> bytes:
        """The latest transcript; empty when none was kept."""
        return await asyncio.to_thread(self._load, session_id)

    async def forget(self, session_id: str) -> None:
        await asyncio.to_thread(self._path(session_id).unlink, missing_ok=True)

    def _path(self, session_id: str) -> Path:
        return self._root / f"{_SAFE.sub('_', session_id)}.transcript"

    def _save(self, session_id: str, content: bytes) -> None:
        self._root.mkdir(parents=True, exist_ok=True)
        path = self._path(session_id)
        partial = path.with_suffix(".partial")
        with open(partial, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)

    def _load(self, session_id: str) -> bytes:
        try:
            return self._path(session_id).read_bytes()
        except FileNotFoundError:
            return b""
