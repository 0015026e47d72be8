"""The `docker` sandbox driver: one container per sandbox on a Docker Engine, through aiodocker.

A sandbox is a container `astrabox-<installation>-<id>` (see `docker_container`
for what it is made with) and a host directory `<root>/<container name>/` (see
`docker_directory`) whose workspace and home it mounts.

Programs run through `docker exec`; their environment reaches it in a private
env file, never on a command line nor in the container's configuration.

A stopped sandbox is a stopped container, kept with its directory; `create`
starts it again. Its /tmp is a tmpfs: that does not survive a stop.

Labels are fixed when a container is made. A warm-pool container handed to a
session (`rebind`) is renamed for it and keeps its new session in its binding
record, which listing and destruction read over the labels.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import aiodocker
import structlog
from aiodocker.execs import Exec

from dataplane_agent.sandboxes.base import (
    AGENT_LABEL,
    END_MARKED,
    ENGINE_MARKER,
    INSTALLATION_LABEL,
    POOL_LABEL,
    RUN_MARKER,
    SESSION_LABEL,
    DestroyVerdict,
    ListedSandbox,
    Sandbox,
    SandboxError,
    SandboxSpec,
    model_relay,
)
from dataplane_agent.sandboxes.disk import WorkspaceDisk, detach
from dataplane_agent.sandboxes.docker_container import (
    DEFAULT_PATH,
    INNER_HOME,
    INNER_WORKSPACE,
    Container,
    ContainerLimits,
    ContainerRecipe,
    inner_program,
    inspect,
    listed,
)
from dataplane_agent.sandboxes.docker_directory import HostDirectory
from dataplane_agent.sandboxes.docker_engine import DockerEngine
from dataplane_agent.sandboxes.host_user import DEFAULT_HOST_UID
from dataplane_agent.sandboxes.isolation import RUNC, RUNSC, check_registered, check_runtime
from dataplane_agent.sandboxes.layer_mount import layer_env
from dataplane_agent.sandboxes.usage import SandboxUsage, from_docker_stats
from dataplane_agent.settings import DEFAULT_IMAGE

__all__ = ["ContainerLimits", "DockerSandboxDriver"]

log = structlog.get_logger(__name__)

DEFAULT_INSTALLATION = "default"
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_REMOVE_TIMEOUT = 30.0
# Seconds `docker stop` lets the container's init end before it kills it (see `stop`).
_STOP_GRACE = 2
_END_ATTEMPTS = 20
# Kills, in bash builtins, every process of the container but init (pid 1), its `sleep infinity`
# and the script itself, three rounds (what forked meanwhile is caught by the next).
_KILL_PROGRAMS = r"""
for round in 1 2 3; do
  for entry in /proc/[0-9]*; do
    pid=${entry#/proc/}
    [[ $pid == 1 || $pid == "$$" || $pid == "$BASHPID" ]] && continue
    read -r _ comm _ ppid _ 2>/dev/null < "$entry/stat" || continue
    [[ $ppid == 1 && $comm == "(sleep)" ]] && continue
    kill -KILL "$pid" 2>/dev/null
  done
done
:"""
# Polls, 0.1 s apart, for the Engine to see a gVisor sandbox's programs end before its stop.
_EXEC_END_POLLS = 50
# util-linux's setpriv sets the parent-death signal and execs the rest (kept across exec).
_DIE_WITH_PARENT = (shutil.which("setpriv") or "/usr/bin/setpriv", "--pdeathsig", "KILL", "--")
# What is read of the pids an end reports (a fork bomb's can be many).
_END_REPORT_BYTES = 64 * 1024


class DockerSandboxDriver:
    """Sandboxes as containers of one Docker Engine, one host directory each under `root`."""

    name = "docker"
    relays_terminal = True

    def __init__(
        self,
        root: Path,
        *,
        image: str = DEFAULT_IMAGE,
        installation: str = DEFAULT_INSTALLATION,
        agent_id: str = "",
        limits: ContainerLimits = ContainerLimits(),
        programs: Sequence[Path] = (),
        docker_cli: str = "docker",
        timeout: float = 30.0,
        disk: WorkspaceDisk | None = None,
        host_uid: int = DEFAULT_HOST_UID,
        runtime: str = RUNC,
    ) -> None:
        if not _ID.match(installation):
            raise SandboxError(f"installation id {installation!r} cannot name containers")
        if why := check_runtime(self.name, runtime):
            raise SandboxError(why)
        self.runtime = runtime
        self._root = Path(root).resolve()
        self._image = image
        self._installation = installation
        self._agent_id = agent_id
        self._docker_cli = docker_cli
        self._engine = DockerEngine(timeout)
        # As root the agent runs containers as `host_uid`, which owns nothing else on the host (the
        # image's uid 1000 is often a person's), and hands it the sandbox's directories; otherwise
        # the container runs as the agent's own user, which owns them already.
        self._uid, self._gid = (host_uid, host_uid) if os.geteuid() == 0 else (os.getuid(), os.getgid())
        if disk is not None and (why := disk.unavailable()):
            log.warning("sandbox_disk_limit_unavailable", reason=why, consequence="workspaces are not limited in size")
            disk = None
        self._disk = disk
        files = tuple(dict.fromkeys(Path(p).resolve() for p in programs))
        if len({inner_program(p) for p in files}) < len(files):
            raise SandboxError(f"programs {[str(p) for p in files]} would be mounted at the same path (same name)")
        self._recipe = ContainerRecipe(image, self._uid, self._gid, limits, files, runtime)

    # -- the contract ----------------------------------------------------------

    async def probe(self) -> None:
        if self._cli() is None:
            raise SandboxError(
                f"the docker CLI ({self._docker_cli!r}) was not found: install it (apt-get install docker.io); "
                "programs enter containers through `docker exec`"
            )
        for program in self._recipe.programs:
            if not program.is_file():
                raise SandboxError(f"{program} (mounted into every sandbox: the engine's CLI) is not a file")
        try:
            self._root.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise SandboxError(f"the sandbox root {self._root} cannot be created: {error.strerror}") from error
        async with self._engine.client("answer") as docker:
            if self.runtime != RUNC:
                check_registered(self.runtime, await docker.system.info())
            try:
                await docker.images.inspect(self._image)
            except aiodocker.DockerError as error:
                if error.status == 404:
                    raise SandboxError(f"image {self._image} is missing: run `astrabox image build`") from None
                raise

    async def create(self, spec: SandboxSpec) -> Sandbox:
        name = self._name(spec.session_id)
        _check_id(spec.agent_id, "agent id")
        async with self._engine.client("create the sandbox") as docker:
            found = await inspect(docker, name)
            if found is not None:
                self._check_owner(found, spec.session_id, spec.agent_id)
                if found.directory is None or not found.directory.workspace.is_dir():
                    # Its workspace was removed under it: a container still mounting the deleted
                    # directory would lose whatever is written there. It is made again, empty.
                    log.warning("sandbox_workspace_gone", sandbox_id=name)
                    await docker.containers.container(found.id).delete(force=True)
                    found = None
            if found is None:
                directory = await self._make(docker, name, spec)
            else:
                if not found.running:
                    if self._disk is not None and found.directory is not None:  # after a reboot: mounted again
                        await asyncio.to_thread(self._attach, found.directory)
                    await docker.containers.container(found.id).start()
                    log.info("sandbox_restarted", sandbox_id=name, was=found.status)
                directory = found.directory or HostDirectory(self._root / name)
                await asyncio.to_thread(directory.write_env, _sandbox_env(spec))
        return self._sandbox(name, spec.session_id, directory)

    async def rebind(self, sandbox: Sandbox, spec: SandboxSpec) -> Sandbox:
        """Hand an unused (warm-pool) sandbox to `spec.session_id`: renamed, bound and given the
        spec's environment as `create(spec)` would have. SandboxError if the session has a sandbox
        already, or this one is gone or went to a session before.

        A session's start waits on it, so the rename is all it asks of the Engine. Nothing is
        inspected: the name vouches for the container, since it holds the installation and the
        pool id, which only this driver's `create` gives a container (a random one, in a
        directory under this driver's root), and which a container keeps until its rebind; the
        directory's binding record says whether that rebind happened already."""
        name = self._name(spec.session_id)
        _check_id(spec.agent_id, "agent id")
        directory = self._directory(sandbox)
        if sandbox.sandbox_id != self._name(sandbox.session_id):
            raise SandboxError(f"sandbox {sandbox.sandbox_id} is not the one of {sandbox.session_id}")
        labels = {k: v for k, v in self._labels(spec).items() if k != POOL_LABEL}
        # The binding first: a crash before the rename leaves a container that lists as the
        # session's (the reconciler settles it), never a session's name on a pool binding.
        try:
            await asyncio.to_thread(directory.bind, labels, _sandbox_env(spec))
        except OSError:
            raise SandboxError(f"sandbox {sandbox.sandbox_id} does not exist") from None
        async with self._engine.client("rebind the sandbox") as docker:
            try:
                await docker.containers.container(sandbox.sandbox_id).rename(name)
            except aiodocker.DockerError as error:
                if error.status not in (404, 409):
                    raise
                # Not renamed: what is left of it stays the pool's, for the pool to retire.
                await asyncio.to_thread(directory.unbind)
                if error.status == 404:
                    raise SandboxError(f"sandbox {sandbox.sandbox_id} does not exist") from None
                raise SandboxError(f"session {spec.session_id} has a sandbox already ({name})") from None
        log.debug("sandbox_rebound", sandbox_id=name, was=sandbox.sandbox_id)
        return self._sandbox(name, spec.session_id, directory)

    async def launcher(
        self, sandbox: Sandbox, program: Sequence[str], env: Mapping[str, str], *, terminal: bool = False
    ) -> Path:
        if not program:
            raise SandboxError("launcher needs a program to run")
        directory = self._directory(sandbox)
        async with self._engine.client("find the sandbox") as docker:
            found = await inspect(docker, sandbox.sandbox_id)
        if found is None:
            raise SandboxError(f"sandbox {sandbox.sandbox_id} does not exist")
        if not found.running:
            raise SandboxError(f"sandbox {sandbox.sandbox_id} is not running ({found.status})")
        spec_env = await asyncio.to_thread(directory.read_env)
        merged = {"PATH": DEFAULT_PATH, **spec_env, **env, "HOME": INNER_HOME}
        stem = (Path(program[0]).name or "program") + ("-terminal" if terminal else "")
        # The environment (credentials included) reaches `docker exec` in a private file: not on
        # a command line, not in the container's configuration.
        program = [found.inner_path(program[0]), *program[1:]]
        relays = found.model_route or found.egress_route
        inner = model_relay(program, model=found.model_route, egress=found.egress_route) if relays else program
        # The `docker exec` client dies with the agent (its parent-death signal): a killed agent's
        # clients would otherwise linger on the host, and what they run in the container is ended
        # by the next agent (`end_leftovers`).
        command = [*_DIE_WITH_PARENT, self._cli() or self._docker_cli, "exec", "-i"]
        # A terminal: the container gets one of its own, which the CLI relays and resizes (on SIGWINCH).
        command += ["-t"] if terminal else []
        command += ["--env-file", str(directory.launcher_env(stem))]
        command += ["--workdir", INNER_WORKSPACE, "--user", self._user(found), found.id, *inner]
        purpose = f"Runs {program[0]} inside the AstraBox sandbox {sandbox.sandbox_id}."
        return await asyncio.to_thread(directory.write_launcher, stem, merged, command, purpose)

    async def end_processes(self, sandbox: Sandbox, marker: str, variable: str = RUN_MARKER) -> None:
        """What `docker exec` started outlives the host process that asked for it (an engine busy
        with a tool does not even notice that its input is gone), so the marked processes are found
        and killed from inside the container (see `_end`)."""
        await self._end(sandbox, "end marked processes", 'end_marked "$1" "$2"', marker, variable)

    async def end_leftovers(self, sandbox: Sandbox) -> int:
        """A killed agent's `docker exec` clients die with it, or linger on the host, but what they
        started in the container runs on (see `end_processes`). So every marked process, engine or
        command, is ended from inside."""
        script = f'end_marked "" {ENGINE_MARKER} && end_marked ""'
        ended = await self._end(sandbox, "end what an earlier agent left running", script)
        return len(ended)

    async def _end(self, sandbox: Sandbox, what: str, script: str, *args: str) -> set[int]:
        """Run `script` (calls of END_MARKED's `end_marked`, given `args`) in the container as the
        sandbox's user, until it reports that nothing marked is left; the pids it ended. A fork
        bomb can hold every pid the container has: the exec is retried until one is free."""
        ended: set[int] = set()
        command = ["/bin/bash", "-c", f'{END_MARKED}{script}\nstatus=$?\necho "${{ENDED[*]}}"\nexit $status']
        for attempt in range(_END_ATTEMPTS):
            try:
                async with self._engine.client(what) as docker:
                    found = await inspect(docker, sandbox.sandbox_id)
                    if found is None or not found.running:
                        return ended
                    run = await docker.containers.container(found.id).exec(
                        [*command, "astrabox-end", *args], user=self._user(found)
                    )
                    out = b""
                    async with run.start(detach=False) as stream:
                        while (message := await stream.read_out()) is not None:
                            if message.stream == 1 and len(out) < _END_REPORT_BYTES:
                                out += message.data
                    ended.update(int(pid) for pid in out.split() if pid.isdigit())
                    if (await run.inspect()).get("ExitCode") == 0:  # else a round limit: try again
                        return ended
            except (SandboxError, aiodocker.DockerError) as error:
                log.debug(
                    "sandbox_end_processes_retry", sandbox_id=sandbox.sandbox_id, attempt=attempt, error=str(error)
                )
            await asyncio.sleep(min(0.05 * 2**attempt, 1.0))
        log.warning("sandbox_end_processes_failed", sandbox_id=sandbox.sandbox_id, what=what)
        return ended

    async def _execs_ended(self, container_id: str) -> None:
        """Wait (a few seconds at most) until the Engine saw every `docker exec` of the container end:
        under gVisor an exit it has not seen yet when the container stops is never reported."""
        for _ in range(_EXEC_END_POLLS):
            try:
                async with self._engine.client("read the sandbox's programs") as docker:
                    info = await docker.containers.container(container_id).show()
                    running = [
                        exec_id
                        for exec_id in info.get("ExecIDs") or []
                        if (await Exec(docker, exec_id).inspect()).get("Running")
                    ]
            except SandboxError:  # an exec (or the container) gone meanwhile: look again
                running = ["?"]
            if not running:
                return
            await asyncio.sleep(0.1)
        log.warning("sandbox_execs_still_running", container=container_id[:12])

    async def stop(self, sandbox: Sandbox) -> None:
        directory = self._directory(sandbox)
        async with self._engine.client("stop the sandbox") as docker:
            found = await inspect(docker, sandbox.sandbox_id)
            if found is None:
                return
            if refusal := self._refusal(found, sandbox, directory):
                raise SandboxError(f"container {found.name} is not the sandbox to stop: {refusal}")
            if not found.running:
                return
        if found.runtime == RUNSC:
            # Under gVisor a `docker exec` whose container stops is never told its process ended: its
            # client would wait forever. Every program is killed from inside first (exits the Engine
            # does report), but init and its `sleep infinity`, whose end would stop the container
            # under this very exec; then the container is stopped.
            await self._end(sandbox, "end every program before the stop", _KILL_PROGRAMS)
            await self._execs_ended(found.id)
        async with self._engine.client("stop the sandbox") as docker:
            # The SIGTERM reaches the container's init, which passes it to `sleep infinity` alone:
            # what `docker exec` started (the CLI, already closed by the caller, and whatever it
            # left behind) is killed with the PID namespace when init ends, whatever the grace.
            # So a short one: it only spares init a SIGKILL.
            try:
                await docker.containers.container(found.id).stop(t=_STOP_GRACE)
            except aiodocker.DockerError as error:
                if error.status != 404:  # 404: removed meanwhile, nothing to stop
                    raise
        log.debug("sandbox_stopped", sandbox_id=sandbox.sandbox_id)

    async def destroy(self, sandbox: Sandbox) -> DestroyVerdict:
        directory = self._directory(sandbox)
        bound = log.bind(sandbox_id=sandbox.sandbox_id)
        try:
            async with self._engine.client("destroy the sandbox") as docker:
                found = await inspect(docker, sandbox.sandbox_id)
                if found is not None:
                    if refusal := self._refusal(found, sandbox, directory):
                        bound.warning("sandbox_destroy_refused", reason=refusal)
                        return DestroyVerdict.REFUSED
                    try:
                        await docker.containers.container(found.id).delete(force=True, v=True)
                    except aiodocker.DockerError:  # perhaps removed meanwhile: an inspect tells
                        if await inspect(docker, found.id) is not None:
                            bound.warning("sandbox_destroy_unconfirmed", reason="the container is still there")
                            return DestroyVerdict.UNCONFIRMED
                elif refusal := await asyncio.to_thread(directory.refusal, sandbox):
                    bound.warning("sandbox_destroy_refused", reason=refusal)
                    return DestroyVerdict.REFUSED
        except SandboxError as error:
            bound.warning("sandbox_destroy_failed", error=str(error))
            return DestroyVerdict.UNCONFIRMED
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for loses a cancellation that arrives as
            # the removal ends, and the caller (the warm pool's loop, as the agent stops) runs on.
            async with asyncio.timeout(_REMOVE_TIMEOUT):
                await asyncio.to_thread(_discard, directory)
        except (TimeoutError, SandboxError) as error:
            bound.warning("sandbox_directory_not_removed", error=str(error) or "timed out")
        if directory.path.exists():
            bound.warning("sandbox_destroy_unconfirmed", reason=f"{directory.path} could not be removed")
            return DestroyVerdict.UNCONFIRMED
        bound.debug("sandbox_destroyed")
        return DestroyVerdict.CONFIRMED

    async def list_sandboxes(self, labels: Mapping[str, str] | None = None) -> list[ListedSandbox]:
        """This installation's containers whose labels (read over their binding) include `labels`."""
        wanted = dict(labels or {})
        # A rebind changes the session and pool labels in the binding only: those are matched here.
        fixed = [f"{k}={v}" for k, v in wanted.items() if k not in (SESSION_LABEL, POOL_LABEL)]
        filters = json.dumps({"label": [f"{INSTALLATION_LABEL}={self._installation}", *fixed]})
        async with self._engine.client("list the sandboxes") as docker:
            containers = await docker.containers.list(all="1", filters=filters)
        result = []
        for item in containers:
            found = listed(item._container)
            labels_now = await asyncio.to_thread(found.labels_now)
            if any(labels_now.get(k) != v for k, v in wanted.items()):
                continue
            directory = found.directory or HostDirectory(self._root / found.name)
            sandbox = self._sandbox(found.name, labels_now.get(SESSION_LABEL, ""), directory)
            result.append(ListedSandbox(sandbox, labels_now, found.created_at, found.running))
        return result

    async def usage(self, sandboxes: Sequence[Sandbox]) -> dict[str, SandboxUsage]:
        """Each running container's CPU time and memory from its stats (all at once: Docker takes a
        second or so over each); a container it cannot read is left out."""
        async with self._engine.client("read the sandboxes' stats") as docker:

            async def read(sandbox: Sandbox) -> SandboxUsage | None:
                try:
                    stats = await docker.containers.container(sandbox.sandbox_id).stats(stream=False)
                except aiodocker.DockerError:
                    return None
                return from_docker_stats(stats[0]) if stats else None

            readings = await asyncio.gather(*(read(s) for s in sandboxes))
        return {s.sandbox_id: r for s, r in zip(sandboxes, readings, strict=True) if r is not None}

    # -- helpers -----------------------------------------------------------------

    async def _make(self, docker: aiodocker.Docker, name: str, spec: SandboxSpec) -> HostDirectory:
        """Make and start the container `name` for `spec`; the directory it mounts."""
        directory = HostDirectory(self._root / name)
        await asyncio.to_thread(directory.prepare, self._uid, self._gid, _sandbox_env(spec))
        try:
            if self._disk is not None:
                await asyncio.to_thread(self._attach, directory, spec.limits.disk_mb)
            recipe = dataclasses.replace(
                self._recipe,
                image=spec.image or self._recipe.image,
                limits=dataclasses.replace(
                    self._recipe.limits,
                    cpus=spec.limits.cpus or self._recipe.limits.cpus,
                    memory_mb=spec.limits.memory_mb or self._recipe.limits.memory_mb,
                    pids=spec.limits.pids or self._recipe.limits.pids,
                ),
            )
            await recipe.make(docker, name, self._labels(spec), directory, spec.model_socket, spec.egress_socket)
        except aiodocker.DockerError as error:
            if error.status == 409:  # made meanwhile by another create for the session: its directory too
                found = await inspect(docker, name)
                if found is None:
                    raise SandboxError(f"container {name} was made and removed meanwhile; try again") from error
                self._check_owner(found, spec.session_id, spec.agent_id)
                return directory
            await asyncio.to_thread(_discard, directory)
            if error.status == 404:
                raise SandboxError(
                    f"image {spec.image or self._image} is missing: run `astrabox image build`"
                ) from None
            raise
        except SandboxError:
            await asyncio.to_thread(_discard, directory)
            raise
        return directory

    def _user(self, found: Container) -> str:
        """Who programs run as in `found`: its own user (a container made by an earlier version
        may run as another uid than this driver's)."""
        return found.user or f"{self._uid}:{self._gid}"

    def _attach(self, directory: HostDirectory, size_mb: int = 0) -> None:
        """Mount the workspace's image (a new one of `size_mb` MiB, 0: the driver's size)."""
        assert self._disk is not None
        self._disk.attach(directory.path, directory.workspace, self._uid, self._gid, size_mb)

    def _labels(self, spec: SandboxSpec) -> dict[str, str]:
        own = {SESSION_LABEL: spec.session_id, AGENT_LABEL: spec.agent_id, INSTALLATION_LABEL: self._installation}
        return {**spec.labels, **own}

    def _check_owner(self, found: Container, session_id: str, agent_id: str) -> None:
        if reason := found.refusal(self._installation, session_id, agent_id):
            raise SandboxError(f"container {found.name} is not this session's sandbox: {reason}")

    def _refusal(self, found: Container, sandbox: Sandbox, directory: HostDirectory) -> str:
        """Why the container `found` is not `sandbox` of this agent (empty: it is)."""
        if refusal := found.refusal(self._installation, sandbox.session_id, self._agent_id):
            return refusal
        if found.directory is not None and found.directory != directory:
            return f"its workspace is {found.directory.path}, not {directory.path}"
        return ""

    def _name(self, session_id: str) -> str:
        _check_id(session_id, "session id")
        return f"astrabox-{self._installation}-{session_id}"

    def _directory(self, sandbox: Sandbox) -> HostDirectory:
        directory = sandbox.workspace.parent
        if sandbox.driver != self.name or directory.parent != self._root:
            raise SandboxError(f"sandbox {sandbox.sandbox_id} is not a docker sandbox under {self._root}")
        return HostDirectory(directory)

    def _sandbox(self, name: str, session_id: str, directory: HostDirectory) -> Sandbox:
        return Sandbox(
            sandbox_id=name,
            driver=self.name,
            session_id=session_id,
            workspace=directory.workspace,
            inner_workspace=INNER_WORKSPACE,
            home=directory.home,
        )

    def _cli(self) -> str | None:
        return shutil.which(self._docker_cli)


def _check_id(value: str, what: str) -> None:
    if not _ID.match(value):
        raise SandboxError(f"{what} {value!r} cannot name a container")


def _discard(directory: HostDirectory) -> None:
    """Remove a sandbox's directory, its workspace image unmounted first."""
    detach(directory.workspace)
    shutil.rmtree(directory.path, ignore_errors=True)


def _sandbox_env(spec: SandboxSpec) -> dict[str, str]:
    """What every program of the sandbox sees beyond a launcher's own: the environment's variables,
    under its layer's paths (its image's), under AstraBox's own."""
    layer = layer_env(DEFAULT_PATH) if spec.image else {}
    return {**spec.variables, **layer, **spec.env}
