"""The reconciler: after a restart it adopts what is live, destroys orphans (forgetting them only on a
confirmed verdict), and never touches a session the control plane placed after its Hello."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.relay.commands import CommandApplier
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.runtimes import reconcile
from dataplane_agent.runtimes.reconcile import (
    LocalDirectoryInventory,
    Placements,
    Reconciler,
    ReconcileSettings,
)
from dataplane_agent.runtimes.runtimes import Runtimes
from dataplane_agent.sandboxes.base import (
    LAYER_BUILD_LABEL,
    POOL_LABEL,
    DestroyVerdict,
    ListedSandbox,
    SandboxDriver,
    SandboxSpec,
)
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from dataplane_agent.state import AgentState
from dataplane_agent.state_database import Database
from dataplane_agent.turns.transcripts import TranscriptStore
from tests.dataplane_agent.fakes import (
    MODEL_ENV,
    DirectorySandboxDriver,
    FixedModel,
    Forever,
    ScriptedEngine,
    assistant,
    deliver,
    init,
    kinds,
    result_turn,
    start,
)

AGENT = "agent-1"


@dataclass
class Node:
    """One run of an agent process: its state, runtimes, applier and reconciler."""

    state: AgentState
    outbox: Outbox
    runtimes: Runtimes
    applier: CommandApplier
    reconciler: Reconciler
    placements: Placements
    seq: int = 0

    async def command(self, session_id: str, **body) -> pb.CommandAck:
        self.seq += 1
        command = pb.Command(
            command_seq=self.seq,
            command_id=f"{session_id}-{self.seq}-{time.monotonic_ns()}",
            lease_generation=1,
            session_id=session_id,
            **body,
        )
        return await self.applier.apply(command)

    def welcome(self, *live: str, hello_at: float | None = None) -> None:
        welcome = pb.Welcome(live_sessions=pb.LiveSessions(session_ids=live))
        self.reconciler.on_welcome(welcome, time.monotonic() if hello_at is None else hello_at)

    async def reconciled(self, session_id: str) -> list[pb.SandboxReconciled]:
        outputs = await self.outbox.pending({}, limit=10_000)
        return [
            o.sandbox_reconciled for o in outputs if o.session_id == session_id and o.HasField("sandbox_reconciled")
        ]


class _NoInventory:
    """A driver that cannot list: only recorded sessions are judged."""

    async def sandboxes(self) -> list[ListedSandbox]:
        return []


@contextlib.asynccontextmanager
async def agent_process(
    path: Path, driver: SandboxDriver, inventory=None, engine: ScriptedEngine | None = None, retain: bool = False
) -> AsyncIterator[Node]:
    db = await Database.open(path / "agent.db")
    state, outbox = AgentState(db), Outbox(db)
    await state.raise_lease_generation(1)
    engine = engine or ScriptedEngine(result_turn())
    placements = Placements()
    runtimes = Runtimes(
        agent_id=AGENT,
        db=db,
        state=state,
        outbox=outbox,
        driver=driver,
        engines={engine.kind: engine},
        model=FixedModel(MODEL_ENV),
        transcripts=TranscriptStore(path / "transcripts"),
        placements=placements,
        retain_sandboxes=retain,
    )
    inventory = inventory or LocalDirectoryInventory(path / "sandboxes", AGENT)
    reconciler = Reconciler(
        state=state,
        outbox=outbox,
        driver=driver,
        runtimes=runtimes,
        placements=placements,
        inventory=inventory,
        settings=ReconcileSettings(interval=3600, retry=3600),
    )
    applier = CommandApplier(db, state, runtimes)
    await runtimes.recover()
    await reconciler.start()
    loops = [asyncio.create_task(runtimes.run()), asyncio.create_task(applier.run())]
    await runtimes.wait_running()
    await applier.wait_running()
    try:
        yield Node(state, outbox, runtimes, applier, reconciler, placements)
    finally:
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await db.close()


def local_dirs(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


async def test_after_a_restart_live_sessions_are_adopted_and_orphans_destroyed(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    driver = LocalSandboxDriver(root)
    async with agent_process(tmp_path, driver) as first:
        for sid in ("s-live", "s-deleted"):
            assert not (await first.command(sid, **start())).HasField("error")
        (root / "local-s-live" / "workspace" / "notes.txt").write_text("kept")
    # Left behind by a crash: a start that never recorded its session, and a warm-pool sandbox.
    await driver.create(SandboxSpec(session_id="s-stray", agent_id=AGENT))
    await driver.create(SandboxSpec(session_id="pool-1", agent_id=AGENT, labels={POOL_LABEL: "k"}))
    # Another agent's sandbox under the same root is not ours to judge.
    await driver.create(SandboxSpec(session_id="s-other", agent_id="agent-2"))
    assert local_dirs(root) == ["local-pool-1", "local-s-deleted", "local-s-live", "local-s-other", "local-s-stray"]

    async with agent_process(tmp_path, driver) as second:
        assert (await second.reconciler.reconcile()).destroyed == []  # the control plane has not spoken
        second.welcome("s-live")
        done = await second.reconciler.reconcile()
        assert done.adopted == ["local-s-live"]
        assert sorted(done.destroyed) == ["local-pool-1", "local-s-deleted", "local-s-stray"]
        assert local_dirs(root) == ["local-s-live", "local-s-other"]
        assert (root / "local-s-live" / "workspace" / "notes.txt").read_text() == "kept"
        assert [r.session_id for r in await second.state.sessions()] == ["s-live"]
        [adopted] = await second.reconciled("s-live")
        assert (adopted.action, adopted.sandbox_id, adopted.driver) == ("adopted", "local-s-live", "local")
        [gone] = await second.reconciled("s-deleted")
        assert (gone.action, gone.sandbox_id) == ("destroyed", "local-s-deleted")
        assert [r.action for r in await second.reconciled("s-stray")] == ["destroyed"]

        # A second pass has nothing left to do and reports nothing again.
        again = await second.reconciler.reconcile()
        assert (again.adopted, again.destroyed, again.unconfirmed) == ([], [], [])
        assert len(await second.reconciled("s-live")) == 1

        # The adopted session's next message runs; its engine resumes in the same sandbox.
        await second.command("s-live", **deliver("t-1"))
        async with asyncio.timeout(5):
            while "ResultMessage" not in kinds(await second.outbox.pending({}, limit=1000)):
                await asyncio.sleep(0.01)
        record = await second.state.session("s-live")
        assert record.sandbox.sandbox_id == "local-s-live"
        assert (record.sandbox.workspace / "notes.txt").read_text() == "kept"


async def test_retained_sandboxes_are_left_alone_across_restarts_and_a_release_retains_too(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    driver = LocalSandboxDriver(root)
    async with agent_process(tmp_path, driver, retain=True) as first:
        for sid in ("s-deleted", "s-gone"):
            assert not (await first.command(sid, **start())).HasField("error")
        kept = await first.command("s-deleted", destroy_runtime=pb.DestroyRuntime(reason="deleted"))
        assert kept.destroy_verdict == pb.DESTROY_VERDICT_RETAINED
        (root / "local-s-deleted" / "workspace" / "notes.txt").write_text("inspect me")
    # Restarted, still retaining: s-gone was archived while it was down (not live any more).
    async with agent_process(tmp_path, driver, retain=True) as second:
        second.welcome()
        done = await second.reconciler.reconcile()
        assert sorted(done.retained) == ["local-s-deleted", "local-s-gone"]
        assert done.destroyed == [] and done.unconfirmed == []
        assert [r.action for r in await second.reconciled("s-gone")] == ["retained"]
        assert await second.state.sessions() == []
        assert [r.session_id for r in await second.state.retained()] == ["s-deleted", "s-gone"]
    # Retention switched off: what was kept stays kept; the operator removes it.
    async with agent_process(tmp_path, driver) as third:
        third.welcome()
        done = await third.reconciler.reconcile()
        assert sorted(done.retained) == ["local-s-deleted", "local-s-gone"] and done.destroyed == []
    assert local_dirs(root) == ["local-s-deleted", "local-s-gone"]
    assert (root / "local-s-deleted" / "workspace" / "notes.txt").read_text() == "inspect me"


async def test_an_unconfirmed_destruction_keeps_the_record_and_the_next_pass_retries(tmp_path: Path) -> None:
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with agent_process(tmp_path, driver, inventory=_NoInventory()) as first:
        await first.command("s-1", **start())
    async with agent_process(tmp_path, driver, inventory=_NoInventory()) as second:
        second.welcome()
        driver.verdict = DestroyVerdict.UNCONFIRMED
        done = await second.reconciler.reconcile()
        assert done.unconfirmed == ["sb-s-1-1"] and done.destroyed == []
        assert [r.session_id for r in await second.state.sessions()] == ["s-1"]
        assert await second.reconciled("s-1") == []
        # What the metrics show (the LeakedSandboxes alert): one leaked, none destroyed yet.
        assert (second.reconciler.leaked, second.reconciler.reaped) == (1, 0)

        driver.verdict = DestroyVerdict.CONFIRMED
        done = await second.reconciler.reconcile()
        assert done.destroyed == ["sb-s-1-1"] and done.unconfirmed == []
        assert await second.state.sessions() == []
        assert [r.action for r in await second.reconciled("s-1")] == ["destroyed"]
        assert driver.destroyed == ["sb-s-1-1", "sb-s-1-1"]
        assert (second.reconciler.leaked, second.reconciler.reaped) == (0, 1)


async def test_a_session_placed_after_the_hello_is_kept_though_the_welcome_does_not_list_it(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    async with agent_process(tmp_path, LocalSandboxDriver(root)) as node:
        hello_at = time.monotonic()
        await node.command("s-new", **start())  # its StartRuntime arrived after the Hello
        node.welcome(hello_at=hello_at)
        done = await node.reconciler.reconcile()
        assert done.destroyed == [] and local_dirs(root) == ["local-s-new"]
        assert [r.session_id for r in await node.state.sessions()] == ["s-new"]

        # The next Welcome (after a reconnect) no longer lists it: now it is an orphan.
        node.welcome()
        assert (await node.reconciler.reconcile()).destroyed == ["local-s-new"]
        assert local_dirs(root) == [] and await node.state.sessions() == []


async def test_a_live_sessions_unrecorded_sandbox_is_kept_until_its_runtime_is_destroyed(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    driver = LocalSandboxDriver(root)
    await driver.create(SandboxSpec(session_id="s-1", agent_id=AGENT))  # the agent died inside StartRuntime
    async with agent_process(tmp_path, driver) as node:
        node.welcome("s-1")
        done = await node.reconciler.reconcile()
        assert done.kept == ["local-s-1"] and local_dirs(root) == ["local-s-1"]
        # The redelivered StartRuntime re-opens it ...
        await node.command("s-1", **start())
        assert (await node.state.session("s-1")).sandbox.sandbox_id == "local-s-1"
        # ... and a DestroyRuntime removes it.
        ack = await node.command("s-1", destroy_runtime=pb.DestroyRuntime(reason="deleted"))
        assert not ack.HasField("error") and local_dirs(root) == []

    await driver.create(SandboxSpec(session_id="s-2", agent_id=AGENT))
    async with agent_process(tmp_path, driver) as node:
        node.welcome("s-2")
        assert (await node.reconciler.reconcile()).kept == ["local-s-2"]
        # Deleted before any StartRuntime came: the command finds no record; the next pass destroys it.
        await node.command("s-2", destroy_runtime=pb.DestroyRuntime(reason="deleted"))
        assert (await node.reconciler.reconcile()).destroyed == ["local-s-2"]
        assert local_dirs(root) == []


async def test_a_welcome_that_does_not_list_live_sessions_destroys_nothing(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    async with agent_process(tmp_path, LocalSandboxDriver(root)) as first:
        await first.command("s-1", **start())
    async with agent_process(tmp_path, LocalSandboxDriver(root)) as second:
        second.reconciler.on_welcome(pb.Welcome(), time.monotonic())  # an older control plane
        assert (await second.reconciler.reconcile()).destroyed == []
        assert local_dirs(root) == ["local-s-1"]


async def test_the_loop_reconciles_after_each_welcome(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    async with agent_process(tmp_path, LocalSandboxDriver(root)) as first:
        await first.command("s-1", **start())
    async with agent_process(tmp_path, LocalSandboxDriver(root)) as second:
        loop = asyncio.create_task(second.reconciler.run())
        try:
            await asyncio.sleep(0.05)
            assert local_dirs(root) == ["local-s-1"]
            second.welcome()
            # The sandbox is destroyed, then the session forgotten: both, within the deadline.
            async with asyncio.timeout(5):
                while local_dirs(root) or await second.state.sessions():
                    await asyncio.sleep(0.01)
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)


async def test_an_idle_sessions_vanished_sandbox_is_rebuilt_without_waiting_for_a_message(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    engine = ScriptedEngine(turns=[result_turn("eng-7"), [init("eng-8"), assistant("working"), Forever()]])
    async with agent_process(tmp_path, LocalSandboxDriver(root), engine=engine) as node:
        for sid in ("s-idle", "s-busy"):
            assert not (await node.command(sid, **start())).HasField("error")
        await node.command("s-idle", **deliver("t-1"))
        async with asyncio.timeout(5):
            while "ResultMessage" not in kinds(await node.outbox.pending({}, limit=1000)):
                await asyncio.sleep(0.01)
        await node.command("s-busy", **deliver("t-2"))
        async with asyncio.timeout(5):
            while "AssistantMessage" not in kinds(
                [o for o in await node.outbox.pending({}, limit=1000) if o.session_id == "s-busy"]
            ):
                await asyncio.sleep(0.01)
        first = engine.sessions[0]
        node.welcome("s-idle", "s-busy")
        assert (await node.reconciler.reconcile()).recovered == []  # nothing is missing

        for sid in ("s-idle", "s-busy"):  # removed behind the agent's back
            shutil.rmtree(root / f"local-{sid}")
        done = await node.reconciler.reconcile()

        assert done.recovered == ["s-idle"] and done.destroyed == []
        assert (root / "local-s-idle" / "workspace").is_dir()
        outputs = [o for o in await node.outbox.pending({}, limit=1000) if o.session_id == "s-idle"]
        tail = [o.WhichOneof("body") for o in outputs][-2:]
        assert tail == ["runtime_lost", "runtime_started"]
        assert "removed outside AstraBox" in outputs[-2].runtime_lost.reason
        # The old engine is closed; the new one resumes the conversation the session had.
        assert first.closed and engine.last is not first
        assert engine.last.config.resume_engine_session_id == "eng-7"
        # Once rebuilt, a further pass finds nothing to do; the busy session's turn is left alone
        # (its next input recovers it) and nothing of it was destroyed.
        assert (await node.reconciler.reconcile()).recovered == []
        assert not (root / "local-s-busy").exists()
        assert "runtime_lost" not in kinds(
            [o for o in await node.outbox.pending({}, limit=1000) if o.session_id == "s-busy"]
        )


async def test_a_layer_builds_sandbox_is_left_to_its_build_and_a_crashed_ones_removed_unreported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "sandboxes"
    driver = LocalSandboxDriver(root)
    building = SandboxSpec(session_id="layer-0123abcd-aa", agent_id=AGENT, labels={LAYER_BUILD_LABEL: "0123abcd" * 8})
    await driver.create(building)
    async with agent_process(tmp_path, driver) as node:
        node.welcome()
        # Made during this process's life: a build under way, never an orphan session's sandbox.
        monkeypatch.setattr(reconcile, "_STARTED", 0.0)
        assert (await node.reconciler.reconcile()).destroyed == []
        assert local_dirs(root) == ["local-layer-0123abcd-aa"]
        # Made before it: what a crashed build left, removed, and reported for no session.
        monkeypatch.setattr(reconcile, "_STARTED", time.time() + 60)
        assert (await node.reconciler.reconcile()).destroyed == ["local-layer-0123abcd-aa"]
        assert local_dirs(root) == []
        assert await node.outbox.pending({}, limit=100) == []
