"""The warm pool with the real local driver: sessions start from ready sandboxes rebound to them, the
pool refills, and sandboxes of a changed template, too old, or left by an earlier process are retired."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import statistics
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path

import structlog.testing

from astrabox.agents.v1 import agent_pb2
from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.agent_config import SystemPrompt
from dataplane_agent.pool.warm_engines import EngineWarmer, WarmEngineSettings
from dataplane_agent.pool.warm_pool import PoolSettings, WarmPool, template_key
from dataplane_agent.relay.commands import CommandApplier
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.runtimes.reconcile import LocalDirectoryInventory, Placements, Reconciler
from dataplane_agent.runtimes.runtimes import Runtimes
from dataplane_agent.sandboxes.base import POOL_LABEL, DestroyVerdict, Sandbox, SandboxSpec
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from dataplane_agent.state import AgentState
from dataplane_agent.state_database import Database
from dataplane_agent.turns.transcripts import TranscriptStore
from tests.dataplane_agent.fakes import MODEL_ENV, FixedModel, ScriptedEngine, deliver, result_turn, start

AGENT = "agent-1"


class TimedDriver:
    """The local driver, timing each create and rebind."""

    def __init__(self, root: Path) -> None:
        self.inner = LocalSandboxDriver(root)
        self.name = self.inner.name
        self.relays_terminal = self.inner.relays_terminal
        self.creates: list[float] = []
        self.rebinds: list[float] = []

    async def probe(self) -> None:
        await self.inner.probe()

    async def create(self, spec: SandboxSpec) -> Sandbox:
        began = time.perf_counter()
        sandbox = await self.inner.create(spec)
        self.creates.append(time.perf_counter() - began)
        return sandbox

    async def rebind(self, sandbox: Sandbox, spec: SandboxSpec) -> Sandbox:
        began = time.perf_counter()
        sandbox = await self.inner.rebind(sandbox, spec)
        self.rebinds.append(time.perf_counter() - began)
        return sandbox

    async def launcher(
        self, sandbox: Sandbox, program: Sequence[str], env: Mapping[str, str], *, terminal: bool = False
    ) -> Path:
        return await self.inner.launcher(sandbox, program, env)

    async def end_processes(self, sandbox: Sandbox, marker: str, variable: str = "") -> None:
        return None

    async def end_leftovers(self, sandbox: Sandbox) -> int:
        return 0

    async def stop(self, sandbox: Sandbox) -> None:
        await self.inner.stop(sandbox)

    async def destroy(self, sandbox: Sandbox) -> DestroyVerdict:
        return await self.inner.destroy(sandbox)


async def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)


def dirs(root: Path, prefix: str = "local-") -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith(prefix))


def labels_of(directory: Path) -> dict[str, str]:
    return json.loads((directory / "run" / "sandbox.json").read_text())["labels"]


@contextlib.asynccontextmanager
async def running(pool: WarmPool) -> AsyncIterator[WarmPool]:
    await pool.start()
    task = asyncio.create_task(pool.run())
    try:
        yield pool
    finally:
        task.cancel()
        async with asyncio.timeout(30):  # a pool that missed its cancellation fails here, not at the suite's timeout
            await asyncio.gather(task, return_exceptions=True)


@dataclasses.dataclass
class PooledAgent:
    applier: CommandApplier
    runtimes: Runtimes
    pool: WarmPool
    state: AgentState
    outbox: Outbox
    model: FixedModel


@contextlib.asynccontextmanager
async def pooled_agent(
    path: Path, driver: TimedDriver, size: int, *, engine: ScriptedEngine | None = None, warm_engines: bool = False
) -> AsyncIterator[PooledAgent]:
    db = await Database.open(path / "agent.db")
    state, outbox = AgentState(db), Outbox(db)
    await state.raise_lease_generation(1)
    engine = engine or ScriptedEngine(result_turn())
    model = FixedModel(MODEL_ENV)
    inventory = LocalDirectoryInventory(path / "sandboxes", AGENT)
    warmer = EngineWarmer(engine, driver, model, WarmEngineSettings(engine=engine.kind)) if warm_engines else None
    pool = WarmPool(
        driver, lambda: runtimes.sandbox_template(), PoolSettings(size=size), inventory=inventory, engines=warmer
    )
    runtimes = Runtimes(
        agent_id=AGENT,
        db=db,
        state=state,
        outbox=outbox,
        driver=driver,
        engines={engine.kind: engine},
        model=model,
        transcripts=TranscriptStore(path / "transcripts"),
        pool=pool,
    )
    applier = CommandApplier(db, state, runtimes)
    loops = [asyncio.create_task(runtimes.run()), asyncio.create_task(applier.run())]
    await runtimes.wait_running()
    await applier.wait_running()
    try:
        async with running(pool):
            yield PooledAgent(applier, runtimes, pool, state, outbox, model)
    finally:
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await db.close()


def start_command(seq: int, session_id: str) -> pb.Command:
    return pb.Command(command_seq=seq, command_id=f"c-{seq}", lease_generation=1, session_id=session_id, **start())


def ms(values: list[float]) -> str:
    if not values:
        return "none"
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return f"p50 {statistics.median(ordered) * 1000:.2f} ms, p90 {p90 * 1000:.2f} ms (n={len(ordered)})"


async def test_with_a_pool_of_four_ten_sessions_in_a_row_are_all_ready_and_the_pool_refills(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    driver = TimedDriver(root)
    async with pooled_agent(tmp_path, driver, size=4) as agent:
        applier, pool = agent.applier, agent.pool
        await wait_until(lambda: pool.ready == 4)
        started: list[float] = []
        for n in range(10):
            began = time.perf_counter()
            ack = await applier.apply(start_command(n + 1, f"s-{n}"))
            started.append(time.perf_counter() - began)
            assert not ack.HasField("error")
        outbox = await agent.outbox.pending({}, limit=10_000)
        ready = {o.session_id for o in outbox if o.HasField("runtime_started")}
        assert ready == {f"s-{n}" for n in range(10)}
        assert pool.hits >= 4

        # Each claimed sandbox looks exactly like one created for its session.
        for n in range(10):
            directory = root / f"local-s-{n}"
            assert labels_of(directory) == {"astrabox.session_id": f"s-{n}", "astrabox.agent_id": AGENT}
            assert json.loads((directory / "run" / "sandbox.json").read_text())["session_id"] == f"s-{n}"
        # The pool refills, and what waits in it holds nothing of any session.
        await wait_until(lambda: pool.ready == 4)
        waiting = dirs(root, "local-pool-")
        assert len(waiting) == 4
        for name in waiting:
            assert "astrabox.session_id" not in labels_of(root / name)
            assert list((root / name / "workspace").iterdir()) == []
        print(
            f"\nwarm pool of 4, 10 sessions: {pool.hits} hits, {pool.misses} misses"
            f"\n  sandbox step, pool hit (rebind):   {ms(driver.rebinds)}"
            f"\n  sandbox step, cold (create):       {ms(driver.creates)}"
            f"\n  StartRuntime applied (fake engine): {ms(started)}"
        )


async def test_a_changed_template_retires_the_old_sandboxes_and_refills_with_the_new(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    driver = LocalSandboxDriver(root)
    template = [SandboxSpec(session_id="template", agent_id=AGENT, labels={"astrabox.agent_id": AGENT, "image": "v1"})]
    pool = WarmPool(driver, lambda: template[0], PoolSettings(size=3))
    async with running(pool):
        await wait_until(lambda: pool.ready == 3)
        old = dirs(root)
        old_spec = dataclasses.replace(template[0], session_id="s-old")
        template[0] = dataclasses.replace(template[0], labels={"astrabox.agent_id": AGENT, "image": "v2"})
        pool.refill()
        await wait_until(lambda: pool.ready == 3 and not set(old) & set(dirs(root)))
        assert pool.retired == 3
        new_key = template_key("local", template[0])
        assert {labels_of(root / name)[POOL_LABEL] for name in dirs(root)} == {new_key}

        assert await pool.claim(old_spec) is None  # nothing of the old template is handed out
        claimed = await pool.claim(dataclasses.replace(template[0], session_id="s-new"))
        assert claimed is not None and claimed.sandbox.sandbox_id == "local-s-new" and (root / "local-s-new").is_dir()


async def test_sandboxes_older_than_the_max_age_are_retired(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    now = [1000.0]
    template = SandboxSpec(session_id="template", agent_id=AGENT)
    pool = WarmPool(LocalSandboxDriver(root), lambda: template, PoolSettings(size=2, max_age=60), clock=lambda: now[0])
    async with running(pool):
        await wait_until(lambda: pool.ready == 2)
        old = dirs(root)
        now[0] += 61
        assert await pool.claim(dataclasses.replace(template, session_id="s-1")) is None  # too old to hand out
        pool.refill()
        await wait_until(lambda: pool.ready == 2 and not set(old) & set(dirs(root)))
        assert pool.retired == 2


async def test_a_restarted_pool_takes_back_current_sandboxes_and_retires_the_rest(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    driver = LocalSandboxDriver(root)
    template = SandboxSpec(session_id="template", agent_id=AGENT)
    inventory = LocalDirectoryInventory(root, AGENT)
    async with running(WarmPool(driver, lambda: template, PoolSettings(size=2), inventory=inventory)) as first:
        await wait_until(lambda: first.ready == 2)
    kept = dirs(root)
    await driver.create(SandboxSpec(session_id="pool-stale", agent_id=AGENT, labels={POOL_LABEL: "another-template"}))

    second = WarmPool(driver, lambda: template, PoolSettings(size=2), inventory=inventory)
    await second.start()
    assert second.ready == 2 and dirs(root) == kept  # taken back; the stale one retired
    claimed = await second.claim(dataclasses.replace(template, session_id="s-1"))
    assert claimed is not None and f"local-pool-{claimed.sandbox.sandbox_id}" not in dirs(root)


async def test_a_session_that_already_has_a_sandbox_reopens_it_and_the_claimed_one_is_retired(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    driver = TimedDriver(root)
    await driver.inner.create(SandboxSpec(session_id="s-1", agent_id=AGENT))  # left by a crash inside StartRuntime
    (root / "local-s-1" / "workspace" / "mark").write_text("1")
    async with pooled_agent(tmp_path, driver, size=1) as agent:
        pool = agent.pool
        await wait_until(lambda: pool.ready == 1)
        ack = await agent.applier.apply(start_command(1, "s-1"))
        assert not ack.HasField("error")
        assert (root / "local-s-1" / "workspace" / "mark").read_text() == "1"
        assert (pool.hits, pool.misses, pool.retired) == (0, 1, 1)
        await wait_until(lambda: pool.ready == 1)


async def test_the_reconciler_leaves_the_running_pools_sandboxes_alone(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    driver = TimedDriver(root)
    await driver.inner.create(SandboxSpec(session_id="pool-orphan", agent_id=AGENT, labels={POOL_LABEL: "x"}))
    async with pooled_agent(tmp_path, driver, size=2) as agent:
        pool = agent.pool
        await wait_until(lambda: pool.ready == 2)
        assert "local-pool-orphan" not in dirs(root)  # retired by the pool's start: not its template
        await driver.inner.create(SandboxSpec(session_id="pool-stray", agent_id=AGENT, labels={POOL_LABEL: "x"}))
        placements = Placements()
        reconciler = Reconciler(
            state=agent.state,
            outbox=agent.outbox,
            driver=driver,
            runtimes=agent.runtimes,
            placements=placements,
            inventory=LocalDirectoryInventory(root, AGENT),
            pool=pool,
        )
        placements.believe([], time.monotonic())
        done = await reconciler.reconcile()
        assert done.destroyed == ["local-pool-stray"]
        assert len(dirs(root, "local-pool-")) == 2 and pool.ready == 2


def phases(outputs: list[pb.Output], session_id: str) -> list[str]:
    return [o.startup_phase.phase for o in outputs if o.session_id == session_id and o.HasField("startup_phase")]


async def test_with_warm_engines_a_session_adopts_the_engine_started_in_its_sandbox(tmp_path: Path) -> None:
    engine = ScriptedEngine(result_turn())
    async with pooled_agent(
        tmp_path, TimedDriver(tmp_path / "sandboxes"), size=2, engine=engine, warm_engines=True
    ) as agent:
        await wait_until(lambda: agent.pool.ready == 2)
        prestarted = list(engine.sessions)
        assert len(prestarted) == 2 and all(s.config.permission_mode == "bypassPermissions" for s in prestarted)

        ack = await agent.applier.apply(start_command(1, "s-1"))
        assert not ack.HasField("error")
        [adopter] = [s for s in prestarted if s.adopted is not None]
        sandbox, config = adopter.adopted
        assert sandbox.session_id == "s-1" and sandbox.sandbox_id == "local-s-1"
        # The session's own mode and model; its approvals go to the session's turns.
        assert (config.permission_mode, config.model) == ("default", "m-1") and config.interactions is not None
        # The model route attributes the pool sandbox's credential to the session from now on.
        [(owner, user)] = agent.model.handed_over.items()
        assert owner.startswith("pool-") and user == "s-1"
        outputs = await agent.outbox.pending({}, limit=1000)
        assert phases(outputs, "s-1") == ["sandbox_claimed", "engine_adopted", "ready"]

        # The adopted engine runs the session's turns; the pool starts an engine for its refill.
        await agent.applier.apply(
            pb.Command(command_seq=2, command_id="c-2", lease_generation=1, session_id="s-1", **deliver("t-1"))
        )
        await wait_until(lambda: adopter.sent == [("hi", "acceptEdits")])
        await wait_until(lambda: agent.pool.ready == 2)
        assert len(engine.sessions) == 3 and not any(s.closed for s in engine.sessions)


async def test_a_session_resuming_a_conversation_gets_a_fresh_engine_and_the_prestarted_one_is_closed(
    tmp_path: Path,
) -> None:
    engine = ScriptedEngine(result_turn())
    async with pooled_agent(
        tmp_path, TimedDriver(tmp_path / "sandboxes"), size=1, engine=engine, warm_engines=True
    ) as agent:
        await wait_until(lambda: agent.pool.ready == 1)
        [prestarted] = engine.sessions
        command = pb.Command(
            command_seq=1,
            command_id="c-1",
            lease_generation=1,
            session_id="s-1",
            **start(resume_engine_session_id="eng-9", transcript=b'{"x": 1}\n'),
        )
        assert not (await agent.applier.apply(command)).HasField("error")
        await wait_until(lambda: prestarted.closed)
        [resumed] = [s for s in engine.sessions if s.config.resume_engine_session_id == "eng-9"]
        assert resumed is not prestarted and prestarted.adopted is None
        outputs = await agent.outbox.pending({}, limit=1000)
        assert phases(outputs, "s-1") == ["sandbox_claimed", "engine_connected", "ready"]
        assert agent.model.handed_over == {}


async def test_a_session_with_an_agent_configuration_gets_a_fresh_engine_in_the_claimed_sandbox(
    tmp_path: Path,
) -> None:
    engine = ScriptedEngine(result_turn())
    async with pooled_agent(
        tmp_path, TimedDriver(tmp_path / "sandboxes"), size=1, engine=engine, warm_engines=True
    ) as agent:
        await wait_until(lambda: agent.pool.ready == 1)
        [prestarted] = engine.sessions
        config = agent_pb2.AgentSpec(system_prompt=agent_pb2.SystemPrompt(append="Be brief."))
        command = pb.Command(
            command_seq=1, command_id="c-1", lease_generation=1, session_id="s-1", **start(config=config)
        )
        assert not (await agent.applier.apply(command)).HasField("error")
        await wait_until(lambda: prestarted.closed)
        [fresh] = [s for s in engine.sessions if not s.config.agent_config.is_default]
        assert fresh is not prestarted and prestarted.adopted is None
        assert fresh.config.agent_config.system_prompt == SystemPrompt("Be brief.")
        outputs = await agent.outbox.pending({}, limit=1000)
        assert phases(outputs, "s-1") == ["sandbox_claimed", "engine_connected", "ready"]


REVIEWER = agent_pb2.AgentSpec(
    system_prompt=agent_pb2.SystemPrompt(append="Review."),
    skills=[agent_pb2.Skill(name="checklist", files=[agent_pb2.SkillFile(path="SKILL.md", content=b"Check.")])],
)


def agent_start(seq: int, session_id: str, project: str, spec: agent_pb2.AgentSpec = REVIEWER) -> pb.Command:
    fields = start(config=spec, project_id=project, agent_id="agent-reviewer", agent_version=1)
    return pb.Command(command_seq=seq, command_id=f"c-{seq}", lease_generation=1, session_id=session_id, **fields)


async def test_a_later_session_of_an_agent_version_adopts_an_engine_started_with_its_configuration_never_another_projects(
    tmp_path: Path,
) -> None:
    engine = ScriptedEngine(result_turn())
    async with pooled_agent(
        tmp_path, TimedDriver(tmp_path / "sandboxes"), size=3, engine=engine, warm_engines=True
    ) as agent:
        await wait_until(lambda: agent.pool.ready == 3)
        assert not (await agent.applier.apply(agent_start(1, "s-1", "project-a"))).HasField("error")
        outputs = await agent.outbox.pending({}, limit=1000)
        # The first session of the version: no engine had its configuration yet.
        assert phases(outputs, "s-1") == ["sandbox_claimed", "engine_connected", "ready"]

        def warm_for_reviewer() -> list:
            return [
                s
                for s in engine.sessions
                if s.adopted is None
                and not s.closed
                and not s.config.session_id  # started ahead, for no session yet
                and s.config.agent_config.system_prompt == SystemPrompt("Review.")
            ]

        # The pool keeps one engine started with the version's configuration, the others the default.
        await wait_until(lambda: len(warm_for_reviewer()) == 1 and agent.pool.ready == 3)
        [prestarted] = warm_for_reviewer()
        assert [skill.name for skill in prestarted.config.agent_config.skills] == ["checklist"]

        # Another project whose definition is the same, under the same ids: never that engine.
        assert not (await agent.applier.apply(agent_start(2, "s-2", "project-b"))).HasField("error")
        outputs = await agent.outbox.pending({}, limit=1000)
        assert phases(outputs, "s-2")[-2:] == ["engine_connected", "ready"]
        # Nor a session without an agent.
        assert not (await agent.applier.apply(start_command(3, "s-3"))).HasField("error")
        assert prestarted.adopted is None and not prestarted.closed

        # A later session of the version in the same project adopts it.
        assert not (await agent.applier.apply(agent_start(4, "s-4", "project-a"))).HasField("error")
        outputs = await agent.outbox.pending({}, limit=1000)
        assert phases(outputs, "s-4") == ["sandbox_claimed", "engine_adopted", "ready"]
        assert prestarted.adopted is not None and prestarted.adopted[0].session_id == "s-4"
        assert (prestarted.config.permission_mode, prestarted.config.model) == ("default", "m-1")


async def test_the_pool_keeps_engines_for_the_agent_versions_started_last_and_retires_the_others(
    tmp_path: Path,
) -> None:
    engine = ScriptedEngine(result_turn())
    async with pooled_agent(
        tmp_path, TimedDriver(tmp_path / "sandboxes"), size=2, engine=engine, warm_engines=True
    ) as agent:
        await wait_until(lambda: agent.pool.ready == 2)
        other = agent_pb2.AgentSpec(system_prompt=agent_pb2.SystemPrompt(append="Other."))

        def ready_prompts() -> set:
            """The agent versions' prompts of the engines started ahead and not yet used."""
            return {
                s.config.agent_config.system_prompt.text
                for s in engine.sessions
                if s.adopted is None
                and not s.closed
                and not s.config.session_id  # started ahead, for no session yet
                and s.config.agent_config.system_prompt is not None
            }

        await agent.applier.apply(agent_start(1, "s-1", "project-a"))
        await wait_until(lambda: ready_prompts() == {"Review."} and agent.pool.ready == 2)
        await agent.applier.apply(agent_start(2, "s-2", "project-a", other))

        # A pool of two keeps one agent version: the latest; the other's engine is closed.
        await wait_until(lambda: ready_prompts() == {"Other."} and agent.pool.ready == 2)


async def test_a_pool_whose_engine_does_not_start_keeps_no_sandbox_ready(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    engine = ScriptedEngine(fail_start="the CLI was not found")
    template = SandboxSpec(session_id="template", agent_id=AGENT)
    model = FixedModel(MODEL_ENV)
    warmer = EngineWarmer(engine, LocalSandboxDriver(root), model, WarmEngineSettings(engine=engine.kind))
    pool = WarmPool(LocalSandboxDriver(root), lambda: template, PoolSettings(size=2, backoff=0.05), engines=warmer)
    async with running(pool):
        await wait_until(lambda: pool.retired >= 3)
        assert pool.ready == 0
    assert dirs(root, "local-pool-") == []  # each was retired once its engine failed


async def test_a_pool_that_keeps_failing_backs_off_twice_as_long_each_time_and_says_so(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    engine = ScriptedEngine(fail_start="Permission denied")
    template = SandboxSpec(session_id="template", agent_id=AGENT)
    warmer = EngineWarmer(
        engine, LocalSandboxDriver(root), FixedModel(MODEL_ENV), WarmEngineSettings(engine=engine.kind)
    )
    settings = PoolSettings(size=1, backoff=0.01, max_backoff=0.04)
    pool = WarmPool(LocalSandboxDriver(root), lambda: template, settings, engines=warmer)
    with structlog.testing.capture_logs() as logs:
        async with running(pool):
            await wait_until(lambda: pool.failures >= 5)
    failing = [entry for entry in logs if entry["event"] == "pool_failing"][:5]
    assert [entry["consecutive_failures"] for entry in failing] == [1, 2, 3, 4, 5]
    assert [entry["retry_in"] for entry in failing] == [0.01, 0.02, 0.04, 0.04, 0.04]
    assert pool.ready == 0


async def test_a_stopped_pool_closes_its_engines_and_the_next_one_starts_engines_in_what_it_takes_back(
    tmp_path: Path,
) -> None:
    root = tmp_path / "sandboxes"
    engine = ScriptedEngine(result_turn())
    template = SandboxSpec(session_id="template", agent_id=AGENT)
    inventory = LocalDirectoryInventory(root, AGENT)

    def pool() -> WarmPool:
        driver = LocalSandboxDriver(root)
        warmer = EngineWarmer(engine, driver, FixedModel(MODEL_ENV), WarmEngineSettings(engine=engine.kind))
        return WarmPool(driver, lambda: template, PoolSettings(size=2), inventory=inventory, engines=warmer)

    async with running(pool()) as first:
        await wait_until(lambda: first.ready == 2)
    assert len(engine.sessions) == 2 and all(s.closed for s in engine.sessions)
    kept = dirs(root)

    async with running(pool()) as second:
        await wait_until(lambda: len(engine.sessions) == 4 and second.ready == 2)
        assert dirs(root) == kept  # the same sandboxes, each with a new engine
        claimed = await second.claim(dataclasses.replace(template, session_id="s-1"))
        assert claimed is not None and claimed.engine in engine.sessions[2:] and not claimed.engine.closed


async def test_a_ready_sandbox_whose_engine_died_is_not_handed_out_but_retired_and_replaced(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    engine = ScriptedEngine(result_turn())
    template = SandboxSpec(session_id="template", agent_id=AGENT)
    driver = LocalSandboxDriver(root)
    warmer = EngineWarmer(engine, driver, FixedModel(MODEL_ENV), WarmEngineSettings(engine=engine.kind))
    pool = WarmPool(driver, lambda: template, PoolSettings(size=2), engines=warmer)
    async with running(pool):
        await wait_until(lambda: pool.ready == 2)
        dead, alive = engine.sessions
        await dead.close()  # the CLI exited while it waited (killed, out of memory)
        claimed = await pool.claim(dataclasses.replace(template, session_id="s-1"))
        assert claimed is not None and claimed.engine is alive
        await wait_until(lambda: pool.retired == 1 and pool.ready == 2)
        assert len(engine.sessions) == 4 and len(dirs(root, "local-pool-")) == 2  # its sandbox went with it


async def test_an_environment_used_lately_keeps_its_own_sandboxes_until_it_is_no_longer_used(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    now = [1000.0]
    builtin = SandboxSpec(session_id="template", agent_id=AGENT)
    layer = tmp_path / "layer"
    layer.mkdir()
    alpha = dataclasses.replace(builtin, session_id="s-alpha", layer=layer, variables={"MODE": "alpha"})
    beta = dataclasses.replace(alpha, session_id="s-beta", variables={"MODE": "beta"})  # same layer, other env
    settings = PoolSettings(size=0, per_environment=2, environment_recency=3600)
    pool = WarmPool(LocalSandboxDriver(root), lambda: builtin, settings, clock=lambda: now[0])
    async with running(pool):
        assert await pool.claim(alpha) is None  # nothing kept for it before its first session
        pool.remember(alpha)
        await wait_until(lambda: pool.ready == 2)
        assert {labels_of(root / name)[POOL_LABEL] for name in dirs(root)} == {template_key("local", alpha)}

        assert await pool.claim(beta) is None  # another environment's sandbox is never handed out
        assert await pool.claim(dataclasses.replace(builtin, session_id="s-plain")) is None
        claimed = await pool.claim(dataclasses.replace(alpha, session_id="s-alpha-2"))
        assert claimed is not None and claimed.engine is None and claimed.sandbox.sandbox_id == "local-s-alpha-2"
        await wait_until(lambda: pool.ready == 2)  # refilled for it

        # An hour without a session of it: its sandboxes are retired and not made again.
        now[0] += 3601
        pool.refill()
        # The pool counts a retirement once destroy returns, after the directory went: wait for both.
        await wait_until(lambda: pool.retired == 2 and dirs(root) == ["local-s-alpha-2"])
        assert pool.ready == 0


class HeldDriver(LocalSandboxDriver):
    """The local driver, whose creates wait until `release` is set."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.release = asyncio.Event()
        self.held = 0

    async def create(self, spec: SandboxSpec) -> Sandbox:
        self.held += 1
        await self.release.wait()
        return await super().create(spec)


async def test_an_environment_first_used_while_the_pool_makes_sandboxes_gets_its_own_at_once(tmp_path: Path) -> None:
    # What asks the pool to look again (a new environment, a claim, a changed template) while it is
    # busy making or retiring sandboxes is acted on when it is done, not at its next timed look.
    root = tmp_path / "sandboxes"
    builtin = SandboxSpec(session_id="template", agent_id=AGENT)
    alpha = dataclasses.replace(builtin, session_id="s-alpha", variables={"MODE": "alpha"})
    beta = dataclasses.replace(builtin, session_id="s-beta", variables={"MODE": "beta"})
    driver = HeldDriver(root)
    pool = WarmPool(driver, lambda: builtin, PoolSettings(size=0, per_environment=1))
    async with running(pool):
        pool.remember(alpha)
        await wait_until(lambda: driver.held == 1)  # alpha's sandbox under way
        pool.remember(beta)
        driver.release.set()
        await wait_until(lambda: pool.ready == 2)
        keys = {labels_of(root / name)[POOL_LABEL] for name in dirs(root)}
        assert keys == {template_key("local", alpha), template_key("local", beta)}
