"""An environment's workspace disk limit (`limits.disk_bytes`) replaces the agent's
(`--sandbox-disk-mb`) for its sessions, however the agent enforces it: with a workspace image of its
own (a write past it fails with ENOSPC inside the sandbox) or by measurement (the turn is ended and
the runtime stopped, saying which limit); a session without an environment keeps the agent's. A real
stack on the local driver with the real CLI."""

from __future__ import annotations

import pytest

from astrabox.client import AstraBoxClient
from astrabox.environments.v1 import environment_pb2 as epb
from dataplane_agent.sandboxes.disk import IMAGE, WorkspaceDisk
from tests.e2e.test_session_end_to_end import collect_turn
from tests.support.stack import StartStack

pytestmark = pytest.mark.e2e

MIB = 1024 * 1024
AGENT_MB = 64
ENVIRONMENT_MB = 8
TIGHT = epb.EnvironmentSpec(limits=epb.ResourceLimits(disk_bytes=ENVIRONMENT_MB * MIB))


async def test_an_environments_disk_limit_is_its_workspace_images_size(stacks: StartStack) -> None:
    if why := WorkspaceDisk(AGENT_MB).unavailable():
        pytest.skip(f"workspace images cannot be mounted here: {why}")
    stack = stacks(args=("--sandbox-disk-by", "image", "--sandbox-disk-mb", str(AGENT_MB)))
    async with AstraBoxClient.connect(stack.address) as client:
        await client.environments.apply("tight", TIGHT)
        session = await client.create_session(environment="tight")
        await client.wait_for_state(session.session_id, ["READY"], timeout=120)
        filling = await client.send_message(
            session.session_id, "run: head -c 16M /dev/zero > big; echo exit=$?", client_message_id="m1"
        )
        events = await collect_turn(client, session.session_id, filling.turn_id)
        assert events[-1].WhichOneof("payload") == "turn_completed", events[-1]
        assert "No space left on device" in events[-1].turn_completed.result
        workspace = stack.host_workspace(events)
        assert (workspace.parent / IMAGE).stat().st_size == ENVIRONMENT_MB * MIB

        plain = await client.create_session()
        await client.wait_for_state(plain.session_id, ["READY"], timeout=120)
        fits = await client.send_message(
            plain.session_id, "run: head -c 16M /dev/zero > big && echo fits", client_message_id="m1"
        )
        events = await collect_turn(client, plain.session_id, fits.turn_id)
        assert events[-1].WhichOneof("payload") == "turn_completed" and "fits" in events[-1].turn_completed.result
        assert (stack.host_workspace(events).parent / IMAGE).stat().st_size == AGENT_MB * MIB


async def test_an_environments_disk_limit_is_the_measured_one_for_its_sessions(stacks: StartStack) -> None:
    stack = stacks(
        args=(
            "--sandbox-disk-by",
            "measurement",
            "--sandbox-disk-mb",
            str(AGENT_MB),
            "--sandbox-disk-check-seconds",
            "0.5",
        )
    )
    async with AstraBoxClient.connect(stack.address) as client:
        await client.environments.apply("tight", TIGHT)
        session = await client.create_session(environment="tight")
        await client.wait_for_state(session.session_id, ["READY"], timeout=120)
        filling = await client.send_message(
            session.session_id, "run: head -c 16M /dev/zero > big && echo written && sleep 60", client_message_id="m1"
        )
        events = await collect_turn(client, session.session_id, filling.turn_id)
        assert events[-1].WhichOneof("payload") == "turn_failed", events[-1]
        assert f"over its disk limit of {ENVIRONMENT_MB} MiB" in events[-1].turn_failed.reason
