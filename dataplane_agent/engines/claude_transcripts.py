"""Claude Code's conversation transcripts in a sandbox: where the CLI keeps them, restoring one
(a conversation resumed on a new sandbox) and reading one out (to store it for the next).

The transcript is the sandbox's file, written by code the agent does not trust: it is read and
written only through `ConfinedRoot`, which follows no link, and never read past a bound.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import structlog

from dataplane_agent.engines.base import EngineConfig, EngineError
from dataplane_agent.sandboxes.base import Sandbox
from dataplane_agent.sandboxes.confined import ConfinedRoot, PathRefused, Refusal

log = structlog.get_logger(__name__)

# A transcript larger than this is not read out of the sandbox (it is the sandbox's file).
MAX_TRANSCRIPT_BYTES = 256 * 1024 * 1024


def transcript_path(sandbox: Sandbox, engine_session_id: str) -> Path:
    """Where the CLI keeps a conversation's transcript, as a host path (see `transcript_parts`)."""
    return sandbox.home.joinpath(*transcript_parts(sandbox, engine_session_id))


def transcript_parts(sandbox: Sandbox, engine_session_id: str) -> list[str]:
    """The transcript's path under the sandbox's home, as components.

    The CLI files it under its config directory (`~/.claude`) by project, the
    project being its working directory with every non-alphanumeric character
    turned into `-` (`/workspace` → `-workspace`). The home is the sandbox's:
    it is read and written only through `ConfinedRoot`, which follows no link.
    """
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,128}", engine_session_id):
        raise EngineError(f"{engine_session_id[:64]!r} is not a Claude Code session id")
    project = re.sub(r"[^A-Za-z0-9]", "-", sandbox.inner_workspace)
    return [".claude", "projects", project, f"{engine_session_id}.jsonl"]


def home(sandbox: Sandbox) -> ConfinedRoot:
    """The sandbox's home, read and written only through a root that follows no link."""
    return ConfinedRoot(sandbox.home, "/home/agent")


async def restore_transcript(sandbox: Sandbox, config: EngineConfig) -> None:
    """Put a stored transcript where the CLI will look for it when resuming.

    A transcript already in the sandbox is the CLI's own and at least as new, so it is kept."""
    if not config.resume_engine_session_id:
        raise EngineError(
            "a transcript can only be restored to resume its conversation: no engine session id was given"
        )
    parts = transcript_parts(sandbox, config.resume_engine_session_id)
    try:
        restored = await asyncio.to_thread(home(sandbox).write_new_file, parts, config.transcript)
    except (OSError, PathRefused) as error:
        raise EngineError(f"cannot restore the transcript into sandbox {sandbox.sandbox_id}: {error}") from error
    log.debug(
        "transcript_restored" if restored else "transcript_kept",
        sandbox_id=sandbox.sandbox_id,
        bytes=len(config.transcript),
    )


async def has_transcript(sandbox: Sandbox, engine_session_id: str) -> bool:
    """Whether the sandbox holds the conversation's transcript, the file the CLI resumes from.

    A CLI killed early in its conversation's first turn may not have written one yet."""
    try:
        await asyncio.to_thread(home(sandbox).lstat, transcript_parts(sandbox, engine_session_id))
    except PathRefused as refused:
        if refused.refusal is Refusal.NOT_FOUND:
            return False
        raise EngineError(f"cannot look for the transcript of {engine_session_id}: {refused}") from None
    except OSError as error:
        raise EngineError(f"cannot look for the transcript of {engine_session_id}: {error!r}") from error
    return True


async def read_transcript(sandbox: Sandbox, engine_session_id: str, timeout: float) -> bytes:
    """The conversation's transcript as the CLI left it in the sandbox (empty: it wrote none);
    at most MAX_TRANSCRIPT_BYTES, read through the confined home."""
    parts = transcript_parts(sandbox, engine_session_id)
    try:
        async with asyncio.timeout(timeout):
            return await asyncio.to_thread(home(sandbox).read_file, parts, MAX_TRANSCRIPT_BYTES)
    except PathRefused as refused:
        if refused.refusal is Refusal.NOT_FOUND:
            return b""
        raise EngineError(f"cannot read the transcript ~/{'/'.join(parts)}: {refused}") from None
    except (OSError, TimeoutError) as error:
        raise EngineError(f"cannot read the transcript ~/{'/'.join(parts)}: {error!r}") from error
