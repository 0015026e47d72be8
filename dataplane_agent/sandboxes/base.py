"""The sandbox driver contract shared by every driver (local, docker)."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

# A sandbox given a model socket sees it at MODEL_SOCKET_INNER. The CLI needs a TCP base URL, so
# a relay inside the sandbox listens on its own loopback at MODEL_PORT and forwards to the socket.
MODEL_SOCKET_INNER = "/run/astrabox/model.sock"
MODEL_PORT = 41800
MODEL_BASE_URL_INNER = f"http://127.0.0.1:{MODEL_PORT}"
# A sandbox given the egress proxy's socket sees it at EGRESS_SOCKET_INNER, relayed the same way to
# EGRESS_PORT (the proxy URL a session with network access is given: routes/egress/proxy.py).
EGRESS_SOCKET_INNER = "/run/astrabox/egress.sock"
EGRESS_PORT = 41801
# The trust bundle (system roots and the agent's egress CA) beside the egress socket on the host, and
# where a sandbox sees it (routes/egress/interception.py).
EGRESS_CA_NAME = "egress-ca.pem"
EGRESS_CA_INNER = "/run/astrabox/egress-ca.pem"
_RELAY_SCRIPT = """\
command -v socat >/dev/null || { echo "astrabox: socat is not installed in the sandbox; the model route and the egress proxy need it" >&2; exit 127; }
relay() {
  socat TCP-LISTEN:$1,bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:$2 </dev/null >/dev/null 2>&1 &
  tries=0
  until grep -q "0100007F:$3 00000000:0000 0A" /proc/net/tcp; do
    tries=$((tries + 1))
    [ "$tries" -le 2000 ] || { echo "astrabox: the relay to $2 did not start" >&2; exit 127; }
    sleep 0.005
  done
}
"""


def model_relay(program: Sequence[str], *, model: bool = True, egress: bool = False) -> list[str]:
    """`program` preceded by the relays of the sockets the sandbox has (the model route's, the egress
    proxy's): the command line to run inside such a sandbox.

    The relays stay up for later programs of the same network namespace; starting one again where it
    already listens is harmless."""
    script = _RELAY_SCRIPT
    if model:
        script += f"relay {MODEL_PORT} {MODEL_SOCKET_INNER} {MODEL_PORT:04X}\n"
    if egress:
        script += f"relay {EGRESS_PORT} {EGRESS_SOCKET_INNER} {EGRESS_PORT:04X}\n"
    script += 'exec "$@"\n'
    return ["/bin/sh", "-c", script, "astrabox-model-relay", *program]


# The marker in the environment of every process one workspace command starts (see end_processes).
RUN_MARKER = "ASTRABOX_RUN"
# The marker in the environment of every engine process (its value: the engine's own id), which
# whatever its tools start inherits (see end_processes, end_leftovers).
ENGINE_MARKER = "ASTRABOX_ENGINE"
# Defines `end_marked VALUE [NAME]` in bash: end every process of the sandbox whose environment
# carries NAME=VALUE (NAME: ASTRABOX_RUN unless given; an empty VALUE: any NAME=…), adding the pids
# it ended to the array ENDED. Builtins only: under a fork bomb the sandbox has no pid to spare for a
# `grep`. Each round stops what it finds (a stopped process forks no more), then kills it, until a
# round finds nothing (status 0) or 100 rounds pass (status 1).
END_MARKED = r"""
ENDED=()
end_marked() {
  local name=${2:-ASTRABOX_RUN} round entry pid variable found
  local marker="$name=$1"
  for ((round = 0; round < 100; round++)); do
    found=()
    for entry in /proc/[0-9]*; do
      pid=${entry#/proc/}
      [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
      while IFS= read -r -d '' variable; do
        if [[ $variable == "$marker" || ( -z $1 && $variable == "$name="* ) ]]; then
          kill -STOP "$pid" 2>/dev/null && found+=("$pid"); break
        fi
      done 2>/dev/null < "$entry/environ"  # silenced first: an unreadable environ is not an error
    done
    ((${#found[@]})) || return 0
    kill -KILL "${found[@]}" 2>/dev/null
    ENDED+=("${found[@]}")
  done
  return 1
}
"""


# Labels every sandbox carries (the docker driver sets them on its containers).
SESSION_LABEL = "astrabox.session_id"
AGENT_LABEL = "astrabox.agent_id"
INSTALLATION_LABEL = "astrabox.installation"
# Set on a warm-pool sandbox: the key of the template it was made from.
POOL_LABEL = "astrabox.pool"
# Set on a sandbox (or container) building an environment's layer: the build digest.
LAYER_BUILD_LABEL = "astrabox.layer_build"


class SandboxError(Exception):
    """A sandbox could not be created, used or destroyed."""


class DestroyVerdict(enum.Enum):
    """What a destroy attempt established about that exact sandbox."""

    CONFIRMED = "confirmed"  # it is gone; it may be forgotten
    UNCONFIRMED = "unconfirmed"  # we could not tell; keep it and retry later
    REFUSED = "refused"  # it is not ours to destroy (another owner uses it)


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """An environment's resource limits of one sandbox, over the driver's own; 0: the driver's."""

    cpus: float = 0.0
    memory_mb: int = 0
    pids: int = 0
    # The workspace's disk, where the agent limits workspaces (an image of its own, or measured);
    # an agent that limits none (--sandbox-disk-mb 0) does not bound it either.
    disk_mb: int = 0


@dataclass(frozen=True, slots=True)
class SandboxSpec:
    """What a session asks of its sandbox."""

    session_id: str
    agent_id: str
    # Environment the sandboxed programs see; nothing else of the agent's leaks in.
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    # The agent's model route on the host (a unix socket alone in its directory), which the
    # sandbox sees at MODEL_SOCKET_INNER; None: the sandbox has no way to the model.
    model_socket: Path | None = None
    # The agent's egress proxy on the host (a unix socket alone in its directory), which the sandbox
    # sees at EGRESS_SOCKET_INNER; None: no way out at all, whatever the session's policy.
    egress_socket: Path | None = None
    # The session's environment (dataplane_agent.environments): its layer, a directory the local
    # driver mounts read-only at /opt/astrabox/env (None: none), or the image below; and its variables, which every
    # program sees under AstraBox's own (`env` and the launcher's win).
    layer: Path | None = None
    # The docker driver's image for it (a derived image with the layer at /opt/astrabox/env); "":
    # the driver's own.
    image: str = ""
    variables: Mapping[str, str] = field(default_factory=dict)
    # Its limits, where the driver can hold them (local: a cgroup's; docker: the container's).
    limits: SandboxLimits = SandboxLimits()


@dataclass(frozen=True, slots=True)
class Sandbox:
    """A created sandbox, as the agent remembers it."""

    sandbox_id: str
    driver: str
    session_id: str
    # The writable workspace as the agent sees it on the host.
    workspace: Path
    # Where the workspace appears inside the sandbox.
    inner_workspace: str
    # A private home directory for the sandboxed programs (host path).
    home: Path


class SandboxDriver(Protocol):
    """Creates, enters, stops and destroys sandboxes."""

    name: str
    # A terminal launcher (`launcher(..., terminal=True)`) relays the agent's pseudo-terminal to one
    # of the sandbox's own (`docker exec -t`): the agent's then carries bytes only, in raw mode.
    relays_terminal: bool

    async def probe(self) -> None:
        """Raise SandboxError with an actionable message if the driver cannot run here."""

    async def create(self, spec: SandboxSpec) -> Sandbox:
        """Create (or re-open, if it already exists) the session's sandbox."""

    async def launcher(
        self, sandbox: Sandbox, program: Sequence[str], env: Mapping[str, str], *, terminal: bool = False
    ) -> Path:
        """Write an executable on the host that runs `program` (plus its own
        arguments) inside the sandbox with exactly `env` as its environment, with
        stdin/stdout/stderr connected. The SDK spawns it as the CLI.

        `terminal`: stdin, stdout and stderr will be the agent's pseudo-terminal (`workspace.terminal`),
        which the program inside gets as its controlling terminal, or as one of its own that the
        driver relays; either way a size the agent sets on it, followed by SIGWINCH to the
        launcher's process group, reaches the program. Such a launcher is kept apart from the
        plain one of the same program."""

    async def end_processes(self, sandbox: Sandbox, marker: str, variable: str = RUN_MARKER) -> None:
        """End every process of the sandbox that was started with `variable`=`marker` in its
        environment (one workspace command, or one engine with ENGINE_MARKER, and whatever it left
        behind; an empty `marker`: every one's), where the launcher's own end does not already end
        them. Never raises for a sandbox that is gone."""

    async def end_leftovers(self, sandbox: Sandbox) -> int:
        """End whatever an earlier agent process left running in the sandbox — its engines (with
        whatever their tools started) and its workspace commands — and wait until they are gone;
        how many processes were ended. Call before this process starts anything in the sandbox: a
        second engine beside a left one would write the same conversation. Never raises for a
        sandbox that is gone or stopped."""

    async def stop(self, sandbox: Sandbox) -> None:
        """Stop everything running in the sandbox and keep its files (workspace, home, tmp as the
        driver keeps them); `create(spec)` for the same session afterwards re-opens it and starts
        it again. A stopped sandbox is still listed (by `list_sandboxes` or the reconciler's
        inventory). Stopping a stopped or missing sandbox is not an error (missing: nothing to
        stop). SandboxError when it cannot be stopped."""

    async def destroy(self, sandbox: Sandbox) -> DestroyVerdict:
        """Destroy the sandbox and its workspace; report what is known."""


@dataclass(frozen=True, slots=True)
class ListedSandbox:
    """A sandbox that exists, as a driver lists it."""

    # Usable with the driver's launcher and destroy.
    sandbox: Sandbox
    labels: Mapping[str, str]
    # Wall-clock seconds.
    created_at: float
    running: bool


class ListingDriver(SandboxDriver, Protocol):
    """A driver that can list what exists, for reconciliation."""

    async def list_sandboxes(self, labels: Mapping[str, str] | None = None) -> list[ListedSandbox]:
        """Every sandbox of this installation whose labels include all of `labels`."""
