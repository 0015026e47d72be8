"""A command copy sent again on a new stream while the first copy waits is applied, never lost.

The control plane sends every unacknowledged command again on each new stream, under the new
lease. Before, a copy waiting behind a slower command of its session (a sandbox still starting)
was refused as "stale lease" and that refusal acknowledged, while its resent copy was dropped as
"already in progress": the message was lost and its turn stuck RUNNING.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.sandboxes.base import Sandbox, SandboxSpec
from tests.dataplane_agent.fakes import (
    DirectorySandboxDriver,
    ScriptedEngine,
    deliver,
    result_turn,
    running_agent,
    start,
)


class GatedDriver(DirectorySandboxDriver):
    """Sandboxes start only once `gate` is set: a slow sandbox start."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.gate = asyncio.Event()

    async def create(self, spec: SandboxSpec) -> Sandbox:
        await self.gate.wait()
        return await super().create(spec)


def destroy(reason: str) -> dict[str, object]:
    return {"destroy_runtime": pb.DestroyRuntime(reason=reason)}


def command(seq: int, command_id: str, lease: int, session_id: str = "s-1", **body: object) -> pb.Command:
    return pb.Command(command_seq=seq, command_id=command_id, lease_generation=lease, session_id=session_id, **body)


async def _acks_for(acks: list[pb.CommandAck], count: int) -> None:
    async with asyncio.timeout(10):
        while len(acks) < count:
            await asyncio.sleep(0.01)


async def test_a_copy_resent_under_a_new_lease_while_the_first_waits_is_applied_once(tmp_path: Path) -> None:
    engine, driver = ScriptedEngine(result_turn()), GatedDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        acks: list[pb.CommandAck] = []
        agent.applier.submit(command(1, "c-start", 1, **start()), acks.append)
        agent.applier.submit(command(2, "c-input", 1, **deliver("t-1", text="only once")), acks.append)
        await asyncio.sleep(0.1)  # the input waits behind the sandbox start
        await agent.state.raise_lease_generation(2)  # the stream was replaced; the new one resends both
        agent.applier.submit(command(1, "c-start", 2, **start()), acks.append)
        agent.applier.submit(command(2, "c-input", 2, **deliver("t-1", text="only once")), acks.append)
        driver.gate.set()
        await _acks_for(acks, 2)
        await agent.wait_for("s-1", "ResultMessage")
        await asyncio.sleep(0.2)  # nothing more comes

        assert sorted((a.command_id, a.HasField("error")) for a in acks) == [("c-input", False), ("c-start", False)]
        assert [text for text, _ in engine.last.sent] == ["only once"]
        assert driver.created == ["s-1"]


async def test_a_destruction_sent_across_a_reconnect_destroys_the_sandbox(tmp_path: Path) -> None:
    engine, driver = ScriptedEngine(result_turn()), GatedDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        acks: list[pb.CommandAck] = []
        agent.applier.submit(command(1, "c-start", 1, **start()), acks.append)
        agent.applier.submit(command(2, "c-destroy", 1, **destroy("deleted")), acks.append)
        await asyncio.sleep(0.1)
        await agent.state.raise_lease_generation(2)
        agent.applier.submit(command(2, "c-destroy", 2, **destroy("deleted")), acks.append)
        driver.gate.set()
        await _acks_for(acks, 2)
        await asyncio.sleep(0.2)

        assert sorted((a.command_id, a.HasField("error")) for a in acks) == [("c-destroy", False), ("c-start", False)]
        assert await agent.state.sessions() == []
        assert driver.destroyed == ["sb-s-1-1"]
