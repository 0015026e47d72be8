"""Applying the control plane's commands: at most once per command id, fenced by the lease.

`CommandApplier.apply` decides a command's acknowledgement:
- a command id already applied is acknowledged again with its recorded outcome
  and no effect;
- a command issued under a lease generation older than the agent's current one
  (it came on a stream that has since been replaced) is neither applied nor
  acknowledged: the control plane sends every unacknowledged command again on
  each new stream, under the new lease, and that copy is the one applied. A
  copy that arrives while an older copy of the same command waits (behind a
  slower command of its session) is not a second command: the waiting copy
  takes the newer copy's lease, so it is applied, not lost;
- otherwise the runtime operation runs, and the record that the command was
  applied commits in the same transaction as its effect.

A DestroyRuntime's acknowledgement also says what became of the sandbox
(`destroy_verdict`): CONFIRMED or RETAINED (kept on purpose) when done,
REFUSED or UNCONFIRMED with the error when it is still there; a done one
acknowledged again says the same, from whether the sandbox is recorded as
retained.

Commands of one session apply one at a time in arrival order; different
sessions proceed concurrently. No operation waits for a turn: a DeliverInput
is applied once the input is queued, an InterruptTurn once the engine was
asked to stop, so an answer or an interrupt is never stuck behind a turn. `submit` runs `apply` in the applier's own
TaskGroup and hands the acknowledgement to a callback (the relay's current
stream), so a slow sandbox start never holds up the stream.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Protocol

import grpc
import structlog
from google.rpc import status_pb2

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.base import ToolDecision, ToolResult
from dataplane_agent.environments.build_command import LayerBuilds
from dataplane_agent.errors import CommandRefused, DestroyNotDone
from dataplane_agent.keyed_locks import KeyedLocks
from dataplane_agent.state import AgentState
from dataplane_agent.state_database import Database, Receipt
from serverkit import tracing

log = structlog.get_logger(__name__)

AckSink = Callable[[pb.CommandAck], None]


class RuntimeOps(Protocol):
    """What applying a command does (implemented by `runtimes.Runtimes`).

    Each operation commits `receipt` with its effect, or raises CommandRefused."""

    async def start_runtime(self, session_id: str, req: pb.StartRuntime, receipt: Receipt) -> None: ...

    async def deliver_input(self, session_id: str, req: pb.DeliverInput, receipt: Receipt) -> None: ...

    async def destroy_runtime(self, session_id: str, req: pb.DestroyRuntime, receipt: Receipt) -> pb.DestroyVerdict:
        """CONFIRMED or RETAINED; DestroyNotDone (a CommandRefused with the verdict) otherwise."""

    async def released_verdict(self, session_id: str) -> pb.DestroyVerdict:
        """CONFIRMED or RETAINED: what became of the sandbox of a session no longer held."""

    async def answer_interaction(
        self, session_id: str, interaction_id: str, decision: ToolDecision, receipt: Receipt
    ) -> None: ...

    async def interrupt_turn(self, session_id: str, req: pb.InterruptTurn, receipt: Receipt) -> None: ...

    async def set_permission_mode(self, session_id: str, req: pb.SetPermissionMode, receipt: Receipt) -> None: ...

    async def stop_task(self, session_id: str, req: pb.StopTask, receipt: Receipt) -> None: ...

    async def stop_runtime(self, session_id: str, req: pb.StopRuntime, receipt: Receipt) -> None: ...

    async def set_tool_grants(self, session_id: str, req: pb.SetToolGrants, receipt: Receipt) -> None: ...


class CommandApplier:
    """Applies commands idempotently and reports their acknowledgements."""

    def __init__(
        self, db: Database, state: AgentState, runtimes: RuntimeOps, builds: LayerBuilds | None = None
    ) -> None:
        self._builds = builds
        self._db = db
        self._state = state
        self._runtimes = runtimes
        self._tasks: asyncio.TaskGroup | None = None
        self._running = asyncio.Event()
        # The newest copy received of each command being applied, by command id.
        self._in_flight: dict[str, pb.Command] = {}
        # Serialises one session's commands.
        self._session_locks = KeyedLocks()

    async def run(self) -> None:
        """Own the tasks applying submitted commands until cancelled."""
        try:
            async with asyncio.TaskGroup() as tasks:
                self._tasks = tasks
                self._running.set()
                await asyncio.Event().wait()
        finally:
            self._tasks = None
            self._running.clear()

    async def wait_running(self) -> None:
        await self._running.wait()

    def submit(self, command: pb.Command, reply: AckSink) -> None:
        """Apply `command` in the background and pass its acknowledgement to `reply`.

        A command id already being applied is not applied twice: a newer copy (sent again on a new
        stream) lends the waiting copy its lease, and the acknowledgement goes to whichever stream
        is current when it finishes."""
        waiting = self._in_flight.get(command.command_id)
        if waiting is not None:
            if command.lease_generation > waiting.lease_generation:
                self._in_flight[command.command_id] = command
            log.info(
                "command_already_in_progress",
                command_id=command.command_id,
                session_id=command.session_id,
                lease_generation=command.lease_generation,
            )
            return
        if self._tasks is None:
            log.warning("command_dropped_shutting_down", command_id=command.command_id)
            return
        self._in_flight[command.command_id] = command
        self._tasks.create_task(self._apply_and_reply(command, reply))

    async def _apply_and_reply(self, command: pb.Command, reply: AckSink) -> None:
        try:
            ack = await self.apply(command)
        except Exception:
            # Not acknowledged: the control plane redelivers it after a reconnect.
            log.exception("command_failed", command_id=command.command_id, session_id=command.session_id)
            return
        finally:
            self._in_flight.pop(command.command_id, None)
        if ack is not None:
            reply(ack)

    async def apply(self, command: pb.Command) -> pb.CommandAck | None:
        """Apply one command unless already applied; return its acknowledgement, or None for a
        copy from a replaced stream (stale lease), which the control plane sends again."""
        bound = log.bind(command_id=command.command_id, command_seq=command.command_seq, session_id=command.session_id)
        # A layer build is about no session: builds of different layers go on side by side.
        key = f"layer:{command.build_layer.build_digest}" if command.HasField("build_layer") else command.session_id
        async with self._session_locks.hold(key):
            outcome = await self._state.applied(command.command_id)
            if outcome is not None:
                bound.info("command_already_applied")
                ack = _ack(command, outcome.code, outcome.message)
                if command.HasField("destroy_runtime") and outcome.code is grpc.StatusCode.OK:
                    ack.destroy_verdict = await self._runtimes.released_verdict(command.session_id)
                return ack
            newest = self._in_flight.get(command.command_id, command)
            lease = max(command.lease_generation, newest.lease_generation)
            current = await self._state.lease_generation()
            if lease < current:
                bound.warning("command_stale_lease_not_acknowledged", lease_generation=lease, current=current)
                return None
            kind = command.WhichOneof("body")
            # The agent's side of the call that issued the command (a session's startup, a turn's
            # delivery), in the caller's trace.
            span = tracing.tracer().start_as_current_span(
                f"agent {kind}",
                context=tracing.context_of(command.traceparent),
                attributes={"astrabox.session_id": command.session_id, "astrabox.command_id": command.command_id},
            )
            try:
                with span:
                    verdict = await self._dispatch(command)
                    bound.info("command_applied", kind=kind)
            except CommandRefused as refused:
                bound.info("command_refused", code=refused.code.name, reason=refused.message)
                if refused.final:
                    await self._db.write(self._receipt(command, refused.code, refused.message))
                ack = _ack(command, refused.code, refused.message)
                if isinstance(refused, DestroyNotDone):
                    ack.destroy_verdict = refused.verdict
                return ack
            ack = _ack(command, grpc.StatusCode.OK, "")
            ack.destroy_verdict = verdict
            return ack

    async def _dispatch(self, command: pb.Command) -> pb.DestroyVerdict:
        """Apply the command; a DestroyRuntime's verdict (UNSPECIFIED for every other kind)."""
        if not command.command_id or not command.session_id:
            raise CommandRefused(grpc.StatusCode.INVALID_ARGUMENT, "a command needs a command_id and a session_id")
        receipt = self._receipt(command, grpc.StatusCode.OK, "")
        kind = command.WhichOneof("body")
        if kind == "start_runtime":
            await self._runtimes.start_runtime(command.session_id, command.start_runtime, receipt)
        elif kind == "deliver_input":
            await self._runtimes.deliver_input(command.session_id, command.deliver_input, receipt)
        elif kind == "destroy_runtime":
            return await self._runtimes.destroy_runtime(command.session_id, command.destroy_runtime, receipt)
        elif kind == "answer_interaction":
            answer = command.answer_interaction
            if not answer.interaction_id:
                raise CommandRefused(grpc.StatusCode.INVALID_ARGUMENT, "AnswerInteraction needs an interaction_id")
            decision = tool_decision(answer)
            await self._runtimes.answer_interaction(command.session_id, answer.interaction_id, decision, receipt)
        elif kind == "interrupt_turn":
            if not command.interrupt_turn.turn_id:
                raise CommandRefused(grpc.StatusCode.INVALID_ARGUMENT, "InterruptTurn needs a turn_id")
            await self._runtimes.interrupt_turn(command.session_id, command.interrupt_turn, receipt)
        elif kind == "set_permission_mode":
            if not command.set_permission_mode.permission_mode:
                raise CommandRefused(grpc.StatusCode.INVALID_ARGUMENT, "SetPermissionMode needs a permission_mode")
            await self._runtimes.set_permission_mode(command.session_id, command.set_permission_mode, receipt)
        elif kind == "stop_task":
            if not command.stop_task.task_id:
                raise CommandRefused(grpc.StatusCode.INVALID_ARGUMENT, "StopTask needs a task_id")
            await self._runtimes.stop_task(command.session_id, command.stop_task, receipt)
        elif kind == "stop_runtime":
            await self._runtimes.stop_runtime(command.session_id, command.stop_runtime, receipt)
        elif kind == "set_tool_grants":
            await self._runtimes.set_tool_grants(command.session_id, command.set_tool_grants, receipt)
        elif kind == "build_layer" and self._builds is not None:
            await self._builds.build(command.build_layer)
            await self._db.write(receipt)
        else:
            raise CommandRefused(grpc.StatusCode.UNIMPLEMENTED, f"this agent does not know command kind {kind!r}")
        return pb.DESTROY_VERDICT_UNSPECIFIED

    def _receipt(self, command: pb.Command, code: grpc.StatusCode, message: str) -> Receipt:
        return lambda c: self._state.mark_applied_tx(c, command.command_id, command.command_seq, code, message)


DEFAULT_DENY_MESSAGE = "The user denied this tool use."


def tool_decision(answer: pb.AnswerInteraction) -> ToolDecision:
    """The engine-side decision an AnswerInteraction carries; INVALID_ARGUMENT when it carries none."""
    decision = answer.WhichOneof("decision")
    if decision == "allow":
        text = answer.allow.updated_input_json
        if not text:
            return ToolDecision(allow=True)
        try:
            updated = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CommandRefused(grpc.StatusCode.INVALID_ARGUMENT, f"updated_input_json is not JSON: {exc}") from exc
        if not isinstance(updated, dict):
            raise CommandRefused(grpc.StatusCode.INVALID_ARGUMENT, "updated_input_json must be a JSON object")
        return ToolDecision(allow=True, updated_input=updated)
    if decision == "deny":
        return ToolDecision(allow=False, message=answer.deny.message or DEFAULT_DENY_MESSAGE)
    if decision == "tool_result":
        return ToolDecision(
            allow=True, result=ToolResult(answer.tool_result.content, is_error=answer.tool_result.is_error)
        )
    raise CommandRefused(grpc.StatusCode.INVALID_ARGUMENT, "AnswerInteraction needs an allow, a deny or a tool_result")


def _ack(command: pb.Command, code: grpc.StatusCode, message: str) -> pb.CommandAck:
    ack = pb.CommandAck(command_seq=command.command_seq, command_id=command.command_id)
    if code is not grpc.StatusCode.OK:
        ack.error.CopyFrom(status_pb2.Status(code=code.value[0], message=message))
    return ack
