"""The `docker` sandbox driver: one container per sandbox on a Docker Engine, through aiodocker.

A sandbox is a container `astrabox-<installation>-<id>` that runs `sleep
infinity` under docker-init, made from the sandbox image (`astrabox image
build`): no network, every capability dropped, no-new-privileges, a read-only
root, CPU, memory and pids limits, an unprivileged user. Its host directory
`<root>/<container name>/` holds `workspace/` and `home/`, bind-mounted at
/workspace and /home/agent (the engine reads and restores transcripts in the
home from the host), and `run/` (launchers, environment files, the binding
record), which the container never sees. /tmp is a tmpfs. The engine's CLI is
not in the image: its directory is bind-mounted read-only at the same path. The
model route's directory is bind-mounted read-only at /run/astrabox, so the
socket an agent re-creates after a restart is the one its sandboxes reach.

Programs run through `docker exec`; their environment reaches it in a private
env file, never on a command line nor in the container's configuration.

Labels are fixed when a container is made. A warm-pool container handed to a
session (`rebind`) is renamed for it and keeps its new session in its binding
record, which listing and destruction read over the labels.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import shutil
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import aiodocker
import aiohttp
import structlog

from dataplane_agent.images import DEFAULT_IMAGE, SANDBOX_UID
from dataplane_agent.sandboxes.base import (
    AGENT_LABEL,
    INSTALLATION_LABEL,
    MODEL_SOCKET_INNER,
    POOL_LABEL,
    SESSION_LABEL,
    DestroyVerdict,
    ListedSandbox,
    Sandbox,
    SandboxError,
    SandboxSpec,
    model_relay,
)

log = structlog.get_logger(__name__)

INNER_WORKSPACE = "/workspace"
INNER_HOME = "/home/agent"
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
DEFAULT_INSTALLATION = "default"
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BINDING = "binding.json"
_SPEC_ENV = "sandbox.env.json"
_REMOVE_TIMEOUT = 30.0
# aiodocker's status for a daemon it cannot connect to.
_UNREACHABLE = 900


@dataclass(frozen=True, slots=True)
class ContainerLimits:
    """Per-container limits; 0 leaves that one unlimited."""

    cpus: float = 1.0
    memory_mb: int = 2048
    pids: int = 512
    tmp_mb: int = 512


@dataclass(frozen=True, slots=True)
class _Container:
    """What the driver reads of a container (from an inspect or a listing)."""

    id: str
    name: str
    labels: Mapping[str, str]
    running: bool
    status: str
    # Host directory of the sandbox (the parent of the /workspace mount's source); None if unknown.
    directory: Path | None
    model_route: bool
    created_at: float


class DockerSandboxDriver:
    """Sandboxes as containers of one Docker Engine, one host directory each under `root`."""

    name = "docker"

    def __init__(
        self,
        root: Path,
        *,
        image: str = DEFAULT_IMAGE,
        installation: str = DEFAULT_INSTALLATION,
        agent_id: str = "",
        limits: ContainerLimits = ContainerLimits(),
        program_dirs: Sequence[Path] = (),
        docker_cli: str = "docker",
        timeout: float = 30.0,
    ) -> None:
        if not _ID.match(installation):
            raise SandboxError(f"installation id {installation!r} cannot name containers")
        self._root = Path(root).resolve()
        self._image = image
        self._installation = installation
        self._agent_id = agent_id
        self._limits = limits
        # Host directories of the programs launchers run (the engine's CLI), mounted read-only.
        self._program_dirs = tuple(dict.fromkeys(Path(d).resolve() for d in program_dirs))
        self._docker_cli = docker_cli
        self._timeout = timeout
        # As root the agent hands the sandbox's directories to the image's user; otherwise the
        # container runs as the agent's own user, which owns them already.
        self._uid, self._gid = (SANDBOX_UID, SANDBOX_UID) if os.geteuid() == 0 else (os.getuid(), os.getgid())

    # -- the contract ----------------------------------------------------------

    async def probe(self) -> None:
        if self._cli() is None:
            raise SandboxError(
                f"the docker CLI ({self._docker_cli!r}) was not found: install it (apt-get install docker.io); "
                "programs enter containers through `docker exec`"
            )
        for directory in self._program_dirs:
            if not directory.is_dir():
                raise SandboxError(f"{directory} (mounted into every sandbox for the engine's CLI) does not exist")
        try:
            self._root.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise SandboxError(f"the sandbox root {self._root} cannot be created: {error.strerror}") from error
        async with self._engine("answer") as docker:
            try:
                await docker.images.inspect(self._image)
            except aiodocker.DockerError as error:
                if error.status == 404:
                    raise SandboxError(f"image {self._image} is missing: run `astrabox image build`") from None
                raise

    async def create(self, spec: SandboxSpec) -> Sandbox:
        name = self._name(spec.session_id)
        _check_id(spec.agent_id, "agent id")
        async with self._engine("create the sandbox") as docker:
            found = await _inspect(docker, name)
            if found is not None:
                self._check_owner(found, spec.session_id, spec.agent_id, raise_error=True)
                if found.directory is None or not (found.directory / "workspace").is_dir():
                    # Its workspace was removed under it: a container still mounting the deleted
                    # directory would lose whatever is written there. It is made again, empty.
                    log.warning("sandbox_workspace_gone", sandbox_id=name)
                    await docker.containers.container(found.id).delete(force=True)
                    found = None
            if found is None:
                found = await self._make(docker, name, spec)
            elif not found.running:
                await docker.containers.container(found.id).start()
                log.info("sandbox_restarted", sandbox_id=name, was=found.status)
        sandbox = self._sandbox(name, spec.session_id, found.directory or self._root / name)
        await asyncio.to_thread(_write_private, sandbox.workspace.parent / "run" / _SPEC_ENV, json.dumps(dict(spec.env)))
        return sandbox

    async def rebind(self, sandbox: Sandbox, spec: SandboxSpec) -> Sandbox:
        """Hand an unused (warm-pool) sandbox to `spec.session_id`: renamed, bound and given the
        spec's environment as `create(spec)` would have. SandboxError if the session has a sandbox."""
        name = self._name(spec.session_id)
        async with self._engine("rebind the sandbox") as docker:
            found = await _inspect(docker, sandbox.sandbox_id)
            if found is None or found.directory is None:
                raise SandboxError(f"sandbox {sandbox.sandbox_id} does not exist")
            self._check_owner(found, sandbox.session_id, spec.agent_id, raise_error=True)
            if await _inspect(docker, name) is not None:
                raise SandboxError(f"session {spec.session_id} has a sandbox already ({name})")
            run = found.directory / "run"
            labels = {k: v for k, v in self._labels(spec).items() if k != POOL_LABEL}
            # The binding first: a crash before the rename leaves a container that lists as the
            # session's (the reconciler settles it), never a session's name on a pool binding.
            await asyncio.to_thread(_write_private, run / _BINDING, json.dumps({"labels": labels}))
            await asyncio.to_thread(_write_private, run / _SPEC_ENV, json.dumps(dict(spec.env)))
            await docker.containers.container(found.id).rename(name)
        log.debug("sandbox_rebound", sandbox_id=name, was=sandbox.sandbox_id)
        return self._sandbox(name, spec.session_id, found.directory)

    async def launcher(self, sandbox: Sandbox, program: Sequence[str], env: Mapping[str, str]) -> Path:
        if not program:
            raise SandboxError("launcher needs a program to run")
        directory = self._directory(sandbox)
        async with self._engine("find the sandbox") as docker:
            found = await _inspect(docker, sandbox.sandbox_id)
        if found is None:
            raise SandboxError(f"sandbox {sandbox.sandbox_id} does not exist")
        if not found.running:
            raise SandboxError(f"sandbox {sandbox.sandbox_id} is not running ({found.status})")
        run = directory / "run"
        spec_env = await asyncio.to_thread(_read_json, run / _SPEC_ENV)
        merged = {"PATH": DEFAULT_PATH, **spec_env, **env, "HOME": INNER_HOME}
        for name, value in merged.items():
            if not _ENV_NAME.match(name) or "\n" in value or "\0" in value or "\r" in value:
                raise SandboxError(f"environment variable {name!r} cannot be passed into a container")
        # What the agent put in the home (a restored transcript) becomes the sandbox user's.
        await asyncio.to_thread(self._hand_over, sandbox.home)
        stem = run / (Path(program[0]).name or "program")
        # The environment (credentials included) reaches `docker exec` in a private file: not on
        # a command line, not in the container's configuration.
        env_file = await asyncio.to_thread(
            _write_private, stem.with_name(stem.name + ".env"), "".join(f"{k}={v}\n" for k, v in merged.items())
        )
        inner = model_relay(program) if found.model_route else list(program)
        command = [self._cli() or self._docker_cli, "exec", "-i", "--env-file", str(env_file)]
        command += ["--workdir", INNER_WORKSPACE, "--user", f"{self._uid}:{self._gid}", found.id, *inner]
        script = "\n".join(
            [
                "#!/bin/sh",
                f"# Runs {program[0]} inside the AstraBox sandbox {sandbox.sandbox_id}.",
                f'exec {shlex.join(command)} "$@"',
                "",
            ]
        )
        return await asyncio.to_thread(_write_private, stem.with_name(stem.name + ".launcher"), script, 0o700)

    async def destroy(self, sandbox: Sandbox) -> DestroyVerdict:
        directory = self._directory(sandbox)
        bound = log.bind(sandbox_id=sandbox.sandbox_id)
        try:
            async with self._engine("destroy the sandbox") as docker:
                found = await _inspect(docker, sandbox.sandbox_id)
                if found is not None:
                    refusal = self._check_owner(found, sandbox.session_id, self._agent_id)
                    if not refusal and found.directory is not None and found.directory != directory:
                        refusal = f"its workspace is {found.directory}, not {directory}"
                    if refusal:
                        bound.warning("sandbox_destroy_refused", reason=refusal)
                        return DestroyVerdict.REFUSED
                    with contextlib.suppress(aiodocker.DockerError):  # judged by the inspect below
                        await docker.containers.container(found.id).delete(force=True, v=True)
                    if await _inspect(docker, found.id) is not None:
                        bound.warning("sandbox_destroy_unconfirmed", reason="the container is still there")
                        return DestroyVerdict.UNCONFIRMED
                elif refusal := _directory_refusal(directory, sandbox):
                    bound.warning("sandbox_destroy_refused", reason=refusal)
                    return DestroyVerdict.REFUSED
        except SandboxError as error:
            bound.warning("sandbox_destroy_failed", error=str(error))
            return DestroyVerdict.UNCONFIRMED
        try:
            await asyncio.wait_for(asyncio.to_thread(shutil.rmtree, directory, True), _REMOVE_TIMEOUT)
        except TimeoutError:
            pass
        if directory.exists():
            bound.warning("sandbox_destroy_unconfirmed", reason=f"{directory} could not be removed")
            return DestroyVerdict.UNCONFIRMED
        bound.debug("sandbox_destroyed")
        return DestroyVerdict.CONFIRMED

    async def list_sandboxes(self, labels: Mapping[str, str] | None = None) -> list[ListedSandbox]:
        """This installation's containers whose labels (read over their binding) include `labels`."""
        wanted = dict(labels or {})
        # A rebind changes the session and pool labels in the binding only: those are matched here.
        fixed = [f"{k}={v}" for k, v in wanted.items() if k not in (SESSION_LABEL, POOL_LABEL)]
        filters = json.dumps({"label": [f"{INSTALLATION_LABEL}={self._installation}", *fixed]})
        async with self._engine("list the sandboxes") as docker:
            listed = await docker.containers.list(all="1", filters=filters)
        result = []
        for item in listed:
            found = _summary(item._container)
            labels_now = await asyncio.to_thread(_effective_labels, found)
            if any(labels_now.get(k) != v for k, v in wanted.items()):
                continue
            session_id = labels_now.get(SESSION_LABEL, "")
            directory = found.directory or self._root / found.name
            sandbox = self._sandbox(found.name, session_id, directory)
            result.append(ListedSandbox(sandbox, labels_now, found.created_at, found.running))
        return result

    # -- helpers -----------------------------------------------------------------

    async def _make(self, docker: aiodocker.Docker, name: str, spec: SandboxSpec) -> _Container:
        directory = self._root / name
        await asyncio.to_thread(self._prepare, directory)
        try:
            container = await docker.containers.create(self._config(spec, directory), name=name)
        except aiodocker.DockerError as error:
            if error.status == 409:  # made meanwhile by another create for the session: its directory too
                found = await _inspect(docker, name)
                if found is None:
                    raise SandboxError(f"container {name} was made and removed meanwhile; try again") from error
                self._check_owner(found, spec.session_id, spec.agent_id, raise_error=True)
                return found
            await asyncio.to_thread(shutil.rmtree, directory, True)
            if error.status == 404:
                raise SandboxError(f"image {self._image} is missing: run `astrabox image build`") from None
            raise
        try:
            await container.start()
        except aiodocker.DockerError as error:
            with contextlib.suppress(aiodocker.DockerError):
                await container.delete(force=True)
            await asyncio.to_thread(shutil.rmtree, directory, True)
            raise SandboxError(f"container {name} did not start: {error.message}") from error
        log.debug("sandbox_created", sandbox_id=name, container=container.id[:12])
        return _Container(
            id=container.id,
            name=name,
            labels=self._labels(spec),
            running=True,
            status="running",
            directory=directory,
            model_route=spec.model_socket is not None,
            created_at=time.time(),
        )

    def _config(self, spec: SandboxSpec, directory: Path) -> dict[str, Any]:
        mounts = [
            _bind(directory / "workspace", INNER_WORKSPACE),
            _bind(directory / "home", INNER_HOME),
            *(_bind(path, str(path), read_only=True) for path in self._program_dirs),
        ]
        if spec.model_socket is not None:
            socket = Path(spec.model_socket)
            # The directory, not the socket: a socket re-created by a restarted agent stays reachable.
            if socket.name == Path(MODEL_SOCKET_INNER).name:
                mounts.append(_bind(socket.parent, str(Path(MODEL_SOCKET_INNER).parent), read_only=True))
            else:
                mounts.append(_bind(socket, MODEL_SOCKET_INNER, read_only=True))
        host: dict[str, Any] = {
            "Init": True,
            "NetworkMode": "none",
            "CapDrop": ["ALL"],
            "SecurityOpt": ["no-new-privileges"],
            "ReadonlyRootfs": True,
            "Mounts": mounts,
            "Tmpfs": {"/tmp": f"rw,nosuid,nodev,size={self._limits.tmp_mb or 512}m,mode=1777"},
            "IpcMode": "private",
            "RestartPolicy": {"Name": "no"},
            "LogConfig": {"Type": "none"},
        }
        if self._limits.cpus:
            host["NanoCpus"] = int(self._limits.cpus * 1e9)
        if self._limits.memory_mb:
            host["Memory"] = host["MemorySwap"] = self._limits.memory_mb * 1024 * 1024
        if self._limits.pids:
            host["PidsLimit"] = self._limits.pids
        return {
            "Image": self._image,
            "Cmd": ["sleep", "infinity"],
            "User": f"{self._uid}:{self._gid}",
            "WorkingDir": INNER_WORKSPACE,
            "Hostname": "astrabox",
            "Env": [f"PATH={DEFAULT_PATH}", f"HOME={INNER_HOME}"],
            "Labels": self._labels(spec),
            "HostConfig": host,
        }

    def _labels(self, spec: SandboxSpec) -> dict[str, str]:
        return {
            **spec.labels,
            SESSION_LABEL: spec.session_id,
            AGENT_LABEL: spec.agent_id,
            INSTALLATION_LABEL: self._installation,
        }

    def _check_owner(self, found: _Container, session_id: str, agent_id: str, *, raise_error: bool = False) -> str:
        """Why `found` is not the sandbox of `session_id` on `agent_id` (empty: it is)."""
        labels = _effective_labels(found)
        reason = ""
        if labels.get(INSTALLATION_LABEL) != self._installation:
            reason = f"it belongs to installation {labels.get(INSTALLATION_LABEL)!r}"
        elif labels.get(SESSION_LABEL) != session_id:
            reason = f"it is the sandbox of session {labels.get(SESSION_LABEL)!r}"
        elif agent_id and labels.get(AGENT_LABEL) != agent_id:
            reason = f"it belongs to agent {labels.get(AGENT_LABEL)!r}"
        if reason and raise_error:
            raise SandboxError(f"container {found.name} is not this session's sandbox: {reason}")
        return reason

    def _prepare(self, directory: Path) -> None:
        for part in ("workspace", "home", "run"):
            (directory / part).mkdir(parents=True, exist_ok=True)
        (directory / "run").chmod(0o700)
        for part in ("workspace", "home"):
            if os.geteuid() == 0:
                os.chown(directory / part, self._uid, self._gid)
            (directory / part).chmod(0o700)

    def _hand_over(self, home: Path) -> None:
        if os.geteuid() != 0:
            return
        for top, dirs, files in os.walk(home):
            for name in (*dirs, *files):
                path = os.path.join(top, name)
                with contextlib.suppress(FileNotFoundError):
                    if os.lstat(path).st_uid != self._uid:
                        os.lchown(path, self._uid, self._gid)

    def _name(self, session_id: str) -> str:
        _check_id(session_id, "session id")
        return f"astrabox-{self._installation}-{session_id}"

    def _directory(self, sandbox: Sandbox) -> Path:
        directory = sandbox.workspace.parent
        if sandbox.driver != self.name or directory.parent != self._root:
            raise SandboxError(f"sandbox {sandbox.sandbox_id} is not a docker sandbox under {self._root}")
        return directory

    def _sandbox(self, name: str, session_id: str, directory: Path) -> Sandbox:
        return Sandbox(
            sandbox_id=name,
            driver=self.name,
            session_id=session_id,
            workspace=directory / "workspace",
            inner_workspace=INNER_WORKSPACE,
            home=directory / "home",
        )

    def _cli(self) -> str | None:
        return shutil.which(self._docker_cli)

    @contextlib.asynccontextmanager
    async def _engine(self, what: str) -> AsyncIterator[aiodocker.Docker]:
        """A Docker client for one operation, within the driver's timeout; failures become SandboxError."""
        try:
            async with asyncio.timeout(self._timeout):
                try:
                    docker = aiodocker.Docker()
                except (AssertionError, ValueError) as error:  # no DOCKER_HOST and no local socket
                    raise SandboxError(
                        f"no Docker daemon was found ({error or 'no socket'}): start dockerd or set DOCKER_HOST"
                    ) from None
                async with docker:
                    yield docker
        except TimeoutError:
            raise SandboxError(f"Docker did not {what} within {self._timeout:.0f}s") from None
        except aiodocker.DockerError as error:
            if error.status == _UNREACHABLE:
                raise SandboxError(f"the Docker daemon is not reachable ({error.message}): start dockerd or set DOCKER_HOST") from error
            raise SandboxError(f"Docker could not {what}: {error.message}") from error
        except (OSError, aiohttp.ClientError) as error:
            raise SandboxError(
                f"the Docker daemon is not reachable ({error}): start dockerd or set DOCKER_HOST"
            ) from error


async def _inspect(docker: aiodocker.Docker, name: str) -> _Container | None:
    try:
        data = await docker.containers.get(name)
    except aiodocker.DockerError as error:
        if error.status == 404:
            return None
        raise
    info = data._container
    state = info.get("State") or {}
    return _Container(
        id=info["Id"],
        name=str(info.get("Name", "")).lstrip("/"),
        labels=dict((info.get("Config") or {}).get("Labels") or {}),
        running=bool(state.get("Running")),
        status=str(state.get("Status", "")),
        directory=_directory_of(info.get("Mounts") or []),
        model_route=any(m.get("Destination") in (MODEL_SOCKET_INNER, str(Path(MODEL_SOCKET_INNER).parent)) for m in info.get("Mounts") or []),
        created_at=_timestamp(str(info.get("Created", ""))),
    )


def _summary(info: Mapping[str, Any]) -> _Container:
    """A container of a listing (whose fields differ from an inspect's)."""
    names = info.get("Names") or [""]
    mounts = info.get("Mounts") or []
    return _Container(
        id=str(info.get("Id", "")),
        name=str(names[0]).lstrip("/"),
        labels=dict(info.get("Labels") or {}),
        running=info.get("State") == "running",
        status=str(info.get("State", "")),
        directory=_directory_of(mounts),
        model_route=any(m.get("Destination") in (MODEL_SOCKET_INNER, str(Path(MODEL_SOCKET_INNER).parent)) for m in mounts),
        created_at=float(info.get("Created") or 0.0),
    )


def _directory_of(mounts: Sequence[Mapping[str, Any]]) -> Path | None:
    for mount in mounts:
        if mount.get("Destination") == INNER_WORKSPACE and mount.get("Source"):
            return Path(mount["Source"]).parent
    return None


def _effective_labels(found: _Container) -> dict[str, str]:
    """The container's labels, overridden by its binding record (written by a rebind)."""
    labels = dict(found.labels)
    if found.directory is not None:
        bound = _read_json(found.directory / "run" / _BINDING).get("labels")
        if isinstance(bound, dict):
            labels = {k: v for k, v in labels.items() if k != POOL_LABEL}
            labels.update({str(k): str(v) for k, v in bound.items()})
    return labels


def _directory_refusal(directory: Path, sandbox: Sandbox) -> str:
    """Why the directory of a sandbox whose container is gone is not that sandbox's to remove
    (a pool sandbox's directory after a rebind belongs to the session it went to)."""
    bound = _read_json(directory / "run" / _BINDING).get("labels")
    if isinstance(bound, dict):
        owner = bound.get(SESSION_LABEL)
        return "" if owner == sandbox.session_id else f"{directory} went to session {owner!r}"
    return "" if directory.name == sandbox.sandbox_id else f"{directory} is not the directory of {sandbox.sandbox_id}"


def _bind(source: Path, target: str, *, read_only: bool = False) -> dict[str, Any]:
    # A "bind" mount (unlike the older Binds) fails when its source is missing instead of making it.
    return {"Type": "bind", "Source": str(source), "Target": target, "ReadOnly": read_only}


def _timestamp(text: str) -> float:
    """Docker's RFC 3339 time (nanoseconds, `Z`) as epoch seconds; 0 if unreadable."""
    match = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", text)
    if not match:
        return 0.0
    fraction = (match.group(2) or ".0")[:7]
    zone = "+00:00" if match.group(3) == "Z" else match.group(3)
    return datetime.fromisoformat(match.group(1) + fraction + zone).timestamp()


def _check_id(value: str, what: str) -> None:
    if not _ID.match(value):
        raise SandboxError(f"{what} {value!r} cannot name a container")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _write_private(path: Path, text: str, mode: int = 0o600) -> Path:
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(temporary, mode)
    os.replace(temporary, path)
    return path
