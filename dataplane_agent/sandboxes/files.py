"""Host files that drivers write for their sandboxes: launchers, option and environment files, records.

They can hold credentials (a launcher's environment), and a sandbox process
or a crash must never see one half-written: `write_private` replaces a file
at once, readable by its owner alone unless told otherwise.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def write_accounts(directory: Path, uid: int, gid: int, home: str, shell: str = "/bin/sh") -> None:
    """`passwd` and `group` in `directory`, world-readable, naming the sandbox's user (`agent`,
    `uid`:`gid`, at `home`, with `shell`) besides root and nobody: what a sandbox mounts as
    /etc/passwd and /etc/group, so its programs can look their user up."""
    write_private(
        directory / "passwd",
        (
            "root:x:0:0:root:/root:/usr/sbin/nologin\n"
            f"agent:x:{uid}:{gid}:AstraBox sandbox:{home}:{shell}\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        ),
        0o644,
    )
    write_private(directory / "group", f"root:x:0:\nagent:x:{gid}:\nnogroup:x:65534:\n", 0o644)


def write_private(path: Path, text: str, mode: int = 0o600) -> Path:
    """Replace `path` with `text` at once, with `mode` (by default: for its owner alone)."""
    # A name of its own, so two writers of one file never share (and truncate) a temporary.
    temporary = path.with_name(f"{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(temporary, mode)
    os.replace(temporary, path)
    return path
