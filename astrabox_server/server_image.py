"""The server image: the control plane, the data-plane agent and PostgreSQL in one image, built offline.

No registry is needed, as for the sandbox image (`dataplane_agent.sandboxes.images`): a base is
debootstrapped from the host's apt mirror (python3, python3-venv, PostgreSQL 15) and `docker
import`ed once (`astrabox/server-base:<suite>-<packages digest>`, kept). The project's two
distributions and their dependencies are built as wheels on the host (`pip wheel`, which may use
the network and pip's cache), then installed into a venv at /opt/astrabox by a container of the
base that has no network (`--network none`, `pip install --no-index`) and committed as the image.
The wheels are bind-mounted, so no layer keeps them. The image is labelled with a digest of the
sources it was built from; a build whose sources did not change keeps the image.

One image serves three roles, each started by its command: `astrabox controlplane` (the default,
as the unprivileged user `astrabox`, uid 10001), `astrabox-agent-entrypoint` (the agent, as root:
it drives the host's Docker daemon through its socket, which is root-equivalent anyway, and gives
each sandbox's directories to the sandbox user) and `astrabox-postgres` (PostgreSQL for the Compose
stack, as `astrabox` too). The host's docker CLI is copied in for the agent's `docker exec`.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dataplane_agent.sandboxes.images import (
    DEFAULT_SUITE,
    ImageBuildError,
    Progress,
    choose_source,
    debootstrap_path,
    image_id,
    import_rootfs,
    prepare_rootfs,
    run_debootstrap,
)
from serverkit.waits import bounded

DEFAULT_SERVER_IMAGE = "astrabox/server:latest"
BASE_REPOSITORY = "astrabox/server-base"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates", "postgresql", "procps")
SERVER_USER = "astrabox"
SERVER_UID = 10001
VENV = "/opt/astrabox"
SOURCE_LABEL = "astrabox.image.source"
# What the image's sources are: a change to any of these builds it again.
_SOURCES = ("pyproject.toml", "astrabox_server", "controlplane", "dataplane_agent", "serverkit", "clients/python")
_PATH = f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_SCRIPTS = Path(__file__).parent / "container"
_STEP_TIMEOUT = 900.0


@dataclass(frozen=True, slots=True)
class ServerImageBuild:
    """The outcome of `build_server_image`."""

    tag: str
    image_id: str
    # False when the tag was built from the same sources already and was kept.
    built: bool
    seconds: float
    size_bytes: int


def repository_root() -> Path:
    """The clone this code runs from; the image is built from its sources."""
    root = Path(__file__).resolve().parent.parent
    if not (root / "pyproject.toml").is_file() or not (root / "clients" / "python" / "pyproject.toml").is_file():
        raise ImageBuildError(f"{root} is not a clone of the AstraBox repository: build the server image from one")
    return root


def source_digest(root: Path) -> str:
    """A digest of the files the image is built from (compiled files and caches left out)."""
    digest = hashlib.sha256()
    for name in _SOURCES:
        path = root / name
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            if "__pycache__" in file.parts or file.suffix == ".pyc" or ".egg-info" in str(file):
                continue
            digest.update(str(file.relative_to(root)).encode() + b"\0" + file.read_bytes() + b"\0")
    for script in sorted(_SCRIPTS.iterdir()):
        digest.update(script.name.encode() + b"\0" + script.read_bytes())
    return digest.hexdigest()[:24]


async def build_server_image(
    tag: str = DEFAULT_SERVER_IMAGE, *, rebuild: bool = False, mirror: str = "", progress: Progress = print
) -> ServerImageBuild:
    """Build the server image from this clone and tag it; keep it when its sources did not change."""
    began = time.monotonic()
    docker = shutil.which("docker")
    if docker is None:
        raise ImageBuildError("the docker CLI was not found: install it (apt-get install docker.io)")
    root = repository_root()
    digest = await asyncio.to_thread(source_digest, root)
    existing = await image_id(tag)
    if not rebuild and existing and await _label(docker, tag, SOURCE_LABEL) == digest:
        progress(f"{tag} is built from these sources ({existing[:19]}); keeping it (--rebuild builds it again)")
        return ServerImageBuild(tag, existing, False, time.monotonic() - began, await _size(docker, tag))
    base = await _base(docker, mirror, progress)
    work = Path(tempfile.mkdtemp(prefix="astrabox-server-image-"))
    try:
        wheels = work / "wheels"
        progress(f"pip wheel: the client, the server and their dependencies into {wheels}")
        await _run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--wheel-dir",
                str(wheels),
                str(root / "clients/python"),
                str(root),
            ],
            "pip wheel",
        )
        progress(f"installing them into {VENV} in a container of {base} with no network")
        new_id = await _install(docker, base, wheels, tag, digest)
    finally:
        await asyncio.to_thread(shutil.rmtree, work, True)
    if existing and existing != new_id:  # the image this one replaces, unless a container still uses it
        await _run([docker, "image", "rm", existing], "docker image rm", check=False)
    seconds = time.monotonic() - began
    size = await _size(docker, tag)
    progress(f"built {tag} ({new_id[:19]}, {size / 1e6:.0f} MB) in {seconds:.0f}s")
    return ServerImageBuild(tag, new_id, True, seconds, size)


def _copy_sources(root: Path, target: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.egg-info", "node_modules")
    for name in (*_SOURCES, "README.md"):
        if (root / name).is_dir():
            shutil.copytree(root / name, target / name, ignore=ignore)
        else:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, target / name)


async def _base(docker: str, mirror: str, progress: Progress) -> str:
    """The debootstrapped base, built once per package list."""
    packages = hashlib.sha256(",".join(BASE_PACKAGES).encode()).hexdigest()[:12]
    tag = f"{BASE_REPOSITORY}:{DEFAULT_SUITE}-{packages}"
    if await image_id(tag):
        return tag
    debootstrap = debootstrap_path()
    source = choose_source(mirror, DEFAULT_SUITE)
    work = Path(tempfile.mkdtemp(prefix="astrabox-server-base-"))
    try:
        rootfs = work / "rootfs"
        progress(f"debootstrap {DEFAULT_SUITE} (minbase + {', '.join(BASE_PACKAGES)}) from {source.uri}")
        await run_debootstrap(debootstrap, rootfs, DEFAULT_SUITE, source, progress, BASE_PACKAGES)
        await asyncio.to_thread(_prepare_base, rootfs)
        progress(f"docker import as {tag}")
        await import_rootfs(docker, rootfs, tag, (f"ENV PATH={_PATH}", "LABEL astrabox.image=server-base"))
    finally:
        await asyncio.to_thread(shutil.rmtree, work, True)
    return tag


def _prepare_base(rootfs: Path) -> None:
    prepare_rootfs(rootfs)  # the sandbox user (unused here), trimmed caches, no hosts/resolv.conf
    with open(rootfs / "etc" / "passwd", "a") as passwd:
        passwd.write(f"{SERVER_USER}:x:{SERVER_UID}:{SERVER_UID}:AstraBox:/var/lib/astrabox:/usr/sbin/nologin\n")
    with open(rootfs / "etc" / "group", "a") as group:
        group.write(f"{SERVER_USER}:x:{SERVER_UID}:\n")
    for directory in ("var/lib/astrabox", "var/lib/astrabox-postgres"):
        (rootfs / directory).mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chown(rootfs / directory, SERVER_UID, SERVER_UID)


async def _install(docker: str, base: str, wheels: Path, tag: str, digest: str) -> str:
    # The agent's docker driver runs `docker exec`: the host's CLI goes in (Debian's docker.io has
    # no CLI-only package in bookworm, and the whole of it would add the daemon and containerd).
    cli = await asyncio.to_thread(Path(docker).resolve)
    name = f"astrabox-server-build-{os.getpid()}-{time.monotonic_ns()}"
    script = (
        f"set -e; python3 -m venv {VENV}; "
        f"{VENV}/bin/pip install --quiet --no-index --no-cache-dir --find-links /wheels astrabox-client astrabox-server; "
        "install -m 0755 /scripts/* /usr/local/bin/; install -m 0755 /host-docker /usr/local/bin/docker; "
        f"chown {SERVER_UID}:{SERVER_UID} /var/lib/astrabox /var/lib/astrabox-postgres; "
        f"{VENV}/bin/astrabox --help >/dev/null"
    )
    run = [docker, "run", "--name", name, "--network", "none", "--user", "0:0"]
    run += ["-v", f"{wheels}:/wheels:ro", "-v", f"{_SCRIPTS}:/scripts:ro", "-v", f"{cli}:/host-docker:ro"]
    run += [base, "sh", "-c", script]
    changes = [
        f"ENV PATH={_PATH}",
        "ENV PYTHONDONTWRITEBYTECODE=1",
        f"USER {SERVER_UID}:{SERVER_UID}",
        "WORKDIR /var/lib/astrabox",
        'CMD ["astrabox", "controlplane"]',
        f"LABEL astrabox.image=server {SOURCE_LABEL}={digest}",
    ]
    try:
        await _run(run, "installing the wheels")
        commit = [docker, "commit", *(arg for change in changes for arg in ("--change", change)), name, tag]
        await _run(commit, "docker commit")
    finally:
        await _run([docker, "rm", "--force", name], "docker rm", check=False)
    new_id = await image_id(tag)
    if not new_id:
        raise ImageBuildError(f"docker commit did not produce {tag}")
    return new_id


async def _label(docker: str, tag: str, label: str) -> str:
    return await _run(
        [docker, "image", "inspect", "--format", f'{{{{index .Config.Labels "{label}"}}}}', tag], "inspect"
    )


async def _size(docker: str, tag: str) -> int:
    return int(await _run([docker, "image", "inspect", "--format", "{{.Size}}", tag], "inspect") or 0)


async def _run(command: Sequence[str], what: str, *, check: bool = True) -> str:
    try:
        result = await bounded(
            asyncio.to_thread(
                subprocess.run, command, capture_output=True, text=True, check=False, timeout=_STEP_TIMEOUT
            ),
            _STEP_TIMEOUT + 10,
        )
    except (TimeoutError, subprocess.TimeoutExpired):
        raise ImageBuildError(f"{what} did not finish within {_STEP_TIMEOUT:.0f}s") from None
    if check and result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-20:])
        raise ImageBuildError(f"{what} failed (exit {result.returncode}):\n{tail}")
    return result.stdout.strip()
