"""What a sandbox container is: the configuration it is made with, and what the driver reads back of one.

The container runs `sleep infinity` under docker-init, made from the sandbox
image: no network, every capability dropped, no-new-privileges, a read-only
root, CPU, memory and pids limits, an unprivileged user. Its host directory's
`workspace/` and `home/` are bind-mounted at /workspace and /home/agent, its
`hosts` read-only at /etc/hosts; /tmp is a tmpfs. The engine's CLI is not in
the image: the file itself is bind-mounted read-only at `/opt/astrabox/bin/<name>`,
not at its host path, whose directories the container has too, with the image's
modes (the image's /root is 0700: a CLI installed in a clone under root's home
would be out of the sandbox user's reach), or not at all. The model
route's directory is bind-mounted read-only at /run/astrabox, so the socket an
agent re-creates after a restart is the one its sandboxes reach.

No network: the container's networking is disabled, besides its network mode
being "none" (which alone would still isolate it, should a daemon ignore the
flag). Either way it gets a network namespace of its own holding a loopback
alone; disabled, Docker leaves making it to the runtime instead of joining the
container to its "none" network, which costs about as much as all the rest of
a start. Docker then writes no /etc/hosts, hence the directory's.

The runtime is the driver's (`sandboxes.isolation`): runc, the host kernel's
namespaces and cgroups, or runsc, gVisor's own kernel in front of the host's.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiodocker
import structlog

from dataplane_agent.sandboxes.base import (
    AGENT_LABEL,
    EGRESS_SOCKET_INNER,
    INSTALLATION_LABEL,
    MODEL_SOCKET_INNER,
    SESSION_LABEL,
    SandboxError,
)
from dataplane_agent.sandboxes.docker_directory import HostDirectory

log = structlog.get_logger(__name__)

INNER_WORKSPACE = "/workspace"
INNER_HOME = "/home/agent"
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
# Where the programs launchers run (the engine's CLI) are mounted, each by its file name.
PROGRAMS_INNER = "/opt/astrabox/bin"
# Where a container with a model route has it mounted (the socket's directory, or the socket alone).
_MODEL_TARGETS = (MODEL_SOCKET_INNER, str(Path(MODEL_SOCKET_INNER).parent))


@dataclass(frozen=True, slots=True)
class ContainerLimits:
    """Per-container limits; 0 leaves that one unlimited."""

    cpus: float = 1.0
    memory_mb: int = 2048
    pids: int = 512
    tmp_mb: int = 512


@dataclass(frozen=True, slots=True)
class ContainerRecipe:
    """What every sandbox container of a driver is made from."""

    image: str
    uid: int
    gid: int
    limits: ContainerLimits
    # Host files of the programs launchers run (the engine's CLI), mounted read-only in PROGRAMS_INNER.
    programs: Sequence[Path]
    # The OCI runtime the Engine runs it with (`sandboxes.isolation`): runc, or runsc (gVisor).
    runtime: str = "runc"

    async def make(
        self,
        docker: aiodocker.Docker,
        name: str,
        labels: Mapping[str, str],
        directory: HostDirectory,
        model_socket: Path | None,
        egress_socket: Path | None = None,
    ) -> None:
        """Create the container `name` and start it. DockerError if it cannot be created (409: the
        name is taken; 404: the image is missing); SandboxError, and it is removed, if it does not start."""
        container = await docker.containers.create(self.body(labels, directory, model_socket, egress_socket), name=name)
        try:
            await container.start()
        except aiodocker.DockerError as error:
            with contextlib.suppress(aiodocker.DockerError):
                await container.delete(force=True)
            raise SandboxError(f"container {name} did not start: {error.message}") from error
        log.debug("sandbox_created", sandbox_id=name, container=container.id[:12])

    def body(
        self,
        labels: Mapping[str, str],
        directory: HostDirectory,
        model_socket: Path | None,
        egress_socket: Path | None = None,
    ) -> dict[str, Any]:
        """The Engine's create request for a sandbox of `directory` labelled `labels`."""
        mounts = [
            _bind(directory.workspace, INNER_WORKSPACE),
            _bind(directory.home, INNER_HOME),
            _bind(directory.hosts, "/etc/hosts", read_only=True),
            # Who the sandbox's user is: the image's own passwd names uid 1000, not the host uid.
            _bind(directory.passwd, "/etc/passwd", read_only=True),
            _bind(directory.group, "/etc/group", read_only=True),
            *(_bind(path, inner_program(path), read_only=True) for path in self.programs),
        ]
        if model_socket is not None:
            socket = Path(model_socket)
            # The directory, not the socket: a socket re-created by a restarted agent stays reachable.
            if socket.name == Path(MODEL_SOCKET_INNER).name:
                mounts.append(_bind(socket.parent, str(Path(MODEL_SOCKET_INNER).parent), read_only=True))
            else:
                mounts.append(_bind(socket, MODEL_SOCKET_INNER, read_only=True))
        if egress_socket is not None and not _in_routes(Path(egress_socket), model_socket):
            # Beside the model socket (as the agent serves it) it comes with that directory;
            # otherwise it is mounted alone (an agent restart then needs a new container for it).
            mounts.append(_bind(Path(egress_socket), EGRESS_SOCKET_INNER, read_only=True))
        host: dict[str, Any] = {
            "Init": True,
            "NetworkMode": "none",
            "CapDrop": ["ALL"],
            "SecurityOpt": ["no-new-privileges"],
            "ReadonlyRootfs": True,
            "Mounts": mounts,
            "Tmpfs": {"/tmp": f"rw,nosuid,nodev,size={self.limits.tmp_mb or 512}m,mode=1777"},
            "IpcMode": "private",
            "Runtime": self.runtime,
            "RestartPolicy": {"Name": "no"},
            "LogConfig": {"Type": "none"},
        }
        if self.limits.cpus:
            host["NanoCpus"] = int(self.limits.cpus * 1e9)
        if self.limits.memory_mb:
            host["Memory"] = host["MemorySwap"] = self.limits.memory_mb * 1024 * 1024
        if self.limits.pids:
            host["PidsLimit"] = self.limits.pids
        return {
            "Image": self.image,
            "Cmd": ["sleep", "infinity"],
            "User": f"{self.uid}:{self.gid}",
            "WorkingDir": INNER_WORKSPACE,
            "Hostname": "astrabox",
            "Env": [f"PATH={DEFAULT_PATH}", f"HOME={INNER_HOME}"],
            "Labels": dict(labels),
            "NetworkDisabled": True,
            "HostConfig": host,
        }


@dataclass(frozen=True, slots=True)
class Container:
    """What the driver reads of a container (from an inspect or a listing)."""

    id: str
    name: str
    labels: Mapping[str, str]
    running: bool
    status: str
    # Host directory of the sandbox (the parent of the /workspace mount's source); None if unknown.
    directory: HostDirectory | None
    model_route: bool
    created_at: float
    # Whether the egress proxy's socket is mounted (alone, or in the routes' directory).
    egress_route: bool = False
    # "uid:gid" the container runs as (what a launcher execs as); empty when a listing did not say.
    user: str = ""
    # Its bind mounts: host path -> path inside.
    mounts: Mapping[str, str] = field(default_factory=dict)
    # The OCI runtime it was made with (an inspect's; empty from a listing): a sandbox made before the
    # agent's runtime changed keeps its own until it is destroyed.
    runtime: str = ""

    def inner_path(self, program: str) -> str:
        """Where the host file `program` is inside: the program mounted there by itself, or in a
        mounted directory (a container made when the CLI's directory was mounted at its host path);
        unchanged when it is neither (a program of the image, /bin/sh)."""
        host = Path(program)
        if program in self.mounts:
            return self.mounts[program]
        for source, target in self.mounts.items():
            if Path(source) in host.parents:
                return str(Path(target) / host.relative_to(source))
        return program

    def labels_now(self) -> dict[str, str]:
        """Its labels, overridden by its binding record (written by a rebind); reads the record."""
        return self.directory.labels_over(self.labels) if self.directory is not None else dict(self.labels)

    def refusal(self, installation: str, session_id: str, agent_id: str) -> str:
        """Why it is not the sandbox of `session_id` on `agent_id` (any agent if empty) in
        `installation` (empty: it is); reads its binding record."""
        labels = self.labels_now()
        if labels.get(INSTALLATION_LABEL) != installation:
            return f"it belongs to installation {labels.get(INSTALLATION_LABEL)!r}"
        if labels.get(SESSION_LABEL) != session_id:
            return f"it is the sandbox of session {labels.get(SESSION_LABEL)!r}"
        if agent_id and labels.get(AGENT_LABEL) != agent_id:
            return f"it belongs to agent {labels.get(AGENT_LABEL)!r}"
        return ""


async def inspect(docker: aiodocker.Docker, name: str) -> Container | None:
    """The container `name` (or id); None if there is none."""
    try:
        data = await docker.containers.get(name)
    except aiodocker.DockerError as error:
        if error.status == 404:
            return None
        raise
    info = data._container
    state = info.get("State") or {}
    mounts = info.get("Mounts") or []
    return Container(
        id=info["Id"],
        name=str(info.get("Name", "")).lstrip("/"),
        labels=dict((info.get("Config") or {}).get("Labels") or {}),
        running=bool(state.get("Running")),
        status=str(state.get("Status", "")),
        directory=_directory_of(mounts),
        model_route=any(m.get("Destination") in _MODEL_TARGETS for m in mounts),
        egress_route=_egress_mounted(mounts),
        created_at=_timestamp(str(info.get("Created", ""))),
        user=str((info.get("Config") or {}).get("User") or ""),
        mounts=_binds(mounts),
        runtime=str((info.get("HostConfig") or {}).get("Runtime") or ""),
    )


def listed(info: Mapping[str, Any]) -> Container:
    """A container of a listing (whose fields differ from an inspect's)."""
    names = info.get("Names") or [""]
    mounts = info.get("Mounts") or []
    return Container(
        id=str(info.get("Id", "")),
        name=str(names[0]).lstrip("/"),
        labels=dict(info.get("Labels") or {}),
        running=info.get("State") == "running",
        status=str(info.get("State", "")),
        directory=_directory_of(mounts),
        model_route=any(m.get("Destination") in _MODEL_TARGETS for m in mounts),
        egress_route=_egress_mounted(mounts),
        created_at=float(info.get("Created") or 0.0),
        mounts=_binds(mounts),
    )


def inner_program(program: Path) -> str:
    """Where a program launchers run is mounted in every container."""
    return f"{PROGRAMS_INNER}/{program.name}"


def _directory_of(mounts: Sequence[Mapping[str, Any]]) -> HostDirectory | None:
    for mount in mounts:
        if mount.get("Destination") == INNER_WORKSPACE and mount.get("Source"):
            return HostDirectory(Path(mount["Source"]).parent)
    return None


def _in_routes(egress_socket: Path, model_socket: Path | None) -> bool:
    """Whether the egress socket comes with the model socket's directory mount."""
    return (
        model_socket is not None
        and Path(model_socket).name == Path(MODEL_SOCKET_INNER).name
        and egress_socket.parent == Path(model_socket).parent
        and egress_socket.name == Path(EGRESS_SOCKET_INNER).name
    )


def _egress_mounted(mounts: Sequence[Mapping[str, Any]]) -> bool:
    routes = str(Path(EGRESS_SOCKET_INNER).parent)
    for mount in mounts:
        target, source = mount.get("Destination"), str(mount.get("Source") or "")
        if target == EGRESS_SOCKET_INNER:
            return True
        if target == routes and source and (Path(source) / Path(EGRESS_SOCKET_INNER).name).exists():
            return True
    return False


def _binds(mounts: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    return {
        str(m["Source"]): str(m["Destination"])
        for m in mounts
        if m.get("Type") == "bind" and m.get("Source") and m.get("Destination")
    }


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
