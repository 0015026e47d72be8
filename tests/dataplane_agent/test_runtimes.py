"""Runtimes and command application with small in-test engine and sandbox implementations."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.commands import CommandApplier
from dataplane_agent.engines.base import EngineConfig, EngineError, EngineOutput
from dataplane_agent.outbox import Outbox
from dataplane_agent.runtimes import RESTART_ABORT_REASON, Runtimes, model_env
from dataplane_agent.sandboxes.base import DestroyVerdict, Sandbox, SandboxDriver, SandboxSpec
from dataplane_agent.state import AgentState, Database


class DirectorySandboxDriver:
    """Sandboxes are directories under `root`; no isolation."""

    name = "fake"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.created: list[str] = []
        self.destroyed: list[str] = []
        self.verdict = DestroyVerdict.CONFIRMED

    async def probe(self) -> None:
        return None

    async def create(self, spec: SandboxSpec) -> Sandbox:
        base = self.root / spec.session_id
        (base / "workspace").mkdir(parents=True, exist_ok=True)
        (base / "home").mkdir(parents=True, exist_ok=True)
        self.created.append(spec.session_id)
        return Sandbox(
            sandbox_id=f"sb-{spec.session_id}",
            driver=self.name,
            session_id=spec.session_id,
            workspace=base / "workspace",
            inner_workspace="/workspace",
            home=base / "home",
        )

    async def launcher(self, sandbox: Sandbox, program: Sequence[str], env: Mapping[str, str]) -> Path:
        raise NotImplementedError

    async def destroy(self, sandbox: Sandbox) -> DestroyVerdict:
        self.destroyed.append(sandbox.sandbox_id)
        if self.verdict is DestroyVerdict.CONFIRMED:
            (self.root / sandbox.session_id / "workspace").rmdir()
        return self.verdict


@dataclass
class ScriptedEngineSession:
    """Yields one scripted turn per run_turn call."""

    adapter: ScriptedEngine
    config: EngineConfig
    engine_session_id: str = ""
    closed: bool = False
    turns: list[str] = field(default_factory=list)

    async def run_turn(self, text: str, permission_mode: str = "") -> AsyncIterator[EngineOutput]:
        self.turns.append(text)
        for output in self.adapter.script:
            if output.type_name == "BLOCK":
                await asyncio.Event().wait()
            if output.type_name == "RAISE":
                raise EngineError(output.payload["message"])
            if output.type_name == "SystemMessage":
                self.engine_session_id = output.payload.get("session_id", self.engine_session_id)
            await asyncio.sleep(0)
            yield output

    async def close(self) -> None:
        self.closed = True


class ScriptedEngine:
    """An engine adapter whose sessions replay `script` on every turn.

    Pseudo type names: "BLOCK" waits forever, "RAISE" raises EngineError."""

    kind = "fake"

    def __init__(self, script: Sequence[EngineOutput] = (), fail_start: str = "") -> None:
        self.script = list(script)
        self.fail_start = fail_start
        self.sessions: list[ScriptedEngineSession] = []

    async def start(self, sandbox: Sandbox, driver: SandboxDriver, config: EngineConfig) -> ScriptedEngineSession:
        if self.fail_start:
            raise EngineError(self.fail_start)
        session = ScriptedEngineSession(self, config, engine_session_id=config.resume_engine_session_id)
        self.sessions.append(session)
        return session


def result_script(session_id: str = "eng-1") -> list[EngineOutput]:
    return [
        EngineOutput("SystemMessage", {"subtype": "init", "session_id": session_id}),
        EngineOutput("AssistantMessage", {"content": [{"type": "text", "text": "hello"}], "model": "m"}),
        EngineOutput("ResultMessage", {"subtype": "success", "is_error": False, "session_id": session_id}),
    ]


# -- harness -------------------------------------------------------------------

MODEL_ENV = model_env("http://127.0.0.1:9", "sk-test")


@dataclass
class Agent:
    db: Database
    state: AgentState
    outbox: Outbox
    runtimes: Runtimes
    applier: CommandApplier
    lease: int = 1
    seq: int = 0

    async def command(self, session_id: str, command_id: str = "", lease: int | None = None, **body) -> pb.CommandAck:
        self.seq += 1
        command = pb.Command(
            command_seq=self.seq,
            command_id=command_id or f"cmd-{uuid.uuid4().hex[:12]}",
            lease_generation=self.lease if lease is None else lease,
            session_id=session_id,
            **body,
        )
        return await self.applier.apply(command)

    async def outputs(self, session_id: str) -> list[pb.Output]:
        return [o for o in await self.outbox.pending({}, limit=1000) if o.session_id == session_id]

    async def wait_outputs(self, session_id: str, count: int) -> list[pb.Output]:
        async with asyncio.timeout(5):
            while len(found := await self.outputs(session_id)) < count:
                await asyncio.sleep(0.01)
        return found


@contextlib.asynccontextmanager
async def running_agent(path: Path, engine: ScriptedEngine, driver: DirectorySandboxDriver) -> AsyncIterator[Agent]:
    db = await Database.open(path / "agent.db")
    state = AgentState(db)
    outbox = Outbox(db)
    await state.raise_lease_generation(1)
    runtimes = Runtimes(
        agent_id="agent-1",
        db=db,
        state=state,
        outbox=outbox,
        driver=driver,
        engines={engine.kind: engine},
        model_env=MODEL_ENV,
    )
    applier = CommandApplier(db, state, runtimes)
    await runtimes.recover()
    loops = [asyncio.create_task(runtimes.run()), asyncio.create_task(applier.run())]
    await runtimes.wait_running()
    await applier.wait_running()
    try:
        yield Agent(db, state, outbox, runtimes, applier)
    finally:
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await db.close()


def start(engine: str = "fake") -> dict:
    return {"start_runtime": pb.StartRuntime(engine=engine, permission_mode="default", model="m-1")}


def deliver(turn_id: str, text: str = "hi") -> dict:
    return {"deliver_input": pb.DeliverInput(turn_id=turn_id, text=text, permission_mode="acceptEdits")}


def kinds(outputs: list[pb.Output]) -> list[str]:
    return [o.engine_message.type_name if o.HasField("engine_message") else o.WhichOneof("body") for o in outputs]


# -- tests -----------------------------------------------------------------------


async def test_start_runtime_reports_runtime_started_and_gives_the_engine_the_model_env(tmp_path: Path) -> None:
    engine, driver = ScriptedEngine(result_script()), DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        ack = await agent.command("s-1", **start())
        assert not ack.HasField("error")
        [started] = await agent.outputs("s-1")
        assert started.output_seq == 1 and started.turn_id == ""
        assert started.runtime_started.sandbox_id == "sb-s-1"
        assert started.runtime_started.workspace == str(tmp_path / "sandboxes" / "s-1" / "workspace")
        config = engine.sessions[0].config
        assert (config.permission_mode, config.model) == ("default", "m-1")
        assert dict(config.env) == MODEL_ENV
        assert config.env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
        assert [r.session_id for r in await agent.state.sessions()] == ["s-1"]


async def test_deliver_input_relays_every_engine_message_in_order_ending_with_the_result(tmp_path: Path) -> None:
    engine, driver = ScriptedEngine(result_script("eng-42")), DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        ack = await agent.command("s-1", **deliver("t-1", "write a poem"))
        assert not ack.HasField("error")
        outputs = await agent.wait_outputs("s-1", 4)
        assert kinds(outputs) == ["runtime_started", "SystemMessage", "AssistantMessage", "ResultMessage"]
        assert [o.output_seq for o in outputs] == [1, 2, 3, 4]
        assert all(o.turn_id == "t-1" for o in outputs[1:])
        assert json.loads(outputs[2].engine_message.payload_json) == result_script()[1].payload
        assert engine.sessions[0].turns == ["write a poem"]
        [record] = await agent.state.sessions()
        assert record.turn_id == "" and record.engine_session_id == "eng-42"
        # The session is free for the next turn.
        await agent.command("s-1", **deliver("t-2"))
        assert kinds(await agent.wait_outputs("s-1", 7))[-1] == "ResultMessage"


async def test_a_turn_in_flight_at_a_crash_is_aborted_at_start_and_the_next_turn_resumes(tmp_path: Path) -> None:
    blocking = ScriptedEngine([EngineOutput("SystemMessage", {"session_id": "eng-7"}), EngineOutput("BLOCK", {})])
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, blocking, driver) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        await agent.wait_outputs("s-1", 2)
    # The process "died" with t-1 running; a new agent opens the same state.
    engine = ScriptedEngine(result_script("eng-7"))
    async with running_agent(tmp_path, engine, driver) as agent:
        outputs = await agent.outputs("s-1")
        assert kinds(outputs) == ["runtime_started", "SystemMessage", "turn_aborted"]
        assert outputs[-1].turn_id == "t-1" and outputs[-1].output_seq == 3
        assert outputs[-1].turn_aborted.reason == RESTART_ABORT_REASON
        await agent.command("s-1", **deliver("t-2"))
        outputs = await agent.wait_outputs("s-1", 6)
        assert kinds(outputs)[-1] == "ResultMessage"
        assert engine.sessions[0].config.resume_engine_session_id == "eng-7"
    async with running_agent(tmp_path, engine, driver) as agent:
        assert len(await agent.outputs("s-1")) == 6  # nothing aborted twice


async def test_an_engine_failure_mid_turn_aborts_the_turn_with_the_reason(tmp_path: Path) -> None:
    script = [EngineOutput("AssistantMessage", {"n": 1}), EngineOutput("RAISE", {"message": "CLI exited with 1"})]
    engine, driver = ScriptedEngine(script), DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        outputs = await agent.wait_outputs("s-1", 3)
        assert kinds(outputs) == ["runtime_started", "AssistantMessage", "turn_aborted"]
        assert "CLI exited with 1" in outputs[-1].turn_aborted.reason
        assert engine.sessions[0].closed
        assert (await agent.state.session("s-1")).turn_id == ""


async def test_a_failed_engine_start_reports_runtime_start_failed_and_removes_the_sandbox(tmp_path: Path) -> None:
    engine, driver = ScriptedEngine(fail_start="no CLI found"), DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        ack = await agent.command("s-1", **start())
        assert not ack.HasField("error")
        [failed] = await agent.outputs("s-1")
        assert "no CLI found" in failed.runtime_start_failed.reason
        assert driver.destroyed == ["sb-s-1"]
        assert await agent.state.sessions() == []
        [unknown] = [await agent.command("s-2", **start("nope"))]
        assert "'nope' is not available" in (await agent.outputs("s-2"))[0].runtime_start_failed.reason
        assert not unknown.HasField("error")


async def test_redelivered_command_has_no_second_effect_and_stale_lease_is_refused(tmp_path: Path) -> None:
    engine, driver = ScriptedEngine(result_script()), DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        first = await agent.command("s-1", command_id="c-start", **start())
        again = await agent.command("s-1", command_id="c-start", **start())
        assert first.command_id == again.command_id == "c-start"
        assert not again.HasField("error")
        assert len(await agent.outputs("s-1")) == 1 and len(engine.sessions) == 1

        await agent.state.raise_lease_generation(5)
        stale = await agent.command("s-1", command_id="c-old", lease=4, **deliver("t-1"))
        assert stale.error.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
        assert engine.sessions[0].turns == []
        # An applied command keeps its answer even when redelivered under an old lease.
        assert not (await agent.command("s-1", command_id="c-start", lease=1, **start())).HasField("error")

        missing = await agent.command("s-9", lease=5, **deliver("t-1"))
        assert missing.error.code == grpc.StatusCode.NOT_FOUND.value[0]


async def test_destroy_forgets_the_session_only_when_destruction_is_confirmed(tmp_path: Path) -> None:
    engine, driver = ScriptedEngine(result_script()), DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        driver.verdict = DestroyVerdict.UNCONFIRMED
        refused = await agent.command("s-1", **{"destroy_runtime": pb.DestroyRuntime(reason="archived")})
        assert refused.error.code == grpc.StatusCode.UNAVAILABLE.value[0]
        assert [r.session_id for r in await agent.state.sessions()] == ["s-1"]
        driver.verdict = DestroyVerdict.CONFIRMED
        done = await agent.command("s-1", **{"destroy_runtime": pb.DestroyRuntime(reason="archived")})
        assert not done.HasField("error")
        assert await agent.state.sessions() == []
        assert engine.sessions[0].closed
        assert not (tmp_path / "sandboxes" / "s-1" / "workspace").exists()


async def test_destroy_during_a_turn_aborts_the_turn(tmp_path: Path) -> None:
    engine = ScriptedEngine([EngineOutput("AssistantMessage", {}), EngineOutput("BLOCK", {})])
    driver = DirectorySandboxDriver(tmp_path / "sandboxes")
    async with running_agent(tmp_path, engine, driver) as agent:
        await agent.command("s-1", **start())
        await agent.command("s-1", **deliver("t-1"))
        await agent.wait_outputs("s-1", 2)
        await agent.command("s-1", **{"destroy_runtime": pb.DestroyRuntime(reason="deleted")})
        outputs = await agent.outputs("s-1")
        assert kinds(outputs) == ["runtime_started", "AssistantMessage", "turn_aborted"]
        assert outputs[-1].turn_id == "t-1" and "destroyed" in outputs[-1].turn_aborted.reason
