"""A skill's directory read into the files of a `Skill` (astrabox.agents.v1), safely.

An agent file names a skill by its directory (`skills: [{name: x, path: ./skills/x}]`); every file
under it becomes one of the skill's files. The directory is the user's, but the files are sent to
the server and installed in sandboxes, so nothing outside it may leak in: a symbolic link is
followed only to a file inside the directory, a link to a directory is refused (its files would
appear twice, or come from elsewhere), only regular files are read (a FIFO would hang the read, a
device has no end) and the contract's limits are checked before each file is read, not after.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import NoReturn

from astrabox.agents.v1 import agent_pb2
from astrabox.errors import AgentFileError

__all__ = ["MAX_SKILL_BYTES", "MAX_SKILL_FILES", "MAX_SKILL_PATH_BYTES", "read_skill_directory"]

MAX_SKILL_FILES = 64
"""Files one skill may hold (agent.proto's limit)."""
MAX_SKILL_BYTES = 512 * 1024
"""Bytes one skill's files may hold in all (agent.proto's limit)."""
MAX_SKILL_PATH_BYTES = 256
"""Bytes of a skill file's path (agent.proto's limit)."""


def read_skill_directory(directory: Path) -> list[agent_pb2.SkillFile]:
    """Every file under `directory`, by path. A symbolic link may point at a file inside the
    directory, not outside it nor at a directory; only regular files are read (never a FIFO or a
    device); the counts and sizes are checked before each file is read."""
    try:
        root = directory.resolve(strict=True)
    except OSError as error:
        raise AgentFileError(f"cannot read the directory {directory}: {error.strerror}") from error
    if not root.is_dir():
        raise AgentFileError(f"{directory} is not a directory")
    files: list[agent_pb2.SkillFile] = []
    total = 0

    def refuse(error: OSError) -> NoReturn:
        raise AgentFileError(f"cannot read {error.filename}: {error.strerror}") from error

    for folder, subfolders, names in os.walk(root, onerror=refuse):
        subfolders.sort()
        for name in subfolders:
            if os.path.islink(os.path.join(folder, name)):
                relative = Path(folder, name).relative_to(root).as_posix()
                raise AgentFileError(f"{relative} in {directory} is a symbolic link to a directory; copy its files in")
        for name in sorted(names):
            path = Path(folder, name)
            relative = path.relative_to(root).as_posix()
            target = path.resolve()
            if not target.is_relative_to(root):
                raise AgentFileError(f"{relative} in {directory} links outside it (to {target})")
            if len(files) == MAX_SKILL_FILES:
                raise AgentFileError(f"{directory} has more than {MAX_SKILL_FILES} files")
            if len(relative.encode()) > MAX_SKILL_PATH_BYTES:
                raise AgentFileError(f"{relative} in {directory}: its path is over {MAX_SKILL_PATH_BYTES} bytes")
            try:
                descriptor = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError as error:
                refuse(error)
            with os.fdopen(descriptor, "rb") as file:
                status = os.fstat(file.fileno())
                if not stat.S_ISREG(status.st_mode):
                    raise AgentFileError(f"{relative} in {directory} is not a regular file")
                if total + status.st_size > MAX_SKILL_BYTES:
                    raise AgentFileError(f"the files of {directory} hold more than {MAX_SKILL_BYTES} bytes (512 KiB)")
                content = file.read(MAX_SKILL_BYTES - total + 1)
            total += len(content)
            if total > MAX_SKILL_BYTES:
                raise AgentFileError(f"the files of {directory} hold more than {MAX_SKILL_BYTES} bytes (512 KiB)")
            files.append(agent_pb2.SkillFile(path=relative, content=content))
    return files
