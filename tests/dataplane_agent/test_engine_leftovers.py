"""An engine whose agent died, busy with a tool, is gone once the next agent asked the driver to end
what was left (`end_leftovers`), on both drivers: the local driver's bubblewrap dies with its
parent; a `docker exec`'d engine runs on until it is ended from inside the container."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import subprocess

import pytest

from dataplane_agent.sandboxes.base import ENGINE_MARKER
from tests.dataplane_agent.test_hostile_archives import box  # noqa: F401 - fixture: a sandbox of each driver
from tests.support.processes import sandbox_processes

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="seeing a sandbox's processes from the host needs root")

# An engine busy with a tool: a marked program, and a child of its own that inherits the marker.
ENGINE = "sleep 600 & exec sleep 601"
TOOLS = {"sleep 600", "sleep 601"}


async def running(workspace, wanted: set[str]) -> set[str]:
    return {p for p in await asyncio.to_thread(sandbox_processes, workspace) if p in wanted}


async def test_an_engine_left_by_a_dead_agent_is_ended(box) -> None:
    driver, sandbox = box
    launcher = await driver.launcher(sandbox, ["/bin/sh", "-c", ENGINE], {ENGINE_MARKER: "e1"})
    # The "agent": the launcher's parent, SIGKILLed alone once the engine's tools run.
    agent = subprocess.Popen(
        ["/bin/sh", "-c", f"{shlex.quote(str(launcher))} </dev/null >/dev/null 2>&1 & wait"], start_new_session=True
    )
    try:
        async with asyncio.timeout(60):
            while await running(sandbox.workspace, TOOLS) != TOOLS:
                await asyncio.sleep(0.1)
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait(10)
        if driver.name == "docker":  # nothing ended it: the bug a second engine would meet
            await asyncio.sleep(1)
            assert await running(sandbox.workspace, TOOLS) == TOOLS

        ended = await driver.end_leftovers(sandbox)

        assert await running(sandbox.workspace, TOOLS) == set()
        if driver.name == "docker":
            assert ended >= len(TOOLS)
        assert await driver.end_leftovers(sandbox) == 0  # nothing left to end
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(agent.pid, signal.SIGKILL)  # what of it is left on the host
