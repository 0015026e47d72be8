"""An agent's skills, installed into the sandbox where Claude Code finds them.

Claude Code loads a user's skills from `~/.claude/skills/<name>/SKILL.md` (and the files beside
it) when its "user" settings are on; the SDK's `skills` option turns them on and names the ones
the model is offered (a skill the sandbox's own code put in the workspace's `.claude/skills` is
discovered but not offered). The home is the sandbox's: the agent, often root, writes there only
through `ConfinedRoot`, which follows no link, so a link planted at `.claude/skills` or at a
skill's directory makes the install fail instead of writing where it points. Each file is
replaced, never written through, and installed again on every engine start: what the sandbox
changed in a skill's files does not outlive the engine, and a new sandbox gets them too.

The control plane validated the names and paths; they are checked again here, before any system
call, because they become paths the agent writes as root.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence

import structlog

from dataplane_agent.engines.agent_config import Skill
from dataplane_agent.engines.base import EngineError
from dataplane_agent.sandboxes.base import Sandbox
from dataplane_agent.sandboxes.confined import ConfinedRoot, PathRefused

log = structlog.get_logger(__name__)

# Where Claude Code looks for the user's skills, under the home.
SKILLS_DIR = (".claude", "skills")
SKILL_FILE = "SKILL.md"
# The bounds of agent.proto's Skill and SkillFile.
MAX_SKILLS = 32
MAX_FILES = 64
MAX_SKILL_BYTES = 512 * 1024
MAX_FILE_PATH_BYTES = 256
_NAME = re.compile(r"[a-z][a-z0-9-]{0,63}")
# Skills are read by the sandbox's programs; none of their files is secret or executable.
_FILE_MODE = 0o644


def skill_names(skills: Sequence[Skill]) -> list[str]:
    """The names to give the SDK's `skills` option: the skills the model is offered."""
    return [skill.name for skill in skills]


async def install_skills(sandbox: Sandbox, home: ConfinedRoot, skills: Sequence[Skill]) -> None:
    """Write every skill's files under the sandbox's `~/.claude/skills/<name>/`, replacing what is
    there; EngineError, naming the skill and the file, for a name or path that is not acceptable
    or a file that cannot be written (a planted link among them)."""
    if len(skills) > MAX_SKILLS:
        raise EngineError(f"an agent has at most {MAX_SKILLS} skills; this one has {len(skills)}")
    planned = [(skill.name, file_parts(skill), skill) for skill in skills]
    for name, parts, skill in planned:
        for path, file in zip(parts, skill.files, strict=True):
            where = "~/" + "/".join(path)
            try:
                await asyncio.to_thread(home.replace_file, path, file.content, _FILE_MODE)
            except (OSError, PathRefused) as error:
                raise EngineError(
                    f"cannot install skill {name!r} into sandbox {sandbox.sandbox_id}: {where}: {error}"
                ) from error
    if planned:
        log.debug("skills_installed", sandbox_id=sandbox.sandbox_id, skills=[name for name, _, _ in planned])


def file_parts(skill: Skill) -> list[list[str]]:
    """Each of the skill's files as path components under the home; EngineError for a name, a
    path or a size that agent.proto does not allow."""
    if not _NAME.fullmatch(skill.name):
        raise EngineError(f"{skill.name[:64]!r} is not a skill name (1-64 of [a-z0-9-], starting with a letter)")
    if len(skill.files) > MAX_FILES:
        raise EngineError(f"skill {skill.name!r} has {len(skill.files)} files; at most {MAX_FILES}")
    if sum(len(file.content) for file in skill.files) > MAX_SKILL_BYTES:
        raise EngineError(f"skill {skill.name!r} is larger than {MAX_SKILL_BYTES} bytes")
    paths = [_relative_parts(skill.name, file.path) for file in skill.files]
    if [SKILL_FILE] not in paths:
        raise EngineError(f"skill {skill.name!r} has no {SKILL_FILE}")
    if len({tuple(path) for path in paths}) != len(paths):
        raise EngineError(f"skill {skill.name!r} names a file twice")
    return [[*SKILLS_DIR, skill.name, *path] for path in paths]


def _relative_parts(skill: str, path: str) -> list[str]:
    """A skill file's path as components: relative, no `..`, no `.`, no empty component, no NUL."""
    refused = f"skill {skill!r}: {path[:64]!r} is not a relative path inside the skill"
    if not path or "\0" in path or path.startswith("/") or len(path.encode()) > MAX_FILE_PATH_BYTES:
        raise EngineError(refused)
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise EngineError(refused)
    return parts
