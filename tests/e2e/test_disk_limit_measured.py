"""A measured workspace disk limit (`--sandbox-disk-by measurement`, what an agent gets where no
workspace image can be mounted), on both drivers with the real CLI: a turn that writes past the
limit is ended with the reason and its runtime stopped with it (RUNTIME_STOPPED), files kept; the
next message starts the runtime again, so the user can delete files, and the session goes on."""

from __future__ import annotations

import asyncio

import pytest

from astrabox.client import AstraBoxClient
from tests.e2e.test_session_end_to_end import collect_turn
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

LIMIT_MB = 8
MEASURED = (
    "--sandbox-disk-by",
    "measurement",
    "--sandbox-disk-mb",
    str(LIMIT_MB),
    "--sandbox-disk-check-seconds",
    "0.5",
)


@pytest.fixture(params=["local", "docker"])
def measured_stack(request: pytest.FixtureRequest) -> Stack:
    start = request.getfixturevalue("docker_stacks" if request.param == "docker" else "stacks")
    return start(args=MEASURED)


async def test_a_turn_writing_past_a_measured_limit_is_stopped_and_the_session_goes_on(measured_stack: Stack) -> None:
    async with AstraBoxClient.connect(measured_stack.address) as client:
        session = await client.create_session(request_id="disk-measured")
        sid = session.session_id
        await client.wait_for_state(sid, ["READY"], timeout=120)

        filling = await client.send_message(
            sid, "run: head -c 24M /dev/zero > big && echo written && sleep 60", client_message_id="m1"
        )
        events = await collect_turn(client, sid, filling.turn_id)
        failed = events[-1]
        assert failed.WhichOneof("payload") == "turn_failed", failed
        assert f"over its disk limit of {LIMIT_MB} MiB" in failed.turn_failed.reason
        async with asyncio.timeout(60):
            async for event in client.watch(sid, after_seq=failed.seq):
                if event.WhichOneof("payload") == "runtime_stopped":
                    assert "over its disk limit" in event.runtime_stopped.reason
                    break
        workspace = measured_stack.host_workspace(events)
        assert (workspace / "big").stat().st_size == 24 * 1024 * 1024  # kept: the user decides what goes

        cleaned = await client.send_message(sid, "run: rm big && echo removed", client_message_id="m2")
        events = await collect_turn(client, sid, cleaned.turn_id)
        assert events[-1].WhichOneof("payload") == "turn_completed", events[-1]
        assert not (workspace / "big").exists()

        # Under the limit again: the next turns run to their end.
        again = await client.send_message(
            sid, "run: head -c 1M /dev/zero > small && sleep 2 && echo fine", client_message_id="m3"
        )
        events = await collect_turn(client, sid, again.turn_id)
        assert events[-1].WhichOneof("payload") == "turn_completed", events[-1]
        assert "fine" in events[-1].turn_completed.result
