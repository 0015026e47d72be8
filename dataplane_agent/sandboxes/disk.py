"""A workspace disk limit the filesystem enforces: each sandbox's workspace is an ext4 image of its own.

With `--sandbox-disk-mb N` (10 GiB by default) a root agent gives every new sandbox
`<sandbox dir>/workspace.img` (of N MiB, or of its environment's disk limit, which replaces N for
the environment's sandboxes), a sparse file (it takes on disk only what is
written in it) formatted ext4 with no reserved blocks and its root owned by
the sandbox's user, loop-mounted nosuid,nodev on the sandbox's workspace. A
sandbox that fills it gets ENOSPC ("No space left on device") and the host's
own disk is untouched; an upload that would not fit is refused before it is
unpacked (`workspace.service`). Both drivers mount it the same way (the docker driver
bind-mounts the mounted workspace into its container).

The image lives as long as the sandbox: a stopped sandbox keeps it mounted, a
re-opened one (after a reboot, say) mounts it again, and destroying the
sandbox unmounts it first. A workspace made before the limit was set, with
files in it, is left a plain directory rather than hidden under a new image.

Needs root, loop devices and mkfs.ext4 (e2fsprogs): `unavailable()` formats and mounts a small
image once to find out. Without them the agent measures the limit instead (`runtimes.disk_limit`).
`release_mounts` unmounts every image under a state directory that is about to be deleted.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import structlog

from dataplane_agent.sandboxes.base import SandboxError

log = structlog.get_logger(__name__)

IMAGE = "workspace.img"
_TIMEOUT = 60.0
_PROBE_MB = 8


@dataclass(frozen=True, slots=True)
class WorkspaceDisk:
    """Workspaces of `size_mb` MiB each."""

    size_mb: int

    def unavailable(self) -> str:
        """Why this host cannot give workspaces an image of their own (empty: it can)."""
        return _probe()

    def attach(self, directory: Path, workspace: Path, uid: int, gid: int, size_mb: int = 0) -> None:
        """Mount the sandbox's image on `workspace` (made and formatted first if it is new, of
        `size_mb` MiB, 0: this disk's size). SandboxError if it cannot be."""
        if os.path.ismount(workspace):
            return
        image = directory / IMAGE
        if not image.exists():
            if any(workspace.iterdir()):
                log.warning(
                    "sandbox_disk_not_attached",
                    directory=directory.name,
                    reason="the workspace holds files from before the disk limit was set",
                )
                return
            self._format(image, uid, gid, size_mb or self.size_mb)
        _run(_tool("mount"), "-o", "loop,nosuid,nodev", "-t", "ext4", str(image), str(workspace))
        with contextlib.suppress(OSError):  # mkfs's lost+found is no use to a sandbox
            os.rmdir(workspace / "lost+found")

    def _format(self, image: Path, uid: int, gid: int, size_mb: int) -> None:
        partial = image.with_name(IMAGE + ".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.ftruncate(fd, size_mb * 1024 * 1024)
        finally:
            os.close(fd)
        _run(
            _tool("mkfs.ext4"),
            "-q",
            "-F",
            "-m",
            "0",
            "-L",
            "astrabox-ws",
            "-E",
            f"root_owner={uid}:{gid},lazy_itable_init=1,lazy_journal_init=1",
            str(partial),
        )
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


@functools.cache
def _probe() -> str:
    """Why a small image cannot be formatted and mounted here (empty: it can): tried once."""
    if os.geteuid() != 0:
        return "mounting a workspace image needs root"
    missing = [tool for tool in ("mkfs.ext4", "mount", "umount") if _tool(tool) is None]
    if missing:
        return f"{', '.join(missing)} not found (apt-get install e2fsprogs mount)"
    if not Path("/dev/loop-control").exists():
        return "this kernel offers no loop devices (/dev/loop-control)"
    with tempfile.TemporaryDirectory(prefix="astrabox-disk-probe-") as scratch:
        mountpoint = Path(scratch) / "mnt"
        mountpoint.mkdir()
        try:
            WorkspaceDisk(_PROBE_MB).attach(Path(scratch), mountpoint, os.getuid(), os.getgid())
            detach(mountpoint)
        except SandboxError as error:
            return str(error)
    return ""


def release_mounts(root: Path) -> None:
    """Unmount every workspace image mounted at or under `root` (deepest first): a state
    directory about to be deleted (a demo's, a test's) must not take mounted images with it."""
    prefix = str(root.resolve())
    for mountpoint in sorted(_mountpoints(), key=len, reverse=True):
        if mountpoint == prefix or mountpoint.startswith(prefix + "/"):
            with contextlib.suppress(SandboxError):
                detach(Path(mountpoint))


def _mountpoints() -> list[str]:
    """This process's mount points (`/proc/self/mountinfo`, its octal escapes undone)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    decode = re.compile(r"\\([0-7]{3})")
    return [decode.sub(lambda m: chr(int(m.group(1), 8)), line.split(" ")[4]) for line in lines if line.count(" ") >= 4]


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
