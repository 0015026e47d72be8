"""The all-in-one stack behind `astrabox up` and `astrabox demo`.

One process runs an embedded PostgreSQL (unless a database URL is given), the
control plane, and one data-plane agent with the local sandbox driver. The
agent serves the built-in offline model when no ANTHROPIC_API_KEY is set.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from controlplane import logs
from controlplane.embedded_postgres import EmbeddedPostgres
from controlplane.server import serve
from controlplane.settings import ControlPlaneSettings

AGENT_READY_TIMEOUT = 60.0


@contextlib.asynccontextmanager
async def stack(data_dir: Path, listen: str, database_url: str = "") -> AsyncIterator[str]:
    """Run the whole stack until the context exits; yields the gRPC address."""
    from dataplane_agent.main import run_agent
    from dataplane_agent.settings import AgentSettings

    data_dir.mkdir(parents=True, exist_ok=True)
    postgres = None
    if not database_url:
        postgres = EmbeddedPostgres(data_dir / "postgres")
        database_url = await postgres.start()
    try:
        async with serve(ControlPlaneSettings(database_url=database_url, listen=listen)) as controlplane:
            agent_settings = AgentSettings.from_args(
                ["--controlplane", controlplane.address, "--state-dir", str(data_dir / "agent"), "--agent-id", "local"]
            )
            stop = asyncio.Event()
            agent = asyncio.create_task(run_agent(agent_settings, stop=stop), name="agent")
            try:
                await _wait_for_agent(controlplane.pool, agent)
                yield controlplane.address
            finally:
                stop.set()
                await asyncio.wait_for(agent, 30)
    finally:
        if postgres is not None:
            await postgres.stop()


async def _wait_for_agent(pool, agent: asyncio.Task) -> None:
    async with asyncio.timeout(AGENT_READY_TIMEOUT):
        while not await pool.fetchval("SELECT count(*) FROM agents WHERE lease_expires_at > now()"):
            if agent.done():
                agent.result()  # raises the agent's start-up error
                raise RuntimeError("the local agent stopped during start-up")
            await asyncio.sleep(0.05)


async def run_up(args: argparse.Namespace) -> int:
    logs.configure()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with stack(Path(args.data_dir), args.listen, args.database_url) as address:
        print(f"AstraBox is up on {address}\n"
              f"  try:  astrabox run --target {address} \"Create hello.txt\"\n"
              f"        grpcurl -plaintext {address} list\n"
              "  Ctrl-C stops it.", flush=True)
        await stop.wait()
    return 0


async def run_demo(args: argparse.Namespace, prompt: str) -> int:
    from astrabox.cli import run_prompt
    from astrabox.sessionkernel.v1 import session_pb2

    logs.configure(level="warning")
    with tempfile.TemporaryDirectory(prefix="astrabox-demo-") as scratch:
        os.chmod(scratch, 0o711)  # the embedded PostgreSQL runs as `postgres` when we are root
        async with stack(Path(scratch), "127.0.0.1:0") as address:
            print(f"AstraBox is up on {address} (embedded PostgreSQL, local bubblewrap sandbox, "
                  "offline model unless ANTHROPIC_API_KEY is set)\n", flush=True)
            status, session = await run_prompt(address, prompt, timeout=args.timeout)
            written = sorted((Path(scratch) / "agent").rglob("workspace/*"))
            print("\nworkspace after the turn:")
            for path in written:
                content = path.read_text(errors="replace") if path.is_file() and path.stat().st_size < 4096 else ""
                print(f"  {path.name}: {content.strip()}")
            state = session_pb2.SessionState.Name(session.state).removeprefix("SESSION_STATE_")
            print(f"\nsession {session.session_id} is {state}")
    return status
