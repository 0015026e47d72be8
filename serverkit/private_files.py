"""Files that hold a secret must be the process's user's and readable by it alone, as `ssh` refuses a
private key anyone can read: one check for both halves of the server (the agent's credentials
directory, the control plane's credentials key file).

`problem` says what is wrong with a file's (or directory's) status, or None; `read` opens a file
without following a link, checks it and reads it; `create` writes a new one (0600) unless it
exists. None ever quotes what the file holds.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class NotPrivate(Exception):
    """The file cannot be trusted with a secret, or read; the message says why and how to fix it."""


def problem(info: os.stat_result, what: str, *, regular: bool) -> str | None:
    """Why a file (`regular`) or directory with this status may not hold a secret; None if it may."""
    if regular and not stat.S_ISREG(info.st_mode):
        return f"{what} is not a regular file"
    if not regular and not stat.S_ISDIR(info.st_mode):
        return f"{what} is not a directory"
    if info.st_uid != os.geteuid():
        return f"{what} does not belong to this process's user"
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        wanted = "600" if regular else "700"
        return f"{what} may be read by others (mode {stat.S_IMODE(info.st_mode):o}; it must be {wanted})"
    return None


def read(path: Path, what: str, max_bytes: int) -> bytes:
    """The contents of a private file (at most `max_bytes`); NotPrivate when it is missing, a link,
    shared with others, another user's, or larger."""
    try:
        # O_NOFOLLOW: a link put in its place is not followed to another file.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NotPrivate(f"{what} {path} does not exist") from None
    except OSError as error:
        raise NotPrivate(f"{what} {path} cannot be read: {error.strerror}") from None
    with os.fdopen(fd, "rb") as file:
        found = problem(os.fstat(file.fileno()), f"{what} {path}", regular=True)
        if found is not None:
            raise NotPrivate(found)
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise NotPrivate(f"{what} {path} is larger than {max_bytes} bytes")
    return data


def create(path: Path, text: str) -> None:
    """Write `text` and a newline to a new private file (0600) at `path`; nothing when a file is there
    already (made meanwhile by another process too): `read` then checks and reads that one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as file:
        file.write(text + "\n")
