"""A docker sandbox's host directory: its layout, the records the driver keeps there.

`<root>/<container name>/` holds `workspace/` and `home/`, bind-mounted at
/workspace and /home/agent, `hosts`, the container's /etc/hosts (the names of
its loopback), and `run/`, which the container never sees: the
spec's environment (`sandbox.env.json`), the launchers with their environment
files, and, once a warm-pool sandbox is handed to a session, its binding record
(`binding.json`): the labels that replace the container's, which are fixed when
it is made.

Every method here touches the file system and blocks: the driver calls them
through `asyncio.to_thread`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataplane_agent.sandboxes.base import POOL_LABEL, SESSION_LABEL, Sandbox, SandboxError
from dataplane_agent.sandboxes.files import write_accounts, write_private

_BINDING = "binding.json"
_SPEC_ENV = "sandbox.env.json"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The container's /etc/hosts: the names of its loopback, which Docker does not write for a
# container whose networking is disabled.
_HOSTS = "127.0.0.1\tlocalhost astrabox\n::1\tlocalhost ip6-localhost ip6-loopback\n"


@dataclass(frozen=True, slots=True)
class HostDirectory:
    """The host directory of one sandbox."""

    path: Path

    @property
    def workspace(self) -> Path:
        return self.path / "workspace"

    @property
    def home(self) -> Path:
        return self.path / "home"

    @property
    def run(self) -> Path:
        return self.path / "run"

    @property
    def hosts(self) -> Path:
        return self.path / "hosts"

    @property
    def passwd(self) -> Path:
        return self.path / "passwd"

    @property
    def group(self) -> Path:
        return self.path / "group"

    def prepare(self, uid: int, gid: int, env: Mapping[str, str]) -> None:
        """Make the directory of a new sandbox, with its /etc/hosts and `env` as its spec's
        environment: the mounted directories the sandbox user's and private to it, `run/` the agent's."""
        for part in (self.workspace, self.home, self.run):
            part.mkdir(parents=True, exist_ok=True)
        self.run.chmod(0o700)
        for part in (self.workspace, self.home):
            if os.geteuid() == 0:
                os.chown(part, uid, gid)
            part.chmod(0o700)
        write_private(self.hosts, _HOSTS, 0o644)
        write_accounts(self.path, uid, gid, "/home/agent", shell="/bin/bash")  # as the image's own passwd has it
        self.write_env(env)

    def write_env(self, env: Mapping[str, str]) -> None:
        """Keep the spec's environment, which every launcher passes in."""
        write_private(self.run / _SPEC_ENV, json.dumps(dict(env)))

    def read_env(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in _read_json(self.run / _SPEC_ENV).items()}

    def bind(self, labels: Mapping[str, str], env: Mapping[str, str]) -> None:
        """Record `labels` as the sandbox's, over those its container was made with, and `env` as
        its spec's environment. SandboxError if it was bound before: it went to a session already.
        OSError if the directory is gone."""
        if (bound := self.binding()) is not None:
            raise SandboxError(f"sandbox {self.path.name} went to session {bound.get(SESSION_LABEL)!r} already")
        self.write_env(env)
        write_private(self.run / _BINDING, json.dumps({"labels": dict(labels)}))

    def unbind(self) -> None:
        """Forget the binding record: the sandbox is no session's after all."""
        with contextlib.suppress(FileNotFoundError):
            (self.run / _BINDING).unlink()

    def binding(self) -> dict[str, str] | None:
        """The labels of the binding record; None if the sandbox was never handed to a session."""
        bound = _read_json(self.run / _BINDING).get("labels")
        return {str(k): str(v) for k, v in bound.items()} if isinstance(bound, dict) else None

    def labels_over(self, labels: Mapping[str, str]) -> dict[str, str]:
        """A container's `labels` as the binding record overrides them (a bound sandbox is no pool's)."""
        bound = self.binding()
        if bound is None:
            return dict(labels)
        return {**{k: v for k, v in labels.items() if k != POOL_LABEL}, **bound}

    def refusal(self, sandbox: Sandbox) -> str:
        """Why this directory, whose container is gone, is not `sandbox`'s to remove (empty: it is).
        A pool sandbox's directory after a rebind belongs to the session it went to."""
        bound = self.binding()
        if bound is not None:
            owner = bound.get(SESSION_LABEL)
            return "" if owner == sandbox.session_id else f"{self.path} went to session {owner!r}"
        return (
            "" if self.path.name == sandbox.sandbox_id else f"{self.path} is not the directory of {sandbox.sandbox_id}"
        )

    def launcher_env(self, stem: str) -> Path:
        """Where the launcher `stem` finds the environment it passes to `docker exec`."""
        return self.run / f"{stem}.env"

    def write_launcher(self, stem: str, env: Mapping[str, str], command: Sequence[str], purpose: str) -> Path:
        """Write the launcher `stem`: a script, executable by the agent alone, that runs `command`
        with its own arguments appended; and the environment file `command` reads `env` from.
        SandboxError if `env` cannot be written as such a file (one NAME=value a line)."""
        for name, value in env.items():
            if not _ENV_NAME.match(name) or "\n" in value or "\0" in value or "\r" in value:
                raise SandboxError(f"environment variable {name!r} cannot be passed into a container")
        write_private(self.launcher_env(stem), "".join(f"{k}={v}\n" for k, v in env.items()))
        script = f'#!/bin/sh\n# {purpose}\nexec {shlex.join(command)} "$@"\n'
        return write_private(self.run / f"{stem}.launcher", script, 0o700)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
