"""Terminal latency on a real stack: how long a keystroke takes to come back, and a terminal to open.

    python bench/terminal.py [--rounds 200] [--opens 20]

Brings up, in a temp dir, an embedded PostgreSQL, the control plane and one data-plane agent
(separate processes, as deployed; the local bubblewrap driver), creates one session, then measures:

  echo      a key typed into an open terminal (`cat` on it) until its echo is back at the client:
            client -> control plane -> agent -> pseudo-terminal in the sandbox -> and back
  open      OpenTerminal with `true` until its exit code is back (a program's start in the sandbox)

Interleaved with them, as baselines in the same run:

  unary     GetSession: one call through the control plane (the floor of any call)
  command   RunCommand `true`: the same program run without a terminal
  host pty  a key written to a pseudo-terminal on this host (`cat` on it) until its echo is back

Prints p50/p90/max per figure and the ratios of the medians; asserts nothing (two shared cores).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    CONTROLPLANE_ADMISSION_ENV,
    Process,
    api_key_file,
    embedded_postgres,
    offline_agent,
    revision,
    summary_row,
)

from astrabox.client import AstraBoxClient

ECHO = "echo: key typed -> echo back (terminal)"
OPEN = "open: OpenTerminal `true` -> exit code"
UNARY = "baseline: GetSession (unary call)"
COMMAND = "baseline: RunCommand `true`"
HOST_PTY = "baseline: host pty key -> echo"


async def terminal_echoes(
    client: AstraBoxClient, session_id: str, rounds: int, figures: dict[str, list[float]]
) -> None:
    async with client.open_terminal(session_id, command="stty -icanon; exec cat") as terminal:
        output = aiter(terminal)
        await terminal.write(b"!")
        await _until(output, b"!")  # cat runs, the terminal is cooked no more
        for index in range(rounds):
            key = bytes([ord("a") + index % 26])
            started = time.perf_counter()
            await terminal.write(key)
            await _until(output, key)
            figures[ECHO].append((time.perf_counter() - started) * 1000)
            figures[HOST_PTY].append(host_pty_echo())
        await terminal.close()
        async for _rest in output:  # up to the end the cancelled call gives
            pass


async def _until(output, key: bytes) -> None:  # type: ignore[no-untyped-def]
    seen = b""
    while key not in seen:
        seen += await anext(output)


def host_pty_echo() -> float:
    controller, terminal = os.openpty()
    cat = subprocess.Popen(["cat"], stdin=terminal, stdout=terminal, stderr=subprocess.DEVNULL)
    os.close(terminal)
    try:
        started = time.perf_counter()
        os.write(controller, b"x")
        seen = b""
        while b"x" not in seen:
            select.select([controller], [], [], 5)
            seen += os.read(controller, 1024)
        return (time.perf_counter() - started) * 1000
    finally:
        cat.kill()
        cat.wait()
        os.close(controller)


async def opens_and_baselines(
    client: AstraBoxClient, session_id: str, opens: int, figures: dict[str, list[float]]
) -> None:
    for _ in range(opens):
        started = time.perf_counter()
        async with client.open_terminal(session_id, command="true") as terminal:
            async for _chunk in terminal:
                pass
        assert terminal.exit_code == 0
        figures[OPEN].append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        result = await client.run_command(session_id, "true")
        assert result.exit_code == 0
        figures[COMMAND].append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        await client.get_session(session_id)
        figures[UNARY].append((time.perf_counter() - started) * 1000)


def report(figures: dict[str, list[float]], args: argparse.Namespace) -> None:
    print(f"terminal latency, {revision()}, {args.rounds} keys, {args.opens} opens, {os.cpu_count()} cores")
    for name in (ECHO, HOST_PTY, UNARY, OPEN, COMMAND):
        print(summary_row(name, figures[name]))
    median = {name: statistics.median(values) for name, values in figures.items()}
    print(
        f"echo / unary call: {median[ECHO] / median[UNARY]:.2f}x; echo / host pty: {median[ECHO] / median[HOST_PTY]:.1f}x"
    )
    print(f"open / RunCommand: {median[OPEN] / median[COMMAND]:.2f}x")


async def bench(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="astrabox-bench-terminal-"))
    processes: list[Process] = []
    try:
        async with embedded_postgres(args.fast_postgres) as dsn:
            key_file, api_key = api_key_file(work)
            controlplane = Process(
                "controlplane",
                [sys.executable, "-m", "controlplane", "--listen", "127.0.0.1:0"],
                work / "controlplane.log",
                env={
                    "ASTRABOX_DATABASE_URL": dsn,
                    "ASTRABOX_BOOTSTRAP_KEY_FILE": str(key_file),
                    **CONTROLPLANE_ADMISSION_ENV,
                },
            )
            processes.append(controlplane)
            address = (await asyncio.to_thread(controlplane.wait_for_line, r"listening on (\S+)")).group(1)
            agent = offline_agent(address, work)
            processes.append(agent)
            await asyncio.to_thread(agent.wait_for_line, r"relay_connected")
            figures: dict[str, list[float]] = defaultdict(list)
            async with AstraBoxClient.connect(address, api_key=api_key) as client:
                session = await client.create_session()
                session_id = (await client.wait_for_state(session.session_id, ["READY"], timeout=120)).session_id
                warm_up: dict[str, list[float]] = defaultdict(list)
                await opens_and_baselines(client, session_id, 3, warm_up)
                await terminal_echoes(client, session_id, 20, warm_up)
                await opens_and_baselines(client, session_id, args.opens, figures)
                await terminal_echoes(client, session_id, args.rounds, figures)
            report(figures, args)
    finally:
        for process in reversed(processes):
            process.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=200, help="keys typed (default 200)")
    parser.add_argument("--opens", type=int, default=20, help="terminals opened (default 20)")
    parser.add_argument("--fast-postgres", action="store_true", help="fsync off (not durable; faster)")
    asyncio.run(bench(parser.parse_args()))


if __name__ == "__main__":
    main()
