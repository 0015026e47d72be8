"""In-test engine and sandbox implementations (real code, scripted) and an agent harness.

`ScriptedEngine` implements the engine port: each `send()` plays the next
scripted turn on the session's single output stream. Script steps:
- an `EngineOutput` is emitted (a SystemMessage "init" also sets the engine's
  conversation id);
- `Ask(tool, input)` asks the interaction broker and emits an
  AssistantMessage saying what the engine was told;
- `UntilInterrupted()` waits for `interrupt()`; `Forever()` never ends (an
  engine that ignores interrupts);
- `Raise(message)` ends the output stream with an EngineError;
- `Exit()` ends the output stream, as a dying CLI does.
Tests also push outputs between turns with `session.emit()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from astrabox.environments.v1 import environment_pb2 as env_pb
from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.base import (
    EngineAdapter,
    EngineConfig,
    EngineError,
    EngineManifest,
    EngineOutput,
    McpUnavailable,
    PermissionModeRefused,
    ToolDecision,
    ToolRequest,
)
from dataplane_agent.environments.build_command import LayerBuilds
from dataplane_agent.environments.layers import LayerStore
from dataplane_agent.relay.commands import CommandApplier
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.routes.egress.proxy import EgressProxy
from dataplane_agent.routes.model import ModelAccess
from dataplane_agent.runtimes.runtimes import Runtimes, model_env
from dataplane_agent.sandboxes.base import DestroyVerdict, Sandbox, SandboxDriver, SandboxSpec
from dataplane_agent.state import AgentState
from dataplane_agent.state_database import Database
from dataplane_agent.turns.session import TurnLimits
from dataplane_agent.turns.transcripts import TranscriptStore

MANIFEST = EngineManifest(
    kind="fake",
    permission_modes=("default", "acceptEdits", "plan"),
    supports_interactions=True,
    supports_background_tasks=True,
    supports_server_info=True,
)


class DirectorySandboxDriver:
    """Sandboxes are directories under `root`; no isolation."""

    name = "fake"
    relays_terminal = False

    def __init__(self, root: Path) -> None:
        self.root = root
        self.created: list[str] = []
        self.stopped: list[str] = []
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
            sandbox_id=f"sb-{spec.session_id}-{len(self.created)}",
            driver=self.name,
            session_id=spec.session_id,
            workspace=base / "workspace",
            inner_workspace="/workspace",
            home=base / "home",
        )

    async def launcher(
        self, sandbox: Sandbox, program: Sequence[str], env: Mapping[str, str], *, terminal: bool = False
    ) -> Path:
        raise NotImplementedError

    async def end_processes(self, sandbox: Sandbox, marker: str, variable: str = "") -> None:
        return None

    async def end_leftovers(self, sandbox: Sandbox) -> int:
        return 0

    async def stop(self, sandbox: Sandbox) -> None:
        """Nothing runs in a directory: the call is recorded and the directory kept."""
        self.stopped.append(sandbox.sandbox_id)

    async def destroy(self, sandbox: Sandbox) -> DestroyVerdict:
        self.destroyed.append(sandbox.sandbox_id)
        if self.verdict is DestroyVerdict.CONFIRMED:
            (self.root / sandbox.session_id / "workspace").rmdir()
        return self.verdict


@dataclass(frozen=True)
class Ask:
    tool_name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class UntilInterrupted:
    pass


@dataclass(frozen=True)
class Forever:
    pass


@dataclass(frozen=True)
class Raise:
    message: str


@dataclass(frozen=True)
class Exit:
    pass


Step = EngineOutput | Ask | UntilInterrupted | Forever | Raise | Exit


@dataclass(eq=False)
class ScriptedEngineSession:
    adapter: ScriptedEngine
    config: EngineConfig
    engine_session_id: str = ""
    closed: bool = False
    sent: list[tuple[str, str]] = field(default_factory=list)
    interrupts: int = 0
    modes: list[str] = field(default_factory=list)
    # How many times the runtime ended a turn's own mode.
    turn_modes_ended: int = 0
    stopped_tasks: list[str] = field(default_factory=list)
    decisions: list[ToolDecision] = field(default_factory=list)
    # The sandbox and config of the session that adopted this (pre-started) engine.
    adopted: tuple[Sandbox, EngineConfig] | None = None
    mcp_unavailable: tuple[McpUnavailable, ...] = ()
    _queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    _interrupted: asyncio.Event = field(default_factory=asyncio.Event)
    _turn: asyncio.Task[None] | None = None

    @property
    def ended(self) -> bool:
        return self.closed

    async def outputs(self) -> AsyncIterator[EngineOutput]:
        while True:
            item = await self._queue.get()
            if isinstance(item, Exit):
                return
            if isinstance(item, Raise):
                raise EngineError(item.message)
            yield item

    def emit(self, *outputs: EngineOutput | Exit | Raise) -> None:
        for output in outputs:
            self._note(output)
            self._queue.put_nowait(output)

    async def send(self, text: str, permission_mode: str = "") -> None:
        if self.closed:
            raise EngineError("closed")
        if permission_mode in self.adapter.refused_modes:
            raise PermissionModeRefused(f"the engine refused permission mode {permission_mode!r}")
        self.sent.append((text, permission_mode))
        script = self.adapter.turns.pop(0) if self.adapter.turns else self.adapter.default_turn
        self._interrupted.clear()
        self._turn = asyncio.create_task(self.play(list(script)))

    async def play(self, script: list[Step]) -> None:
        for step in script:
            await asyncio.sleep(0)
            if isinstance(step, Ask):
                request = ToolRequest(
                    interaction_id=f"i-{uuid.uuid4().hex[:8]}",
                    tool_name=step.tool_name,
                    input=step.input,
                    tool_use_id=f"toolu-{len(self.decisions)}",
                )
                decision = await self.config.interactions.ask(request)
                self.decisions.append(decision)
                told = {"allow": decision.allow, "input": decision.updated_input, "message": decision.message}
                self.emit(EngineOutput("AssistantMessage", {"told": told}))
                if decision.interrupt:
                    await self._interrupted.wait()
            elif isinstance(step, UntilInterrupted):
                await self._interrupted.wait()
            elif isinstance(step, Forever):
                await asyncio.Event().wait()
            else:
                self.emit(step)

    def _note(self, output: Any) -> None:
        if isinstance(output, EngineOutput) and output.type_name == "SystemMessage":
            self.engine_session_id = output.payload.get("session_id", self.engine_session_id)

    async def interrupt(self) -> None:
        self.interrupts += 1
        if self.adapter.cooperative:
            self._interrupted.set()

    async def set_permission_mode(self, mode: str) -> None:
        self.modes.append(mode)

    async def end_turn_mode(self) -> None:
        self.turn_modes_ended += 1

    async def stop_task(self, task_id: str) -> None:
        self.stopped_tasks.append(task_id)

    async def server_info(self) -> dict[str, Any] | None:
        return self.adapter.server_info

    async def transcript(self) -> bytes:
        return self.adapter.transcript

    async def adopt(self, sandbox: Sandbox, config: EngineConfig) -> None:
        """Like the real adapter: only new conversations, only while running."""
        if self.closed:
            raise EngineError("closed")
        if config.resume_engine_session_id or config.transcript:
            raise EngineError("a pre-started engine cannot resume a conversation")
        if config.agent_config != self.config.agent_config:
            raise EngineError("the pre-started engine was launched with another agent configuration")
        self.adopted = (sandbox, dataclasses.replace(config, env=self.config.env))
        self.config = self.adopted[1]

    async def close(self) -> None:
        await asyncio.sleep(self.adapter.close_delay)  # a CLI that takes its time to exit
        self.closed = True
        self.adapter.events.append(("closed", self))
        if self._turn is not None:
            self._turn.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._turn
        self._queue.put_nowait(Exit())


class ScriptedEngine:
    """An engine adapter whose sessions play `turns` (one script per send), then `default_turn`."""

    kind = "fake"

    def __init__(
        self,
        default_turn: Sequence[Step] = (),
        *,
        turns: Sequence[Sequence[Step]] = (),
        fail_start: str = "",
        cooperative: bool = True,
        transcript: bytes = b"",
        server_info: dict[str, Any] | None = None,
        manifest: EngineManifest | None = MANIFEST,
        close_delay: float = 0.0,
        refused_modes: Sequence[str] = (),
        mcp_unavailable: Sequence[McpUnavailable] = (),
    ) -> None:
        self.default_turn = list(default_turn)
        # The agent's MCP servers each session says it was started without.
        self.mcp_unavailable = tuple(mcp_unavailable)
        # Modes a message may not ask for (as an engine's settings may forbid one).
        self.refused_modes = tuple(refused_modes)
        self.turns = [list(t) for t in turns]
        self.fail_start = fail_start
        self.cooperative = cooperative
        self.transcript = transcript
        self.server_info = server_info
        self.manifest = manifest
        self.close_delay = close_delay
        self.sessions: list[ScriptedEngineSession] = []
        # ("started" | "closed", session) in the order they happened.
        self.events: list[tuple[str, ScriptedEngineSession]] = []

    async def start(self, sandbox: Sandbox, driver: SandboxDriver, config: EngineConfig) -> ScriptedEngineSession:
        if self.fail_start:
            raise EngineError(self.fail_start)
        session = ScriptedEngineSession(
            self, config, engine_session_id=config.resume_engine_session_id, mcp_unavailable=self.mcp_unavailable
        )
        self.sessions.append(session)
        self.events.append(("started", session))
        return session

    @property
    def last(self) -> ScriptedEngineSession:
        return self.sessions[-1]


def init(session_id: str = "eng-1") -> EngineOutput:
    return EngineOutput("SystemMessage", {"subtype": "init", "session_id": session_id})


def assistant(text: str = "hello") -> EngineOutput:
    return EngineOutput("AssistantMessage", {"content": [{"type": "text", "text": text}], "model": "m"})


def result(session_id: str = "eng-1", subtype: str = "success") -> EngineOutput:
    return EngineOutput("ResultMessage", {"subtype": subtype, "is_error": False, "session_id": session_id})


def result_turn(session_id: str = "eng-1") -> list[Step]:
    return [init(session_id), assistant(), result(session_id)]


# -- harness -------------------------------------------------------------------

MODEL_ENV = model_env("http://127.0.0.1:9", "sk-test")


@dataclass(frozen=True)
class FixedModel:
    """The same model environment for every session, and no socket to mount."""

    environment: Mapping[str, str]
    socket: Path | None = None

    handed_over: dict[str, str] = field(default_factory=dict)

    def env(self, session_id: str) -> Mapping[str, str]:
        return self.environment

    def hand_over(self, owner: str, session_id: str) -> None:
        self.handed_over[owner] = session_id

    def forget(self, session_id: str) -> None:
        for owner in [owner for owner, user in self.handed_over.items() if user == session_id]:
            del self.handed_over[owner]


@dataclass
class Agent:
    db: Database
    state: AgentState
    outbox: Outbox
    runtimes: Runtimes
    applier: CommandApplier
    transcripts: TranscriptStore
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
        return [o for o in await self.outbox.pending({}, limit=10_000) if o.session_id == session_id]

    async def wait_outputs(self, session_id: str, count: int) -> list[pb.Output]:
        async with asyncio.timeout(5):
            while len(found := await self.outputs(session_id)) < count:
                await asyncio.sleep(0.01)
        return found

    async def wait_for(self, session_id: str, kind: str, count: int = 1, timeout: float = 5) -> list[pb.Output]:
        """Every output so far, once `count` outputs of `kind` are among them."""
        async with asyncio.timeout(timeout):
            while kinds(found := await self.outputs(session_id)).count(kind) < count:
                await asyncio.sleep(0.01)
        return found


@contextlib.asynccontextmanager
async def running_agent(
    path: Path,
    engine: ScriptedEngine | EngineAdapter,
    driver: DirectorySandboxDriver | SandboxDriver,
    limits: TurnLimits = TurnLimits(),
    retain_sandboxes: bool = False,
    model: ModelAccess | None = None,
    egress: EgressProxy | None = None,
    layers: LayerStore | None = None,
    progress: list[env_pb.BuildProgress] | None = None,
) -> AsyncIterator[Agent]:
    """An agent's runtimes and command applier on `path`'s state, with `engine` (a fake, or a real
    adapter with a real driver and `model`, a model route) until the block ends."""
    db = await Database.open(path / "agent.db")
    state = AgentState(db)
    outbox = Outbox(db)
    transcripts = TranscriptStore(path / "transcripts")
    await state.raise_lease_generation(1)
    runtimes = Runtimes(
        agent_id="agent-1",
        db=db,
        state=state,
        outbox=outbox,
        driver=driver,
        engines={engine.kind: engine},
        model=model if model is not None else FixedModel(MODEL_ENV),
        transcripts=transcripts,
        limits=limits,
        retain_sandboxes=retain_sandboxes,
        egress=egress,
        layers=layers,
    )
    builds = LayerBuilds(layers, "agent-1", (progress if progress is not None else []).append)
    applier = CommandApplier(db, state, runtimes, builds)
    await runtimes.recover()
    loops = [asyncio.create_task(runtimes.run()), asyncio.create_task(applier.run())]
    await runtimes.wait_running()
    await applier.wait_running()
    try:
        yield Agent(db, state, outbox, runtimes, applier, transcripts)
    finally:
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await db.close()


def start(engine: str = "fake", **fields: Any) -> dict:
    return {"start_runtime": pb.StartRuntime(engine=engine, permission_mode="default", model="m-1", **fields)}


def deliver(turn_id: str, text: str = "hi", permission_mode: str = "acceptEdits") -> dict:
    return {"deliver_input": pb.DeliverInput(turn_id=turn_id, text=text, permission_mode=permission_mode)}


def interrupt(turn_id: str, deadline_ms: int = 0) -> dict:
    return {"interrupt_turn": pb.InterruptTurn(turn_id=turn_id, deadline_ms=deadline_ms)}


def allow(interaction_id: str, updated_input_json: str = "") -> dict:
    answer = pb.AnswerInteraction(
        interaction_id=interaction_id, allow=pb.AnswerInteraction.Allow(updated_input_json=updated_input_json)
    )
    return {"answer_interaction": answer}


def deny(interaction_id: str, message: str) -> dict:
    answer = pb.AnswerInteraction(interaction_id=interaction_id, deny=pb.AnswerInteraction.Deny(message=message))
    return {"answer_interaction": answer}


def kinds(outputs: list[pb.Output]) -> list[str]:
    return [o.engine_message.type_name if o.HasField("engine_message") else o.WhichOneof("body") for o in outputs]


def after(outputs: list[pb.Output], kind: str) -> list[pb.Output]:
    """The outputs after the last one of `kind`."""
    index = max(i for i, k in enumerate(kinds(outputs)) if k == kind)
    return outputs[index + 1 :]


STARTED = ["startup_phase", "startup_phase", "startup_phase", "runtime_started"]
