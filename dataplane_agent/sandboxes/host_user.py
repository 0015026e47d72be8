"""Who a local sandbox is on the host: an unprivileged uid of its own, never the agent's root.

bubblewrap maps the sandbox's user (uid 1000 inside) to whoever runs
bubblewrap. Started by a root agent that is root: every file a sandbox wrote
would be root's on the host, setuid bits included, and any host user who
reached one would get root. So a root agent's launcher hands over before
bubblewrap starts:

1. Still root, it opens what the sandbox mounts (its workspace, home, tmp and
   `etc` files, the program's directory, the model route's directory) as file
   descriptors: the sandbox's user could not traverse the agent's private
   directories to reach them by path.
2. In a mount namespace of its own (`unshare --mount`, private propagation,
   seen by nothing else) it mounts a small tmpfs over /run and binds each
   descriptor there, under `STAGE`, where that user can reach them.
3. `setpriv` drops to the sandbox's host uid and gid (no supplementary groups,
   no capabilities, no new privileges) and runs bubblewrap, which makes its own
   user namespace as that user and binds from the stage.

Everything a sandbox writes is then owned on the host by that uid, which owns
nothing else: a setuid bit on such a file gives nobody more than they have.
The default uid sits above the ranges systemd and useradd hand out for
containers and subordinate ids (`--sandbox-host-uid` to choose another). The
docker driver runs a root agent's containers as the same uid.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_HOST_UID = 2_000_000_000
STAGE = "/run"
# What a launcher stages, and the descriptor it opens it on (a POSIX shell has fds 3-9; 3 carries
# bubblewrap's options).
STAGED_FDS = {"etc": 4, "workspace": 5, "home": 6, "tmp": 7, "program": 8, "model": 9}
_TOOLS = ("unshare", "mount", "setpriv")


@dataclass(frozen=True, slots=True)
class HostUser:
    """The host uid and gid a root agent's sandboxes run as."""

    uid: int = DEFAULT_HOST_UID

    @property
    def gid(self) -> int:
        return self.uid

    @staticmethod
    def missing_tools() -> list[str]:
        """The util-linux programs a hand-over needs that this host lacks."""
        return [tool for tool in _TOOLS if shutil.which(tool) is None]

    def staged(self, name: str) -> str:
        """Where bubblewrap finds the staged `name`."""
        return f"{STAGE}/{name}"

    def command(self, sources: Mapping[str, Path], program: list[str]) -> tuple[str, list[str]]:
        """The launcher's last lines: descriptors opened on `sources` (name -> host directory), then
        the mount namespace that stages them and the drop to this user running `program` (bubblewrap
        and its arguments, which read its options on fd 3)."""
        by_fd = [name for name in sources if name in STAGED_FDS]
        opens = " ".join(f"{STAGED_FDS[name]}< {shlex.quote(str(sources[name]))}" for name in by_fd)
        unshare, mount, setpriv = (shutil.which(tool) or tool for tool in _TOOLS)
        stage = [f"{mount} -t tmpfs -o mode=0755,nosuid,nodev,size=64k astrabox-stage {STAGE} || exit 126"]
        for name, path in sources.items():
            # /bin/sh takes single-digit descriptors only: a source past them (the egress proxy's
            # directory, the agent's own and root's to read) is bound by its path, as root.
            source = f"/proc/self/fd/{STAGED_FDS[name]}" if name in by_fd else shlex.quote(str(path))
            stage.append(f"/bin/mkdir {STAGE}/{name} && {mount} --bind {source} {STAGE}/{name} || exit 126")
        closes = " ".join(f"{STAGED_FDS[name]}<&-" for name in by_fd)
        # The whole chain dies with the agent that started it (the parent-death signal, set from the
        # first step; changing credentials clears it, so setpriv sets it again after): a bubblewrap's
        # own --die-with-parent comes only once it runs, and an agent killed before that left it.
        stage.append(
            f"exec {setpriv} --reuid={self.uid} --regid={self.gid} --clear-groups --inh-caps=-all "
            f'--no-new-privs --pdeathsig KILL -- "$@" {closes}'
        )
        line = (
            f"{setpriv} --pdeathsig KILL -- {unshare} --mount --propagation private -- "
            f"/bin/sh -c {shlex.quote(chr(10).join(stage))} astrabox-stage"
        )
        return f"exec {opens}", [*shlex.split(line), *program]

    def hand_over(self, directory: Path) -> None:
        """Make `directory` and everything in it this user's, when it is not already (a sandbox made
        before the agent ran sandboxes as this user). Walks by directory descriptors and changes
        links themselves, so nothing the sandbox put there can send the change elsewhere."""
        if os.lstat(directory).st_uid == self.uid:
            return
        for _top, dirs, files, top_fd in os.fwalk(directory, follow_symlinks=False):
            for name in (*dirs, *files):
                with contextlib.suppress(FileNotFoundError):
                    os.chown(name, self.uid, self.gid, dir_fd=top_fd, follow_symlinks=False)
        os.chown(directory, self.uid, self.gid, follow_symlinks=False)
