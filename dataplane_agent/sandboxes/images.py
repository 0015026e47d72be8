"""The default sandbox image, built offline: a debootstrap root file system imported into Docker.

No registry is needed: debootstrap fetches a minimal Debian from the apt mirror
the host already uses, the image gets an unprivileged user (`agent`, uid 1000)
and the tools the Claude Code CLI and common agent work need, and `docker
import` turns it into an image. The CLI itself is not in the image: the docker
driver bind-mounts it read-only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiodocker

from dataplane_agent.settings import DEFAULT_IMAGE
from serverkit.waits import bounded

DEFAULT_SUITE = "bookworm"
FALLBACK_MIRROR = "http://deb.debian.org/debian"
SANDBOX_USER = "agent"
SANDBOX_UID = 1000
# What the CLI and common agent work need besides the minimal base (which has coreutils, grep,
# sed, findutils, bash); socat forwards the model route from a unix socket to the CLI's loopback;
# python3 and node run the scripts, tools and stdio MCP servers agents commonly bring.
PACKAGES = (
    "python3",
    "nodejs",
    "bash",
    "coreutils",
    "git",
    "ca-certificates",
    "procps",
    "socat",
    "findutils",
    "grep",
    "sed",
    "less",
    "xz-utils",
)
IMAGE_LABEL = "astrabox.image"
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Kept out of the image: package caches and lists, documentation, translations.
_TRIM = ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale")
# debootstrap's lines about single packages; the rest are its stages.
_PER_PACKAGE = re.compile(r"^I: (Retrieving|Validating|Extracting|Unpacking|Configuring) [a-z0-9]\S*( [0-9]\S*)?$")
_DOCKER_TIMEOUT = 30.0
_DEBOOTSTRAP_TIMEOUT = 1200.0
_IMPORT_TIMEOUT = 600.0

Progress = Callable[[str], None]


class ImageBuildError(Exception):
    """The sandbox image could not be built."""


@dataclass(frozen=True, slots=True)
class ImageBuild:
    """The outcome of `build_image`."""

    tag: str
    image_id: str
    # False when the tag existed and was kept.
    built: bool
    seconds: float


@dataclass(frozen=True, slots=True)
class AptSource:
    uri: str
    suites: tuple[str, ...]
    keyring: str = ""


async def build_image(
    tag: str = DEFAULT_IMAGE,
    *,
    rebuild: bool = False,
    mirror: str = "",
    suite: str = DEFAULT_SUITE,
    progress: Progress = print,
) -> ImageBuild:
    """Build the sandbox image and tag it; keep an existing `tag` unless `rebuild`."""
    began = time.monotonic()
    if not rebuild and (existing := await image_id(tag)):
        progress(f"{tag} exists ({existing[:19]}); keeping it (--rebuild builds it again)")
        return ImageBuild(tag, existing, built=False, seconds=time.monotonic() - began)
    debootstrap = debootstrap_path()
    docker = shutil.which("docker")
    if docker is None:
        raise ImageBuildError("the docker CLI was not found: install it (apt-get install docker.io)")
    source = choose_source(mirror, suite)
    work = Path(tempfile.mkdtemp(prefix="astrabox-image-"))
    try:
        rootfs = work / "rootfs"
        progress(f"debootstrap {suite} (minbase + {', '.join(PACKAGES)}) from {source.uri}")
        await run_debootstrap(debootstrap, rootfs, suite, source, progress)
        progress(
            f"root file system ready after {time.monotonic() - began:.0f}s; adding user {SANDBOX_USER} (uid {SANDBOX_UID})"
        )
        await asyncio.to_thread(prepare_rootfs, rootfs)
        progress(f"docker import as {tag}")
        new_id = await _import(docker, rootfs, tag, suite)
    finally:
        await asyncio.to_thread(shutil.rmtree, work, True)
    seconds = time.monotonic() - began
    progress(f"built {tag} ({new_id[:19]}) in {seconds:.0f}s")
    return ImageBuild(tag, new_id, built=True, seconds=seconds)


async def image_id(tag: str) -> str:
    """The id of the image `tag`, or "" when Docker has no such image."""
    try:
        async with asyncio.timeout(_DOCKER_TIMEOUT), aiodocker.Docker() as docker:
            return str((await docker.images.inspect(tag))["Id"])
    except aiodocker.DockerError as error:
        if error.status == 404:
            return ""
        raise ImageBuildError(f"Docker answered {error.status}: {error.message}") from error
    except (OSError, TimeoutError, ValueError) as error:
        raise ImageBuildError(
            f"the Docker daemon is not reachable ({error!r}): start dockerd or set DOCKER_HOST"
        ) from error


def apt_sources(etc_apt: Path = Path("/etc/apt")) -> list[AptSource]:
    """The binary (`deb`) sources of an apt configuration, one-line and deb822 formats alike."""
    sources: list[AptSource] = []
    one_line = [etc_apt / "sources.list", *sorted((etc_apt / "sources.list.d").glob("*.list"))]
    for path in one_line:
        for line in _lines(path):
            parts = re.sub(r"\[[^]]*\]", " ", line).split()  # drop [options]
            signed = re.search(r"signed-by=([^]\s]+)", line)
            if len(parts) >= 3 and parts[0] == "deb":
                sources.append(AptSource(parts[1], (parts[2],), signed.group(1) if signed else ""))
    for path in sorted((etc_apt / "sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", "\n".join(_lines(path, keep_blank=True))):
            fields = _deb822(stanza)
            if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes").lower() != "no":
                for uri in fields.get("uris", "").split():
                    sources.append(AptSource(uri, tuple(fields.get("suites", "").split()), fields.get("signed-by", "")))
    return sources


def choose_mirror(sources: Iterable[AptSource], suite: str = DEFAULT_SUITE) -> AptSource:
    """The first source serving `suite` itself (not its -updates or -security); else the fallback."""
    for source in sources:
        if suite in source.suites and source.uri.startswith(("http://", "https://", "file:/")):
            return source
    return AptSource(FALLBACK_MIRROR, (suite,))


def prepare_rootfs(rootfs: Path) -> None:
    """Add the unprivileged user and the sandbox's mount points; drop what an image does not need."""
    passwd = rootfs / "etc" / "passwd"
    if not any(line.split(":")[2:3] == [str(SANDBOX_UID)] for line in passwd.read_text().splitlines()):
        _append(
            passwd, f"{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_UID}:AstraBox sandbox:/home/{SANDBOX_USER}:/bin/bash\n"
        )
        _append(rootfs / "etc" / "group", f"{SANDBOX_USER}:x:{SANDBOX_UID}:\n")
        _append(rootfs / "etc" / "shadow", f"{SANDBOX_USER}:!:19000:0:99999:7:::\n")
        if (rootfs / "etc" / "gshadow").exists():
            _append(rootfs / "etc" / "gshadow", f"{SANDBOX_USER}:!::\n")
    for inner in (f"home/{SANDBOX_USER}", "workspace"):
        (rootfs / inner).mkdir(parents=True, exist_ok=True)
        os.chown(rootfs / inner, SANDBOX_UID, SANDBOX_UID)
    (rootfs / "run" / "astrabox").mkdir(parents=True, exist_ok=True)
    for relative in _TRIM:
        target = rootfs / relative
        if target.is_dir():
            for child in target.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
    # Docker supplies these per container.
    for name in ("hostname", "hosts", "resolv.conf"):
        with contextlib.suppress(FileNotFoundError):
            (rootfs / "etc" / name).unlink()


def debootstrap_path() -> str:
    path = shutil.which("debootstrap") or shutil.which("debootstrap", path="/usr/sbin:/sbin")
    if path is None:
        raise ImageBuildError("debootstrap was not found: install it (apt-get install debootstrap)")
    if os.geteuid() != 0:
        raise ImageBuildError("building the sandbox image needs root (debootstrap creates a root file system)")
    return path


def choose_source(mirror: str, suite: str) -> AptSource:
    if mirror:
        return AptSource(mirror, (suite,))
    return choose_mirror(apt_sources(), suite)


def _has_keyring(source: AptSource) -> bool:
    return bool(source.keyring) and Path(source.keyring).is_file()


async def run_debootstrap(
    debootstrap: str,
    rootfs: Path,
    suite: str,
    source: AptSource,
    progress: Progress,
    packages: Sequence[str] = PACKAGES,
) -> None:
    """A minbase root file system of `suite` with `packages`, in `rootfs`."""
    args = [debootstrap, "--variant=minbase", f"--include={','.join(packages)}", "--components=main"]
    if _has_keyring(source):
        args.append(f"--keyring={source.keyring}")
    args += [suite, str(rootfs), source.uri]
    tail: list[str] = []
    process = await asyncio.create_subprocess_exec(
        *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    assert process.stdout is not None
    try:
        async with asyncio.timeout(_DEBOOTSTRAP_TIMEOUT):
            async for raw in process.stdout:
                line = raw.decode(errors="replace").rstrip()
                tail = [*tail[-19:], line]
                if line and not _PER_PACKAGE.match(line):
                    progress(f"  {line}")
            await process.wait()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise ImageBuildError(f"debootstrap did not finish within {_DEBOOTSTRAP_TIMEOUT:.0f}s") from None
    if process.returncode != 0:
        detail = "\n".join(tail)
        raise ImageBuildError(
            f"debootstrap failed (exit {process.returncode}) against {source.uri}; pass --mirror to use another "
            f"mirror. Its last lines:\n{detail}"
        )


async def _import(docker: str, rootfs: Path, tag: str, suite: str) -> str:
    changes = (
        f"ENV PATH={_SYSTEM_PATH}",
        f"ENV HOME=/home/{SANDBOX_USER}",
        f"USER {SANDBOX_UID}:{SANDBOX_UID}",
        "WORKDIR /workspace",
        'CMD ["sleep", "infinity"]',
        f"LABEL {IMAGE_LABEL}=sandbox {IMAGE_LABEL}.suite={suite}",
    )
    return await import_rootfs(docker, rootfs, tag, changes)


async def import_rootfs(docker: str, rootfs: Path, tag: str, changes: Sequence[str]) -> str:
    """`docker import` the tree `rootfs` as `tag` with Dockerfile `changes`; its image id."""
    command = [docker, "import", *(arg for change in changes for arg in ("--change", change))]
    command += ["--message", "astrabox image build", "-", tag]
    tar = ["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-cf", "-", "."]
    try:
        result = await bounded(asyncio.to_thread(_pipe, tar, command), _IMPORT_TIMEOUT)
    except TimeoutError:
        raise ImageBuildError(f"docker import did not finish within {_IMPORT_TIMEOUT:.0f}s") from None
    new_id = await image_id(tag)
    if not new_id:
        raise ImageBuildError(f"docker import did not produce {tag}: {result}")
    return new_id


def _pipe(producer: Sequence[str], consumer: Sequence[str]) -> str:
    """Run `producer | consumer`; return the consumer's output or raise with both stderrs."""
    with subprocess.Popen(producer, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as left:
        assert left.stdout is not None
        right = subprocess.run(consumer, stdin=left.stdout, capture_output=True, text=True, check=False)
        left.stdout.close()
        left_err = left.stderr.read().decode(errors="replace") if left.stderr else ""
        left.wait()
    if left.returncode != 0 or right.returncode != 0:
        raise ImageBuildError(
            f"{producer[0]} | docker import failed: {left_err.strip()} {right.stderr.strip()}".strip()
        )
    return right.stdout.strip()


def _lines(path: Path, *, keep_blank: bool = False) -> list[str]:
    try:
        text = path.read_text()
    except OSError:
        return []
    # Comment lines go entirely: in deb822 files a blank line, not a comment, ends a stanza.
    lines = [line.split("#", 1)[0].rstrip() for line in text.splitlines() if not line.lstrip().startswith("#")]
    return lines if keep_blank else [line for line in lines if line.strip()]


def _deb822(stanza: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    name = ""
    for line in stanza.splitlines():
        if line[:1].isspace() and name:
            fields[name] += " " + line.strip()
        elif ":" in line:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            fields[name] = value.strip()
    return fields


def _append(path: Path, text: str) -> None:
    with open(path, "a") as handle:
        handle.write(text)
