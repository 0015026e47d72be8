"""Isolation tiers: which OCI runtime the docker driver's containers run under (`--sandbox-runtime`).

- runc (the default): the container shares the host's kernel, fenced by namespaces, cgroups,
  dropped capabilities and no-new-privileges.
- runsc (gVisor): every system call of the sandbox is served by gVisor's own kernel (the Sentry),
  itself a confined host process; a kernel bug reachable from the sandbox is one in gVisor, not
  in the host's. Debian's `runsc` package, registered with dockerd as the runtime `runsc` with
  `--platform=ptrace` (no KVM needed), `--network=none` (sandboxes have no network: a loopback
  alone, as under runc) and `--host-uds=open` (the model and egress relays connect to the agent's
  unix sockets bind-mounted into the sandbox; creating host sockets stays refused).
  `scripts/test`'s `ensure_runsc` installs and registers it.

The agent's Hello says how its sandboxes are isolated (`offered`): the control plane places a
session whose environment has `isolation: gvisor` only on a "gvisor" agent (`controlplane.agents`).

Under runsc (Debian 12's 0.0~20221219), known differences from runc:
- coreutils' `ls` and `stat` fail with EINVAL: that gVisor rejects the AT_NO_AUTOMOUNT flag coreutils 9
  passes to statx (fixed in later gVisor releases); other tools (find, cp, git, python3, node) work.
- the pids limit is the host's, and counts the Sentry's threads and the ptrace platform's stub
  processes (about one per program), not the sandbox's own tasks: at 64 a sandbox exits at once here,
  and at 128 a few relays and shells made gVisor fail whole (its programs end, "WaitPID ... EOF");
  512 (the default) runs the tests. How it bounds a fork bomb inside was not measured.
- the memory limit bounds the whole sandbox, gVisor's own kernel and page cache included (about
  100 MB here): over it, the host kills the Sentry, so every program of the sandbox ends at once (under
  runc the kernel kills the largest process only). At 256 MB sandboxes were killed so here; 512 runs.
- a `docker exec` is not told that its process ended when the container stops: the driver kills
  every program (but init and its sleep) from inside before a stop (`DockerSandboxDriver.stop`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dataplane_agent.sandboxes.base import SandboxError

RUNC = "runc"
RUNSC = "runsc"
RUNTIMES = (RUNC, RUNSC)
# The runtime arguments dockerd is given for runsc (scripts/test writes them to daemon.json).
RUNSC_ARGS = ("--platform=ptrace", "--network=none", "--host-uds=open")


def offered(driver: str, runtime: str) -> str:
    """How an agent with this driver and runtime isolates its sandboxes, as its Hello says
    (Hello.isolation): environments with `isolation: gvisor` are placed only on "gvisor" agents."""
    if driver == "local":
        return "bubblewrap"
    return "gvisor" if runtime == RUNSC else "container"


def isolation_refusal(wanted: str, offers: str) -> str:
    """Why a session whose environment asks for isolation `wanted` (empty: any) may not start on an
    agent whose sandboxes have `offers`; empty when it may."""
    if not wanted or wanted == offers:
        return ""
    return (
        f"the session's environment asks for isolation {wanted!r} and this agent's sandboxes have {offers!r};"
        " it runs only on an agent started with --driver docker --sandbox-runtime runsc"
    )


def check_runtime(driver: str, runtime: str) -> str:
    """Why the agent cannot start with this driver and runtime; empty when it can."""
    if runtime not in RUNTIMES:
        return f"unknown sandbox runtime {runtime!r} (one of {', '.join(RUNTIMES)})"
    if runtime != RUNC and driver != "docker":
        return f"--sandbox-runtime {runtime} needs the docker driver (--driver docker); the {driver} driver has none"
    return ""


def check_registered(runtime: str, info: Mapping[str, Any]) -> None:
    """SandboxError, saying how to register it, when the Docker Engine whose `docker info` is `info`
    does not know `runtime`."""
    known: Sequence[str] = sorted((info.get("Runtimes") or {}).keys())
    if runtime in known:
        return
    if runtime == RUNSC:
        raise SandboxError(
            f"the Docker daemon has no runtime {RUNSC!r} (it has: {', '.join(known) or 'none'}): install gVisor"
            f" (apt-get install runsc) and register it in /etc/docker/daemon.json as"
            f' "runtimes": {{"runsc": {{"path": "/usr/bin/runsc", "runtimeArgs": {list(RUNSC_ARGS)}}}}},'
            " then reload dockerd (kill -HUP its pid), or run scripts/test's ensure_runsc"
        )
    raise SandboxError(f"the Docker daemon has no runtime {runtime!r} (it has: {', '.join(known) or 'none'})")
