"""Terminals on the agent against real sandboxes of every driver (bubblewrap, docker under runc
and under gVisor): an interactive shell on a real pseudo-terminal, its size, Ctrl-C, job control
and exit code; a cancelled terminal ends what it started; unread input and idleness are bounded."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import grpc
import pytest

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.sandboxes.base import Sandbox, SandboxDriver
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from dataplane_agent.workspace import terminal as terminals
from dataplane_agent.workspace.service import WorkspaceService
from tests.dataplane_agent.test_hostile_archives import box, sandbox_of  # noqa: F401 - fixture: a sandbox of each driver
from tests.dataplane_agent.test_workspace import error_reason

WAIT_S = 60


class Terminal:
    """Plays the control plane for one terminal: sends its input, gathers its replies."""

    def __init__(self, service: WorkspaceService, rid: str = "t1") -> None:
        self.service, self.rid = service, rid
        self.replies: list[pb.WorkspaceReply] = []
        self.output = b""
        self.changed = asyncio.Condition()

    async def _reply(self, reply: pb.WorkspaceReply) -> None:
        async with self.changed:
            self.replies.append(reply)
            self.output += reply.stdout
            self.changed.notify_all()

    def open(self, command: str = "", rows: int = 24, columns: int = 80) -> None:
        opening = pb.OpenTerminal(command=command, term="xterm-256color", rows=rows, columns=columns)
        self._submit(pb.WorkspaceRequest(open_terminal=opening))

    def type(self, data: bytes) -> None:
        self._submit(pb.WorkspaceRequest(terminal_input=pb.TerminalInput(data=data)))

    def resize(self, rows: int, columns: int) -> None:
        self._submit(pb.WorkspaceRequest(terminal_input=pb.TerminalInput(rows=rows, columns=columns)))

    def cancel(self) -> None:
        self._submit(pb.WorkspaceRequest(cancel=pb.CancelWorkspaceRequest()))

    def _submit(self, request: pb.WorkspaceRequest) -> None:
        request.request_id, request.session_id = self.rid, "s1"
        self.service.submit(request, self._reply)

    async def expect(self, pattern: str, since: int = 0) -> re.Match[bytes]:
        """The first match of `pattern` in the output after byte `since`, waiting for it."""
        regex = re.compile(pattern.encode())
        try:
            async with asyncio.timeout(WAIT_S), self.changed:
                while (found := regex.search(self.output, since)) is None:
                    assert not self.ended, f"ended without {pattern!r}: {self.output[-2000:]!r}"
                    await self.changed.wait()
        except TimeoutError:
            raise AssertionError(f"no {pattern!r} in {WAIT_S} s: {self.output[since:][-2000:]!r}") from None
        return found

    @property
    def ended(self) -> bool:
        return bool(self.replies) and self.replies[-1].last

    async def end(self) -> pb.WorkspaceReply:
        async with asyncio.timeout(WAIT_S), self.changed:
            await self.changed.wait_for(lambda: self.ended)
        return self.replies[-1]


def service(driver: SandboxDriver, sandbox: Sandbox) -> WorkspaceService:
    async def lookup(session_id: str) -> Sandbox | None:
        return sandbox

    return WorkspaceService(lookup, driver)


async def test_an_interactive_shell_runs_on_a_terminal_of_its_own(box, request: pytest.FixtureRequest) -> None:
    if request.node.callspec.params.get("box") == "docker-runsc":
        # Known open problem: once in a clean-clone CI run on a loaded machine, under gVisor the keys
        # typed one by one after `read -p`'s prompt were never echoed nor read (it passed in every
        # run before). Until that is understood the gVisor case may fail without failing the suite.
        request.applymarker(pytest.mark.xfail(reason="gVisor: keys after read -p once lost (open problem)"))
    driver, sandbox = box
    terminal = Terminal(service(driver, sandbox))
    terminal.open(rows=24, columns=80)
    terminal.type(b"PS1='ready> '\n")
    await terminal.expect(r"ready> $")
    terminal.type(b"[ -t 0 ] && [ -t 1 ] && echo on-a-tty; stty size; echo term=$TERM; pwd\n")
    await terminal.expect(r"on-a-tty\r\n24 80\r\nterm=xterm-256color\r\n/workspace\r\n")

    # A relayed terminal (`docker exec -t`) passes a new size on through the Engine's API, beside the
    # keystrokes: asked until it shows.
    terminal.resize(40, 120)
    for _ in range(100):
        mark = len(terminal.output)
        terminal.type(b"stty size\n")
        if (await terminal.expect(r"[\r\n](\d+ \d+)\r\n", mark))[1] == b"40 120":
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the new size never reached the program")

    # Ctrl-C ends the foreground job, not the shell: the terminal's line discipline is the sandbox's.
    mark = len(terminal.output)
    # The job says it sleeps once it is the terminal's foreground (typed ahead, Ctrl-C would be a key
    # the shell reads; sent while the shell starts the job, a signal to the shell).
    terminal.type(b"sh -c 'echo sleeping; exec sleep 300'; echo not-interrupted\n")
    await terminal.expect(r"[\r\n]sleeping\r\n", mark)
    terminal.type(b"\x03")
    terminal.type(b"echo still-here-$((6*7))\n")
    await terminal.expect(r"still-here-42", mark)
    assert not re.search(rb"[\r\n]not-interrupted", terminal.output)

    # Line editing and a program that asks: the keys arrive one by one.
    mark = len(terminal.output)
    terminal.type(b"read -p 'name? ' name; echo \"hello, $name\"\n")
    await terminal.expect(r"name\? ", mark)
    for key in b"Adx\x7fa\r":  # a typo rubbed out with backspace
        terminal.type(bytes([key]))
    await terminal.expect(r"hello, Ada\r\n", mark)

    terminal.type(b"exit 7\n")
    last = await terminal.end()
    assert last.WhichOneof("body") == "exit_code" and last.exit_code == 7


async def test_a_cancelled_terminal_ends_everything_it_started(box) -> None:
    driver, sandbox = box
    workspace = service(driver, sandbox)
    terminal = Terminal(workspace)
    terminal.open(command="sleep 4242 & sleep 4343 & echo started; wait")
    await terminal.expect(r"started")
    assert await running(driver, sandbox, workspace, "sleep 4242")
    terminal.cancel()
    async with asyncio.timeout(WAIT_S):
        while await running(driver, sandbox, workspace, "sleep 4242") or await running(
            driver, sandbox, workspace, "sleep 4343"
        ):
            await asyncio.sleep(0.2)


async def running(driver: SandboxDriver, sandbox: Sandbox, workspace: WorkspaceService, pattern: str) -> bool:
    """Whether a process of the sandbox runs `pattern`: the host sees a bubblewrap sandbox's
    processes; a container's are listed from inside (gVisor's are not in the host's /proc)."""
    if isinstance(driver, LocalSandboxDriver):
        return any(pattern in _cmdline(pid) for pid in os.listdir("/proc") if pid.isdigit())
    probe = Terminal(workspace, rid=f"probe-{os.urandom(4).hex()}")
    script = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done; echo probe-done"
    probe.open(command=script)
    await probe.expect(r"probe-done")
    await probe.end()
    listed = probe.output.decode(errors="replace").splitlines()
    return any(line.strip() == pattern for line in listed)


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


async def test_input_the_program_leaves_unread_closes_the_terminal(sandbox_root: Path, bwrap: str) -> None:
    async with sandbox_of("local", sandbox_root, bwrap) as (driver, sandbox):
        terminal = Terminal(service(driver, sandbox))
        terminal.open(command="echo asleep; sleep 300")
        await terminal.expect(r"asleep")
        for _ in range(terminals.MAX_PENDING_INPUT // (64 * 1024) + 2):
            terminal.type(b"x" * 64 * 1024)
        last = await terminal.end()
    assert last.WhichOneof("body") == "error"
    assert error_reason(last) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "TERMINAL_INPUT_OVERFLOW")


async def test_an_idle_terminal_is_kept_alive_then_closed(
    sandbox_root: Path, bwrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(terminals, "KEEPALIVE_S", 0.1)
    monkeypatch.setattr(terminals, "IDLE_S", 0.5)
    async with sandbox_of("local", sandbox_root, bwrap) as (driver, sandbox):
        terminal = Terminal(service(driver, sandbox))
        terminal.open(command="sleep 300")
        last = await terminal.end()
    assert (last.WhichOneof("body"), last.exit_code) == ("exit_code", terminals.IDLE_EXIT_CODE)
    keepalives = [r for r in terminal.replies if r.WhichOneof("body") is None]
    assert keepalives, "no keepalive while the terminal was idle"
