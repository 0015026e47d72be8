"""A workspace disk limit the filesystem enforces: each sandbox's workspace is an ext4 image of its own.

With `--sandbox-disk-mb N` a root agent gives every new sandbox
`<sandbox dir>/workspace.img`, a sparse file (it takes on disk only what is
written in it) formatted ext4 with no reserved blocks and its root owned by
the sandbox's user, loop-mounted nosuid,nodev on the sandbox's workspace. A
sandbox that fills it gets ENOSPC ("No space left on device") and the host's
own disk is untouched; an upload that would not fit is refused before it is
unpacked (`workspace`). Both drivers mount it the same way (the docker driver
bind-mounts the mounted workspace into its container).

The image lives as long as the sandbox: a stopped sandbox keeps it mounted, a
re-opened one (after a reboot, say) mounts it again, and destroying the
sandbox unmounts it first. A workspace made before the limit was set, with
files in it, is left a plain directory rather than hidden under a new image.

Needs root, loop devices and mkfs.ext4 (e2fsprogs); without them the driver
says once at start that workspaces are not limited, and they are plain
directories.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import structlog

from dataplane_agent.sandboxes.base import SandboxError

log = structlog.get_logger(__name__)

IMAGE = "workspace.img"
_TIMEOUT = 60.0


@dataclass(frozen=True, slots=True)
class WorkspaceDisk:
    """Workspaces of `size_mb` MiB each."""

    size_mb: int

    def unavailable(self) -> str:
        """Why this host cannot give workspaces an image of their own (empty: it can)."""
        if os.geteuid() != 0:
            return "mounting a workspace image needs root"
        missing = [tool for tool in ("mkfs.ext4", "mount", "umount") if _tool(tool) is None]
        if missing:
            return f"{', '.join(missing)} not found (apt-get install e2fsprogs mount)"
        if not Path("/dev/loop-control").exists():
            return "this kernel offers no loop devices (/dev/loop-control)"
        return ""

    def attach(self, directory: Path, workspace: Path, uid: int, gid: int) -> None:
        """Mount the sandbox's image on `workspace` (made and formatted first if it is new).
        SandboxError if it cannot be."""
        if os.path.ismount(workspace):
            return
        image = directory / IMAGE
        if not image.exists():
            if any(workspace.iterdir()):
                log.warning("sandbox_disk_not_attached", directory=directory.name,
                            reason="the workspace holds files from before the disk limit was set")
                return
            self._format(image, uid, gid)
        _run(_tool("mount"), "-o", "loop,nosuid,nodev", "-t", "ext4", str(image), str(workspace))
        with contextlib.suppress(OSError):  # mkfs's lost+found is no use to a sandbox
            os.rmdir(workspace / "lost+found")

    def _format(self, image: Path, uid: int, gid: int) -> None:
        partial = image.with_name(IMAGE + ".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.ftruncate(fd, self.size_mb * 1024 * 1024)
        finally:
            os.close(fd)
        _run(_tool("mkfs.ext4"), "-q", "-F", "-m", "0", "-L", "astrabox-ws",
             "-E", f"root_owner={uid}:{gid},lazy_itable_init=1,lazy_journal_init=1", str(partial))
        os.replace(partial, image)


def detach(workspace: Path) -> None:
    """Unmount the image from `workspace`, if one is mounted there (whatever the current setting:
    an earlier run may have mounted it); lazily if something still holds it. SandboxError if it
    stays mounted."""
    if not os.path.ismount(workspace):
        return
    try:
        _run(_tool("umount"), str(workspace))
    except SandboxError:
        _run(_tool("umount"), "--lazy", str(workspace))
    if os.path.ismount(workspace):
        raise SandboxError("the sandbox's workspace image could not be unmounted")


def _tool(name: str) -> str | None:
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if os.path.exists(p)), None)


def _run(program: str | None, *args: str) -> None:
    if program is None:
        raise SandboxError(f"{args[0] if args else 'a tool'} is not installed")
    name = Path(program).name
    try:
        done = subprocess.run([program, *args], capture_output=True, text=True, timeout=_TIMEOUT, check=False)
        failure = done.stderr.strip()[:500] if done.returncode != 0 else ""
    except (OSError, subprocess.TimeoutExpired) as error:
        failure = str(error)
    if failure:  # its text names host paths: it stays in the agent's log
        log.warning("sandbox_disk_tool_failed", tool=name, args=list(args), error=failure)
        raise SandboxError(f"{name} failed on the workspace image (the agent's log says why)")
