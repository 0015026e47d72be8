"""What the agents' hosts hold after a round: sandboxes, the processes running in them, and how
many engine CLIs each one runs. Read from the host itself, not from what the agents report.

local   `<agent state>/sandboxes/local-<session>/` directories; their processes are the
        bubblewrap launchers whose working directory is the sandbox's `run/` (also once the
        directory is removed: " (deleted)"), whatever is in the sandbox's cgroups, and
        everything below them; an orphan is one no running agent process is an ancestor of
docker  the round's installation's containers (their session read over their binding), and
        `docker top` of each running one
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import aiodocker

from chaos.cluster import Cluster
from dataplane_agent.sandboxes.base import INSTALLATION_LABEL, SESSION_LABEL
from dataplane_agent.sandboxes.disk import release_mounts
from dataplane_agent.sandboxes.docker_container import listed


@dataclass
class HostSandbox:
    """One sandbox found on a host: its session, whether its files exist, what runs in it."""

    agent_id: str
    sandbox_id: str
    session_id: str
    exists: bool
    processes: list[str] = field(default_factory=list)  # "pid cmdline", for the report
    engines: int = 0
    # Processes of the sandbox that no running agent started (a killed agent's engine, say).
    orphans: list[str] = field(default_factory=list)


def _is_engine(command: str) -> bool:
    """The Claude Code CLI (the SDK's bundled `claude` binary, however it was started)."""
    return any(Path(word).name == "claude" for word in command.split()[:2])


async def survey(cluster: Cluster) -> list[HostSandbox]:
    if cluster.driver == "docker":
        return await _containers(cluster)
    return await asyncio.to_thread(_local, cluster)


def _local(cluster: Cluster) -> list[HostSandbox]:
    found: dict[tuple[str, str], HostSandbox] = {}
    roots: dict[str, Path] = {}
    tags: dict[str, str] = {}
    for index, agent_id in enumerate(cluster.agent_ids):
        root = (cluster.agent_state(index) / "sandboxes").resolve()
        roots[agent_id] = root
        tags[hashlib.sha256(str(root).encode()).hexdigest()[:10]] = agent_id  # as SandboxCgroups names them
        for directory in sorted(root.glob("local-*")) if root.is_dir() else ():
            sandbox_id = directory.name
            found[agent_id, sandbox_id] = HostSandbox(agent_id, sandbox_id, sandbox_id.removeprefix("local-"), True)
    table = _process_table()
    children = defaultdict(list)
    for pid, (ppid, _) in table.items():
        children[ppid].append(pid)
    members: dict[tuple[str, str], set[int]] = defaultdict(set)
    for pid in table:
        if where := _sandbox_of(pid, roots, tags):
            members[where].update(_descendants(pid, children))
    agents = {member.process.proc.pid for member in cluster.dataplanes if member.running and member.process}
    for (agent_id, sandbox_id), pids in members.items():
        sandbox = found.setdefault(
            (agent_id, sandbox_id), HostSandbox(agent_id, sandbox_id, sandbox_id.removeprefix("local-"), False)
        )
        for pid in sorted(pids):
            command = table.get(pid, (0, ""))[1]
            sandbox.processes.append(f"{pid} {command[:100]}")
            sandbox.engines += _is_engine(command)
            if not _descends_from(pid, agents, table):
                sandbox.orphans.append(f"{pid} {command[:100]}")
    return list(found.values())


def _sandbox_of(pid: int, roots: dict[str, Path], tags: dict[str, str]) -> tuple[str, str] | None:
    """(agent, sandbox) a process belongs to: a launcher's working directory is the sandbox's
    `run/`; everything inside is in the sandbox's cgroups (where the host has them)."""
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None
    for agent_id, root in roots.items():
        if match := re.fullmatch(re.escape(str(root)) + r"/(?P<id>[^/]+)/run(?: \(deleted\))?", cwd):
            return agent_id, match["id"]
    try:
        cgroups = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    if match := _CGROUP.search(cgroups):
        agent_id = tags.get(match["tag"])
        if agent_id is not None:
            return agent_id, match["id"]
    return None


_CGROUP = re.compile(r"/astrabox/(?P<tag>[0-9a-f]{10})-(?P<id>local-[0-9a-f-]{36})$", re.MULTILINE)


def _descends_from(pid: int, ancestors: set[int], table: dict[int, tuple[int, str]]) -> bool:
    seen = 0
    while pid > 1 and seen < 64:
        if pid in ancestors:
            return True
        pid, seen = table.get(pid, (0, ""))[0], seen + 1
    return False


def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process on the host."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if fields[0] in ("Z", "X"):
            continue
        table[int(entry.name)] = (int(fields[1]), command)
    return table


def descendants_of(pid: int) -> dict[int, str]:
    """The command lines of every process below `pid` on the host, by pid."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    return {child: table[child][1] for child in _descendants(pid, children) if child != pid}


def still_running(processes: dict[int, str]) -> list[str]:
    """Which of `processes` still run (the same pid with the same command line, not a zombie)."""
    table = _process_table()
    return [f"{pid} {line[:100]}" for pid, line in processes.items() if table.get(pid, (0, None))[1] == line]


def _descendants(pid: int, children: dict[int, list[int]]) -> list[int]:
    result, stack = [], [pid]
    while stack:
        current = stack.pop()
        result.append(current)
        stack.extend(children.get(current, ()))
    return result


async def _containers(cluster: Cluster) -> list[HostSandbox]:
    filters = json.dumps({"label": [f"{INSTALLATION_LABEL}={cluster.installation}"]})
    async with asyncio.timeout(60), aiodocker.Docker() as docker:
        items = await docker.containers.list(all="1", filters=filters)
    found = []
    for item in items:
        container = listed(item._container)
        labels = await asyncio.to_thread(container.labels_now)
        sandbox = HostSandbox(labels.get("astrabox.agent_id", ""), container.name, labels.get(SESSION_LABEL, ""), True)
        if container.running:
            top = await asyncio.to_thread(
                subprocess.run,
                ["docker", "top", container.id, "-eo", "pid,args"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            for line in top.stdout.splitlines()[1:]:
                pid, _, command = line.strip().partition(" ")
                sandbox.processes.append(f"{pid} {command.strip()[:100]}")
                sandbox.engines += _is_engine(command.strip())
        found.append(sandbox)
    return found


async def sweep(cluster: Cluster) -> None:
    """After the round (agents stopped): SIGKILL whatever still runs in its sandboxes and unmount
    their workspace images, so that removing the work dir takes no mount or process with it."""
    if cluster.driver == "local":
        for sandbox in await asyncio.to_thread(_local, cluster):
            for process in sandbox.processes:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(process.split(" ", 1)[0]), signal.SIGKILL)
    await asyncio.to_thread(release_mounts, cluster.work)
