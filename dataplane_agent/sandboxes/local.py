"""The `local` sandbox driver: bubblewrap namespaces on the host.

Each session owns `<root>/local-<session_id>/` with `workspace/`, `home/` and
`tmp/`, which appear inside as `/workspace`, `/home/agent` and `/tmp`. The
system (/usr and a few files of /etc) is read-only, the root is a read-only
tmpfs, and nothing else of the host is mounted: not the agent's own files, not
other sessions. The launcher scripts and their options (which hold the
sandbox's environment) live in `run/`, outside of what the sandbox sees.

Every program runs in its own user, PID, IPC, UTS, network, mount and (where
the kernel has them) cgroup namespaces, as uid/gid 1000 ("agent") with no
capabilities and no way to make further user namespaces. Its network holds only
a loopback: the model route's socket, mounted at /run/astrabox/model.sock and
relayed to the sandbox's loopback, is its only way out. Where the kernel refuses
user namespaces the driver says why in its log and keeps the other namespaces
(the programs then run as root without capabilities). Resource limits: see
`limits.py`.

A stopped sandbox is its directory with nothing running in it: `create`
re-opens it as any other, and its next launcher starts programs again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import structlog

from dataplane_agent.sandboxes.base import (
    EGRESS_CA_INNER,
    EGRESS_CA_NAME,
    EGRESS_SOCKET_INNER,
    MODEL_SOCKET_INNER,
    RUN_MARKER,
    DestroyVerdict,
    Sandbox,
    SandboxError,
    SandboxLimits,
    SandboxSpec,
    model_relay,
)
from dataplane_agent.sandboxes.disk import WorkspaceDisk, detach
from dataplane_agent.sandboxes.files import write_accounts, write_private
from dataplane_agent.sandboxes.host_user import HostUser
from dataplane_agent.sandboxes.layer_mount import INNER_LAYER, layer_env
from dataplane_agent.sandboxes.limits import CGROUP_ROOT, LocalLimits, SandboxCgroups
from dataplane_agent.sandboxes.usage import SandboxUsage
from serverkit.waits import bounded

log = structlog.get_logger(__name__)

INNER_WORKSPACE = "/workspace"
INNER_HOME = "/home/agent"
INNER_UID = 1000
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"

# What of /etc programs commonly need; the rest (shadow, credentials, package config) stays out.
_ETC_FILES = (
    "hosts", "hostname", "resolv.conf", "nsswitch.conf", "host.conf", "gai.conf",
    "ssl", "ca-certificates", "ca-certificates.conf", "pki", "crypto-policies", "localtime", "timezone",
    "alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "bash.bashrc", "profile", "inputrc",
    "mime.types", "magic", "os-release", "terminfo", "gitconfig", "protocols", "services",
)  # fmt: skip
_SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_ENV = shutil.which("env") or "/usr/bin/env"
_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_PROBE_TIMEOUT = 10.0
_DESTROY_TIMEOUT = 30.0
_STOP_TIMEOUT = 30.0
_KILL_WAIT = 5.0
_SETSID = shutil.which("setsid") or "/usr/bin/setsid"  # util-linux's, in the host's /usr every sandbox sees
_NAMESPACES = ("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--unshare-cgroup-try")
_USER_NAMESPACE = ("--unshare-user", "--uid", str(INNER_UID), "--gid", str(INNER_UID))
# The strongest first; the last one is the floor: without it the driver refuses to run.
_ISOLATION_LADDER = ((*_USER_NAMESPACE, "--disable-userns"), _USER_NAMESPACE, ())


@dataclasses.dataclass(frozen=True, slots=True)
class Isolation:
    """What this host lets bubblewrap do, found once by a test sandbox."""

    bwrap: str
    # The user-namespace options that worked (empty: none).
    user_namespace: tuple[str, ...]
    # Who sandboxes are on the host when the agent is root (see host_user); None: the agent's user.
    host_user: HostUser | None
    # Each workspace's own image (see disk); None: plain directories, no disk limit.
    disk: WorkspaceDisk | None
    cgroups: SandboxCgroups | None

    @property
    def pids_limited(self) -> bool:
        return self.cgroups is not None and "pids" in self.cgroups.controllers


class LocalSandboxDriver:
    """Sandboxes made with bubblewrap, one directory per session under `root`."""

    name = "local"
    # The agent's pseudo-terminal is the program's own.
    relays_terminal = False

    def __init__(
        self,
        root: Path,
        bwrap: str = "bwrap",
        limits: LocalLimits = LocalLimits(),
        cgroup_root: Path = CGROUP_ROOT,
        host_user: HostUser = HostUser(),
        disk: WorkspaceDisk | None = None,
    ) -> None:
        self._root = Path(root).resolve()
        self._host_user = host_user
        self._disk = disk
        self._bwrap = bwrap
        self._limits = limits
        self._cgroup_root = cgroup_root
        self._isolation: Isolation | None = None
        self._probing = asyncio.Lock()
        # Sandbox-wide environment and model socket from each spec, applied to every launcher.
        self._spec_env: dict[str, dict[str, str]] = {}
        self._model_sockets: dict[str, Path] = {}
        self._egress_sockets: dict[str, Path] = {}
        # Each sandbox's environment: its layer (mounted read-only) and variables.
        self._layers: dict[str, Path] = {}
        self._variables: dict[str, dict[str, str]] = {}
        self._own_limits: dict[str, LocalLimits] = {}

    async def probe(self) -> None:
        self._isolation = None
        await self.isolation()

    async def isolation(self) -> Isolation:
        """The isolation this host allows, found by starting test sandboxes (once)."""
        async with self._probing:
            if self._isolation is None:
                self._isolation = await self._find_isolation()
            return self._isolation

    async def _find_isolation(self) -> Isolation:
        bwrap = shutil.which(self._bwrap)
        if bwrap is None:
            raise SandboxError(
                f"bubblewrap ({self._bwrap!r}) was not found: install it (apt-get install bubblewrap, "
                "dnf install bubblewrap) or pass its path to the local driver"
            )
        if shutil.which("socat") is None:
            raise SandboxError(
                "socat was not found: install it (apt-get install socat); sandboxes reach the model through it"
            )
        try:
            self._root.mkdir(parents=True, exist_ok=True)
            self._root.chmod(0o700)
        except OSError as error:
            raise SandboxError(f"the sandbox root {self._root} cannot be created: {error.strerror}") from error
        host_user = await self._find_host_user(bwrap)
        refusals = []
        for user_namespace in _ISOLATION_LADDER:
            mounts = ("--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev")
            test = [bwrap, "--die-with-parent", *user_namespace, *_NAMESPACES, *mounts, "true"]
            refusal = await _try_bwrap(host_user.command({}, test)[1] if host_user else test)
            if not refusal:
                break
            refusals.append(refusal)
        else:
            raise SandboxError(
                f"bubblewrap cannot create namespaces here ({refusals[-1]}). Run the agent as root, enable "
                "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
                "kernel.apparmor_restrict_unprivileged_userns=0), or inside a container allow them "
                "(e.g. --security-opt seccomp=unconfined --cap-add SYS_ADMIN); or use the docker driver"
            )
        if not user_namespace:
            log.warning(
                "sandbox_user_namespace_unavailable",
                reason=refusals[-1],
                consequence="sandboxed programs run as root without capabilities",
            )
        cgroups, missing = await asyncio.to_thread(SandboxCgroups.find, self._root, self._limits, self._cgroup_root)
        if missing:
            log.warning("sandbox_limits_unavailable", missing=missing)
        if cgroups is not None:
            await asyncio.to_thread(cgroups.sweep)
        controllers = sorted(cgroups.controllers) if cgroups else []
        log.info("local_sandbox_isolation", user_namespace=bool(user_namespace), cgroups=controllers)
        disk = self._disk
        if disk is not None and (why := disk.unavailable()):
            log.warning("sandbox_disk_limit_unavailable", reason=why, consequence="workspaces are not limited in size")
            disk = None
        return Isolation(bwrap=bwrap, user_namespace=user_namespace, host_user=host_user, cgroups=cgroups, disk=disk)

    async def _find_host_user(self, bwrap: str) -> HostUser | None:
        """The host user a root agent's sandboxes run as, if this host lets bubblewrap run as it."""
        if os.geteuid() != 0:
            return None
        test = [bwrap, "--die-with-parent", *_USER_NAMESPACE, "--ro-bind", "/", "/", "true"]
        missing = self._host_user.missing_tools()
        refusal = (
            f"{', '.join(missing)} not found (util-linux)"
            if missing
            else await _try_bwrap(self._host_user.command({}, test)[1])
        )
        if not refusal:
            return self._host_user
        log.warning(
            "sandbox_host_user_unavailable",
            host_uid=self._host_user.uid,
            reason=refusal,
            consequence="files sandboxes write are owned by root on the host; only the agent's private "
            "directories keep other host users from them",
        )
        return None

    async def create(self, spec: SandboxSpec) -> Sandbox:
        if not _SESSION_ID.match(spec.session_id):
            raise SandboxError(f"session id {spec.session_id!r} cannot name a local sandbox directory")
        sandbox_id = f"local-{spec.session_id}"
        directory = self._root / sandbox_id
        isolation = await self.isolation()
        try:
            record = {
                "sandbox_id": sandbox_id,
                "session_id": spec.session_id,
                "agent_id": spec.agent_id,
                "labels": dict(spec.labels),
            }
            await asyncio.to_thread(self._prepare, directory, isolation, json.dumps(record), spec.limits.disk_mb)
        except OSError as error:
            raise SandboxError(f"cannot create the directory of sandbox {sandbox_id}: {error.strerror}") from error
        self._spec_env[sandbox_id] = dict(spec.env)
        self._variables[sandbox_id] = dict(spec.variables)
        if spec.limits != SandboxLimits():
            self._own_limits[sandbox_id] = dataclasses.replace(
                self._limits,
                cpus=spec.limits.cpus or self._limits.cpus,
                memory_mb=spec.limits.memory_mb or self._limits.memory_mb,
                pids=spec.limits.pids or self._limits.pids,
            )
        else:
            self._own_limits.pop(sandbox_id, None)
        if spec.layer is not None:
            self._layers[sandbox_id] = spec.layer
        else:
            self._layers.pop(sandbox_id, None)
        if spec.model_socket is not None:
            self._model_sockets[sandbox_id] = spec.model_socket
        else:
            self._model_sockets.pop(sandbox_id, None)
        if spec.egress_socket is not None:
            self._egress_sockets[sandbox_id] = spec.egress_socket
        else:
            self._egress_sockets.pop(sandbox_id, None)
        log.debug("sandbox_created", sandbox_id=sandbox_id, directory=str(directory))
        return Sandbox(
            sandbox_id=sandbox_id,
            driver=self.name,
            session_id=spec.session_id,
            workspace=directory / "workspace",
            inner_workspace=INNER_WORKSPACE,
            home=directory / "home",
        )

    def _prepare(self, directory: Path, isolation: Isolation, record: str, disk_mb: int = 0) -> None:
        """The sandbox's directory: private to the agent; inside it, what the sandbox mounts
        writable is its user's, `etc/` (its passwd and group) readable, `run/` the agent's alone.
        Its `record` (whose it is, its labels) is written first: the reconciler, listing sandboxes
        meanwhile, must not take a pool sandbox in the making for a session's."""
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory.chmod(0o700)
        for part in ("workspace", "home", "tmp", "etc", "run"):
            (directory / part).mkdir(mode=0o700, exist_ok=True)
        write_private(directory / "run" / "sandbox.json", record)
        (directory / "etc").chmod(0o755)
        write_accounts(directory / "etc", INNER_UID, INNER_UID, INNER_HOME)
        host_user = isolation.host_user
        if isolation.disk is not None:
            owner = (host_user.uid, host_user.gid) if host_user else (os.getuid(), os.getgid())
            isolation.disk.attach(directory, directory / "workspace", *owner, size_mb=disk_mb)
        if host_user is not None:
            for part in ("workspace", "home", "tmp"):
                host_user.hand_over(directory / part)

    async def launcher(
        self, sandbox: Sandbox, program: Sequence[str], env: Mapping[str, str], *, terminal: bool = False
    ) -> Path:
        if not program:
            raise SandboxError("launcher needs a program to run")
        directory = self._directory(sandbox)
        if not directory.is_dir():
            raise SandboxError(f"sandbox {sandbox.sandbox_id} does not exist (its directory is gone)")
        isolation = await self.isolation()
        layer = self._layers.get(sandbox.sandbox_id)
        merged = {
            **self._variables.get(sandbox.sandbox_id, {}),
            "PATH": DEFAULT_PATH,
            **self._spec_env.get(sandbox.sandbox_id, {}),
            **env,
            "HOME": INNER_HOME,
        }
        if layer is not None:
            merged.update(layer_env(merged["PATH"]))
        model_socket = self._model_sockets.get(sandbox.sandbox_id)
        egress_socket = self._egress_sockets.get(sandbox.sandbox_id)
        sources = self._sources(directory, program[0], model_socket, egress_socket)
        if layer is not None:  # only the agent writes it: staged by its path (see host_user)
            sources["layer"] = layer
        staged = {name: Path(isolation.host_user.staged(name)) for name in sources} if isolation.host_user else sources
        options = [*self._bwrap_args(isolation, staged, program[0], model_socket, egress_socket), "--clearenv"]
        for name, value in merged.items():
            options += ["--setenv", name, value]
        if any("\0" in option for option in options):
            raise SandboxError("sandbox environment values cannot contain NUL characters")
        stem = directory / "run" / ((Path(program[0]).name or "program") + ("-terminal" if terminal else ""))
        # The options (environment and credentials included) reach bubblewrap through a private
        # file on fd 3, so they never show in a process listing, inside the sandbox or out.
        options_file = write_private(
            stem.with_name(stem.name + ".bwrap-args"), "".join(f"{option}\0" for option in options)
        )
        # `env -i`: bubblewrap's first process inside is a copy of the launcher, and its
        # /proc/1/environ would show the agent's whole environment to the sandbox.
        if terminal:
            # bubblewrap's --new-session leaves the program no controlling terminal (so that it cannot
            # push input into one of the host's); a session of its own inside takes the agent's.
            program = [_SETSID, "--wait", "--ctty", *program]
        command = [isolation.bwrap, "--args", "3", "--", *_relayed(program, model_socket, egress_socket)]
        opens = ""
        if isolation.host_user is not None:
            opens, command = isolation.host_user.command(sources, command)
        own_limits = self._own_limits.get(sandbox.sandbox_id)
        cgroup = isolation.cgroups.shell(sandbox.sandbox_id, own_limits) if isolation.cgroups else []
        script = "\n".join(
            [
                "#!/bin/sh",
                f"# Runs {program[0]} inside the AstraBox sandbox {sandbox.sandbox_id}.",
                # bubblewrap keeps this pid and, outside the sandbox, this working directory:
                # together they let destroy() find it again.
                f"cd {shlex.quote(str(directory / 'run'))} || exit 127",
                "echo $$ >> pids",
                *self._limits.shell(),
                *cgroup,
                opens,
                f'exec {shlex.join([_ENV, "-i", *command])} "$@" 3< {shlex.quote(str(options_file))}',
                "",
            ]
        )
        return write_private(stem.with_name(stem.name + ".launcher"), script, mode=0o700)

    async def end_processes(self, sandbox: Sandbox, marker: str, variable: str = RUN_MARKER) -> None:
        """Nothing to do: each launcher's programs live in a PID namespace of their own, whose every
        process the kernel kills when the launcher's bubblewrap (killed with its process group, or
        ended with its program) goes."""

    async def end_leftovers(self, sandbox: Sandbox) -> int:
        """Each launcher's bubblewrap dies with the agent that started it (--die-with-parent), and
        the sandbox's programs with it (their PID namespace ends). Were one still there (started
        through a program that is not killed with its parent), it is killed now, by the pid its
        launcher wrote in the agent's own directory, never by anything the sandbox wrote."""
        directory = self._directory(sandbox)
        if not directory.exists():
            return 0
        killed, survivors = await asyncio.to_thread(_kill_launched, directory)  # bounded: _KILL_WAIT
        if survivors:
            log.warning("sandbox_end_processes_failed", sandbox_id=sandbox.sandbox_id, survivors=survivors)
        return len(killed)

    async def stop(self, sandbox: Sandbox) -> None:
        directory = self._directory(sandbox)
        if not directory.exists():
            return
        try:
            async with asyncio.timeout(_STOP_TIMEOUT):
                await asyncio.to_thread(self._stop, sandbox.sandbox_id, directory)
        except TimeoutError:
            raise SandboxError(f"sandbox {sandbox.sandbox_id} did not stop within {_STOP_TIMEOUT:.0f}s") from None
        log.debug("sandbox_stopped", sandbox_id=sandbox.sandbox_id)

    async def destroy(self, sandbox: Sandbox) -> DestroyVerdict:
        directory = self._directory(sandbox)
        self._spec_env.pop(sandbox.sandbox_id, None)
        self._model_sockets.pop(sandbox.sandbox_id, None)
        self._egress_sockets.pop(sandbox.sandbox_id, None)
        self._layers.pop(sandbox.sandbox_id, None)
        self._variables.pop(sandbox.sandbox_id, None)
        self._own_limits.pop(sandbox.sandbox_id, None)
        if not directory.exists():
            return DestroyVerdict.CONFIRMED
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for loses a cancellation that arrives as
            # the removal ends, and the caller (the warm pool's loop, as the agent stops) runs on.
            async with asyncio.timeout(_DESTROY_TIMEOUT):
                await asyncio.to_thread(self._remove, sandbox.sandbox_id, directory)
        except (TimeoutError, OSError, SandboxError) as error:
            log.warning("sandbox_destroy_failed", sandbox_id=sandbox.sandbox_id, error=str(error))
        if directory.exists():
            return DestroyVerdict.UNCONFIRMED
        log.debug("sandbox_destroyed", sandbox_id=sandbox.sandbox_id)
        return DestroyVerdict.CONFIRMED

    async def usage(self, sandboxes: Sequence[Sandbox]) -> dict[str, SandboxUsage]:
        """Each sandbox's CPU time and memory from its cgroups; none without cgroups (not measured)."""
        cgroups = (await self.isolation()).cgroups
        if cgroups is None:
            return {}

        def read() -> dict[str, SandboxUsage]:
            found = {s.sandbox_id: SandboxUsage(*cgroups.usage(s.sandbox_id)) for s in sandboxes}
            return {k: u for k, u in found.items() if u.cpu_seconds is not None or u.memory_bytes is not None}

        return await asyncio.to_thread(read)

    async def rebind(self, sandbox: Sandbox, spec: SandboxSpec) -> Sandbox:
        """Hand an unused sandbox (a warm pool's) to `spec`'s session: its directory is renamed to the
        session's and its record rewritten, so it is exactly what `create(spec)` makes."""
        if not _SESSION_ID.match(spec.session_id):
            raise SandboxError(f"session id {spec.session_id!r} cannot name a local sandbox directory")
        source, target = self._directory(sandbox), self._root / f"local-{spec.session_id}"
        if target.exists():
            raise SandboxError(f"session {spec.session_id} already has a sandbox directory")
        # What a pre-started engine runs in the sandbox keeps running: its cgroups are renamed
        # with the sandbox, and its mounts follow the renamed directory.
        cgroups = self._isolation.cgroups if self._isolation else None
        try:
            if cgroups is not None:
                cgroups.rename(sandbox.sandbox_id, target.name)
            try:
                os.rename(source, target)
            except OSError:
                if cgroups is not None:
                    cgroups.rename(target.name, sandbox.sandbox_id)
                raise
        except OSError as error:
            raise SandboxError(
                f"cannot rebind sandbox {sandbox.sandbox_id} to session {spec.session_id}: {error.strerror}"
            ) from error
        self._spec_env.pop(sandbox.sandbox_id, None)
        self._model_sockets.pop(sandbox.sandbox_id, None)
        self._egress_sockets.pop(sandbox.sandbox_id, None)
        self._layers.pop(sandbox.sandbox_id, None)
        self._variables.pop(sandbox.sandbox_id, None)
        self._own_limits.pop(sandbox.sandbox_id, None)
        return await self.create(spec)

    def _directory(self, sandbox: Sandbox) -> Path:
        if sandbox.driver != self.name or not _SESSION_ID.match(sandbox.session_id):
            raise SandboxError(f"sandbox {sandbox.sandbox_id} is not a local sandbox")
        return self._root / sandbox.sandbox_id

    def _sources(
        self, directory: Path, executable: str, model_socket: Path | None, egress_socket: Path | None
    ) -> dict[str, Path]:
        """The host directories a launcher mounts into the sandbox, by name (see host_user)."""
        sources = {name: directory / name for name in ("etc", "workspace", "home", "tmp")}
        # The program's own directory, unless the system's /usr holds it already.
        program_dir = Path(executable).resolve().parent if "/" in executable else None
        if program_dir is not None and not _is_within(program_dir, Path("/usr")):
            sources["program"] = program_dir
        if model_socket is not None:
            sources["model"] = model_socket.parent
        if egress_socket is not None:
            sources["egress"] = egress_socket.parent
        return sources

    def _bwrap_args(
        self,
        isolation: Isolation,
        sources: Mapping[str, Path],
        executable: str,
        model_socket: Path | None,
        egress_socket: Path | None,
    ) -> list[str]:
        """bubblewrap's options, mounting `sources` (host paths, or where a hand-over staged them)."""
        args = ["--die-with-parent", "--new-session", *isolation.user_namespace, *_NAMESPACES]
        if os.geteuid() == 0 and isolation.host_user is None:  # a privileged caller keeps its capabilities unless told
            args += ["--cap-drop", "ALL"]
        args += ["--hostname", "astrabox", "--ro-bind", "/usr", "/usr"]
        for name in _SYSTEM_DIRS:
            host = Path("/") / name
            if host.is_symlink():
                args += ["--symlink", os.readlink(host), str(host)]
            elif host.is_dir():
                args += ["--ro-bind", str(host), str(host)]
        for name in _ETC_FILES:
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        args += [
            "--ro-bind",
            str(sources["etc"] / "passwd"),
            "/etc/passwd",
            "--ro-bind",
            str(sources["etc"] / "group"),
            "/etc/group",
        ]
        args += ["--proc", "/proc", "--dev", "/dev"]
        args += ["--bind", str(sources["tmp"]), "/tmp"]
        args += ["--bind", str(sources["home"]), INNER_HOME]
        args += ["--bind", str(sources["workspace"]), INNER_WORKSPACE]
        if model_socket is not None:
            args += ["--ro-bind", str(sources["model"] / model_socket.name), MODEL_SOCKET_INNER]
        if egress_socket is not None:
            args += ["--ro-bind", str(sources["egress"] / egress_socket.name), EGRESS_SOCKET_INNER]
            # The trust bundle naming the agent's egress CA, where the proxy wrote one.
            args += ["--ro-bind-try", str(sources["egress"] / EGRESS_CA_NAME), EGRESS_CA_INNER]
        if "layer" in sources:
            args += ["--ro-bind", str(sources["layer"]), INNER_LAYER]
        # The program's own directory, read-only, mounted last so nothing above hides it.
        if "program" in sources:
            program_dir = Path(executable).resolve().parent
            args += ["--ro-bind", str(sources["program"]), str(program_dir)]
        args += ["--remount-ro", "/", "--chdir", INNER_WORKSPACE]
        return args

    def _stop(self, sandbox_id: str, directory: Path) -> None:
        _, survivors = _kill_launched(directory)
        if survivors:
            raise SandboxError(f"sandbox {sandbox_id} could not be stopped: pids {survivors} survived SIGKILL")
        # Whatever is left in its cgroups is killed with it; the next launcher makes them again.
        cgroups = self._isolation.cgroups if self._isolation else None
        if cgroups is not None and not cgroups.remove(sandbox_id):
            raise SandboxError(f"sandbox {sandbox_id} could not be stopped: its cgroups are still busy")

    def _remove(self, sandbox_id: str, directory: Path) -> None:
        self._stop(sandbox_id, directory)  # nothing may still write into what is being removed
        detach(directory / "workspace")
        shutil.rmtree(directory, ignore_errors=True)
        if directory.exists():  # a straggler wrote as we removed: once more, then report
            shutil.rmtree(directory)


async def _try_bwrap(args: list[str]) -> str:
    """Why bubblewrap refused to run `args`; empty when it ran."""
    try:
        process = await asyncio.create_subprocess_exec(
            *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
        )
    except OSError as error:
        raise SandboxError(f"bubblewrap at {args[0]} cannot be run: {error.strerror}") from error
    try:
        _, stderr = await bounded(process.communicate(), _PROBE_TIMEOUT)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise SandboxError(f"bubblewrap did not start a test sandbox within {_PROBE_TIMEOUT:.0f}s") from None
    if process.returncode == 0:
        return ""
    return stderr.decode(errors="replace").strip() or f"exit status {process.returncode}"


def _kill_launched(directory: Path) -> tuple[list[int], list[int]]:
    """SIGKILL the bubblewrap processes this sandbox's launchers started (their namespaces die
    with them), and wait until they are dead so nothing writes into the directory being removed;
    those killed, and those still alive after that wait."""
    run = directory / "run"
    try:
        pids = {int(line) for line in (run / "pids").read_text().split() if line.isdigit()}
    except FileNotFoundError:
        return [], []
    killed = []
    for pid in pids:
        try:
            same_process = os.readlink(f"/proc/{pid}/cwd") == str(run)  # not a recycled pid
        except OSError:
            continue
        if same_process:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    deadline = time.monotonic() + _KILL_WAIT
    alive = killed
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _alive(pid)]
        time.sleep(0.01)
    return killed, [pid for pid in alive if _alive(pid)]


def _alive(pid: int) -> bool:
    """Running, not merely waiting to be reaped by its parent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def _is_within(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def _relayed(program: Sequence[str], model_socket: Path | None, egress_socket: Path | None) -> list[str]:
    """`program`, preceded by the relays of the sockets the sandbox has."""
    if model_socket is None and egress_socket is None:
        return list(program)
    return model_relay(program, model=model_socket is not None, egress=egress_socket is not None)
