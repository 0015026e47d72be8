"""SIGKILL the agent while a workspace command runs in a sandbox: nothing the command started
outlives the crash. The local driver's sandbox dies with its launcher; in a container nothing
would end it, so the restarted agent ends what commands of its predecessor left running before it
serves anything."""

from __future__ import annotations

import asyncio
import contextlib
import os

import pytest

from astrabox.client import AstraBoxClient
from tests.dataplane_agent.test_command_ends import marked_processes
from tests.support.stack import Stack, StartDockerStack

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="seeing every sandbox process's environment on the host needs root"),
]


async def crash_mid_command(stack: Stack) -> None:
    async with AstraBoxClient.connect(stack.address) as client:
        session = await client.create_session(request_id="crash-mid-command")
        sid = session.session_id
        await client.wait_for_state(sid, ["READY"], timeout=120)
        running = asyncio.create_task(client.run_command(sid, "sleep 600 & sleep 601; true", timeout=900))
        async with asyncio.timeout(60):
            while len(marked_processes()) < 3:  # its shell and both sleeps
                await asyncio.sleep(0.1)
        stack.agent.kill()
        running.cancel()  # the caller gives up on it (its agent is gone)
        with contextlib.suppress(BaseException):
            await running
        stack.start_agent()
        async with asyncio.timeout(120):
            while True:
                try:
                    await client.run_command(sid, "true")  # the agent serves again
                    break
                except Exception:
                    await asyncio.sleep(0.5)
            while marked_processes():  # the probe's own processes are ending
                await asyncio.sleep(0.1)
        assert marked_processes() == []


async def test_a_command_ends_with_a_killed_agent_on_the_local_driver(stack: Stack) -> None:
    await crash_mid_command(stack)


async def test_a_command_ends_with_a_killed_agent_on_the_docker_driver(docker_stacks: StartDockerStack) -> None:
    await crash_mid_command(docker_stacks())
