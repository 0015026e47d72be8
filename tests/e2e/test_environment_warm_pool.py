"""The warm pool per environment, end to end (real processes, the local driver, the offline model):
with `--warm-pool-per-environment 1` the agent keeps a sandbox made from the layer of an environment
a session just used, the next session of that environment claims it (its startup phases say so) and
sees the layer, while a session of another environment is never given it."""

from __future__ import annotations

import asyncio

import pytest

from astrabox.client import AstraBoxClient
from astrabox.environments.v1 import environment_pb2 as epb
from tests.e2e.test_conversation_end_to_end import TIMEOUT, all_events, new_session
from tests.support.stack import Stack, StartStack

pytestmark = pytest.mark.e2e


def phases(events) -> list[str]:
    return [e.startup_phase.phase for e in events if e.WhichOneof("payload") == "startup_phase"]


async def pool_ready(stack: Stack, count: int) -> None:
    """Until the agent has logged `count` pool sandboxes made ready."""
    async with asyncio.timeout(TIMEOUT):
        while sum("pool_sandbox_ready" in line for line in stack.agent._lines) < count:
            await asyncio.sleep(0.05)


def layered(word: str) -> epb.EnvironmentSpec:
    """An environment whose layer holds one file saying `word` (built by its setup script)."""
    return epb.EnvironmentSpec(setup_script=f'echo {word} > "$ASTRABOX_LAYER/usr/word.txt"\n')


async def test_the_next_session_of_an_environment_claims_a_sandbox_made_from_its_layer(stacks: StartStack) -> None:
    stack = stacks(args=("--warm-pool-per-environment", "1"))
    async with AstraBoxClient.connect(stack.address) as client:
        await client.environments.apply("alpha", layered("alpha"))
        await client.environments.apply("beta", layered("beta"))

        # No session of it yet: nothing is kept for it.
        first = await new_session(client, environment="alpha")
        assert "sandbox_created" in phases(await all_events(client, first.session_id))
        await pool_ready(stack, 1)

        # Another environment's session is not given alpha's sandbox.
        other = await new_session(client, environment="beta")
        assert "sandbox_created" in phases(await all_events(client, other.session_id))
        beta_word = await client.run_command(other.session_id, "cat /opt/astrabox/env/usr/word.txt")
        assert beta_word.stdout == b"beta\n", beta_word

        # The next session of alpha claims the one made for it; its engine is its own (started now).
        second = await new_session(client, environment="alpha")
        started = phases(await all_events(client, second.session_id))
        assert "sandbox_claimed" in started and "engine_connected" in started, started
        assert "engine_adopted" not in started
        word = await client.run_command(second.session_id, "cat /opt/astrabox/env/usr/word.txt")
        assert word.stdout == b"alpha\n", word
        run = await client.run_command(second.session_id, "ls /workspace")
        assert run.exit_code == 0 and run.stdout == b"", run
