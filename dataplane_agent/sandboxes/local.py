"""The `local` sandbox driver: bubblewrap namespaces on the host.

Each session owns `<root>/local-<session_id>/` with `workspace/`, `home/` and
`tmp/`, which appear inside as `/workspace`, `/home/agent` and `/tmp`. The
system (/usr and a few files of /etc) is read-only, and nothing else of the
host is mounted: not the agent's own files, not other sessions. The launcher
scripts (which hold the sandbox's environment) live in `run/`, outside of what
the sandbox sees.
"""

from __future__ import annotations

import asyncio
import contextlib
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

from dataplane_agent.sandboxes.base import MODEL_SOCKET_INNER, DestroyVerdict, Sandbox, SandboxError, SandboxSpec, model_relay

log = structlog.get_logger(__name__)

INNER_WORKSPACE = "/workspace"
INNER_HOME = "/home/agent"
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"

# What of /etc programs commonly need; the rest (shadow, credentials, package config) stays out.
_ETC_FILES = (
    "passwd", "group", "hosts", "hostname", "resolv.conf", "nsswitch.conf", "host.conf", "gai.conf",
    "ssl", "ca-certificates", "ca-certificates.conf", "pki", "crypto-policies", "localtime", "timezone",
    "alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "bash.bashrc", "profile", "inputrc",
    "mime.types", "magic", "os-release", "terminfo", "gitconfig", "protocols", "services",
)  # fmt: skip
_SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_PROBE_TIMEOUT = 10.0
_DESTROY_TIMEOUT = 30.0
_KILL_WAIT = 5.0


class LocalSandboxDriver:
    """Sandboxes made with bubblewrap, one directory per session under `root`."""

    name = "local"

    def __init__(self, root: Path, bwrap: str = "bwrap") -> None:
        self._root = Path(root).resolve()
        self._bwrap = bwrap
        # Sandbox-wide environment and model socket from each spec, applied to every launcher.
        self._spec_env: dict[str, dict[str, str]] = {}
        self._model_sockets: dict[str, Path] = {}

    async def probe(self) -> None:
        bwrap = shutil.which(self._bwrap)
        if bwrap is None:
            raise SandboxError(
                f"bubblewrap ({self._bwrap!r}) was not found: install it (apt-get install bubblewrap, "
                "dnf install bubblewrap) or pass its path to the local driver"
            )
        try:
            self._root.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise SandboxError(f"the sandbox root {self._root} cannot be created: {error.strerror}") from error
        args = [bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        args += ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true"]
        try:
            process = await asyncio.create_subprocess_exec(
                *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
            )
            _, stderr = await asyncio.wait_for(process.communicate(), timeout=_PROBE_TIMEOUT)
        except asyncio.TimeoutError:
            process.kill()
            raise SandboxError(f"bubblewrap did not start a test sandbox within {_PROBE_TIMEOUT:.0f}s") from None
        except OSError as error:
            raise SandboxError(f"bubblewrap at {bwrap} cannot be run: {error.strerror}") from error
        if process.returncode != 0:
            reason = stderr.decode(errors="replace").strip() or f"exit status {process.returncode}"
            raise SandboxError(
                f"bubblewrap cannot create namespaces here ({reason}). Run the agent as root, enable "
                "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
                "kernel.apparmor_restrict_unprivileged_userns=0), or inside a container allow them "
                "(e.g. --security-opt seccomp=unconfined --cap-add SYS_ADMIN); or use the docker driver"
            )

    async def create(self, spec: SandboxSpec) -> Sandbox:
        if not _SESSION_ID.match(spec.session_id):
            raise SandboxError(f"session id {spec.session_id!r} cannot name a local sandbox directory")
        sandbox_id = f"local-{spec.session_id}"
        directory = self._root / sandbox_id
        try:
            for part in ("workspace", "home", "tmp", "run"):
                (directory / part).mkdir(parents=True, exist_ok=True)
            (directory / "run").chmod(0o700)
            record = {"sandbox_id": sandbox_id, "session_id": spec.session_id, "agent_id": spec.agent_id, "labels": dict(spec.labels)}
            (directory / "run" / "sandbox.json").write_text(json.dumps(record))
        except OSError as error:
            raise SandboxError(f"cannot create sandbox directory {directory}: {error}") from error
        self._spec_env[sandbox_id] = dict(spec.env)
        if spec.model_socket is not None:
            self._model_sockets[sandbox_id] = spec.model_socket
        else:
            self._model_sockets.pop(sandbox_id, None)
        log.debug("sandbox_created", sandbox_id=sandbox_id, directory=str(directory))
        return Sandbox(
            sandbox_id=sandbox_id,
            driver=self.name,
            session_id=spec.session_id,
            workspace=directory / "workspace",
            inner_workspace=INNER_WORKSPACE,
            home=directory / "home",
        )

    async def launcher(self, sandbox: Sandbox, program: Sequence[str], env: Mapping[str, str]) -> Path:
        if not program:
            raise SandboxError("launcher needs a program to run")
        directory = self._directory(sandbox)
        if not directory.is_dir():
            raise SandboxError(f"sandbox {sandbox.sandbox_id} does not exist (no {directory})")
        bwrap = shutil.which(self._bwrap) or self._bwrap
        merged = {"PATH": DEFAULT_PATH, **self._spec_env.get(sandbox.sandbox_id, {}), **env, "HOME": INNER_HOME}
        model_socket = self._model_sockets.get(sandbox.sandbox_id)
        options = [*self._bwrap_args(directory, program[0], model_socket), "--clearenv"]
        for name, value in merged.items():
            options += ["--setenv", name, value]
        if any("\0" in option for option in options):
            raise SandboxError("sandbox environment values cannot contain NUL characters")
        stem = directory / "run" / (Path(program[0]).name or "program")
        # The options (environment and credentials included) reach bubblewrap through a private
        # file on fd 3, so they never show in a process listing, inside the sandbox or out.
        options_file = _write_private(stem.with_name(stem.name + ".bwrap-args"), "".join(f"{option}\0" for option in options))
        command = [bwrap, "--args", "3", "--", *(model_relay(program) if model_socket else program)]
        script = "\n".join(
            [
                "#!/bin/sh",
                f"# Runs {program[0]} inside the AstraBox sandbox {sandbox.sandbox_id}.",
                # bubblewrap keeps this pid and, outside the sandbox, this working directory:
                # together they let destroy() find it again.
                f"cd {shlex.quote(str(directory / 'run'))} || exit 127",
                "echo $$ >> pids",
                f"exec {shlex.join(command)} \"$@\" 3< {shlex.quote(str(options_file))}",
                "",
            ]
        )
        return _write_private(stem.with_name(stem.name + ".launcher"), script, mode=0o700)

    async def destroy(self, sandbox: Sandbox) -> DestroyVerdict:
        directory = self._directory(sandbox)
        self._spec_env.pop(sandbox.sandbox_id, None)
        self._model_sockets.pop(sandbox.sandbox_id, None)
        if not directory.exists():
            return DestroyVerdict.CONFIRMED
        try:
            await asyncio.wait_for(asyncio.to_thread(self._remove, directory), timeout=_DESTROY_TIMEOUT)
        except (OSError, asyncio.TimeoutError) as error:
            log.warning("sandbox_destroy_failed", sandbox_id=sandbox.sandbox_id, error=str(error))
        if directory.exists():
            return DestroyVerdict.UNCONFIRMED
        log.debug("sandbox_destroyed", sandbox_id=sandbox.sandbox_id)
        return DestroyVerdict.CONFIRMED

    async def rebind(self, sandbox: Sandbox, spec: SandboxSpec) -> Sandbox:
        """Hand an unused sandbox (a warm pool's) to `spec`'s session: its directory is renamed to the
        session's and its record rewritten, so it is exactly what `create(spec)` makes."""
        if not _SESSION_ID.match(spec.session_id):
            raise SandboxError(f"session id {spec.session_id!r} cannot name a local sandbox directory")
        source, target = self._directory(sandbox), self._root / f"local-{spec.session_id}"
        if target.exists():
            raise SandboxError(f"session {spec.session_id} already has a sandbox directory {target}")
        try:
            os.rename(source, target)
        except OSError as error:
            raise SandboxError(f"cannot rebind sandbox {sandbox.sandbox_id} to {target}: {error}") from error
        self._spec_env.pop(sandbox.sandbox_id, None)
        self._model_sockets.pop(sandbox.sandbox_id, None)
        return await self.create(spec)

    def _directory(self, sandbox: Sandbox) -> Path:
        if sandbox.driver != self.name or not _SESSION_ID.match(sandbox.session_id):
            raise SandboxError(f"sandbox {sandbox.sandbox_id} is not a local sandbox")
        return self._root / sandbox.sandbox_id

    def _bwrap_args(self, directory: Path, executable: str, model_socket: Path | None) -> list[str]:
        args = ["--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        args += ["--hostname", "astrabox", "--ro-bind", "/usr", "/usr"]
        for name in _SYSTEM_DIRS:
            host = Path("/") / name
            if host.is_symlink():
                args += ["--symlink", os.readlink(host), str(host)]
            elif host.is_dir():
                args += ["--ro-bind", str(host), str(host)]
        for name in _ETC_FILES:
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        args += ["--proc", "/proc", "--dev", "/dev"]
        args += ["--bind", str(directory / "tmp"), "/tmp"]
        args += ["--bind", str(directory / "home"), INNER_HOME]
        args += ["--bind", str(directory / "workspace"), INNER_WORKSPACE]
        if model_socket is not None:
            args += ["--ro-bind", str(model_socket), MODEL_SOCKET_INNER]
        # The program's own directory, read-only, mounted last so nothing above hides it.
        program_dir = Path(executable).resolve().parent if "/" in executable else None
        if program_dir is not None and not _is_within(program_dir, Path("/usr")):
            args += ["--ro-bind", str(program_dir), str(program_dir)]
        args += ["--chdir", INNER_WORKSPACE]
        return args

    def _remove(self, directory: Path) -> None:
        _kill_launched(directory)
        shutil.rmtree(directory, ignore_errors=True)
        if directory.exists():  # a straggler wrote as we removed: once more, then report
            shutil.rmtree(directory)


def _kill_launched(directory: Path) -> None:
    """SIGKILL the bubblewrap processes this sandbox's launchers started (their namespaces die
    with them), and wait until they are dead so nothing writes into the directory being removed."""
    run = directory / "run"
    try:
        pids = {int(line) for line in (run / "pids").read_text().split() if line.isdigit()}
    except FileNotFoundError:
        return
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
    while killed and time.monotonic() < deadline:
        killed = [pid for pid in killed if _alive(pid)]
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    """Running, not merely waiting to be reaped by its parent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def _write_private(path: Path, text: str, mode: int = 0o600) -> Path:
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(temporary, mode)
    os.replace(temporary, path)
    return path


def _is_within(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents
