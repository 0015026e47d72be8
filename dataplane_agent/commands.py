"""Applying the control plane's commands: at most once per command id, fenced by the lease.

`CommandApplier.apply` decides a command's acknowledgement:
- a command id already applied is acknowledged again with its recorded outcome
  and no effect;
- a command issued under a lease generation older than the agent's current one
  is refused with FAILED_PRECONDITION (and acknowledged, so it is not
  redelivered); nothing is recorded, it can never become current again;
- otherwise the runtime operation runs, and the record that the command was
  applied commits in the same transaction as its effect.

Commands of one session apply one at a time in arrival order; different
sessions proceed concurrently. `submit` runs `apply` in the applier's own
TaskGroup and hands the acknowledgement to a callback (the relay's current
stream), so a slow sandbox start never holds up the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Protocol

import grpc
import structlog
from google.rpc import status_pb2

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.errors import CommandRefused
from dataplane_agent.runtimes import Receipt
from dataplane_agent.state import AgentState, Database

log = structlog.get_logger(__name__)

AckSink = Callable[[pb.CommandAck], None]


class RuntimeOps(Protocol):
    """What applying a command does (implemented by `runtimes.Runtimes`).

    Each operation commits `receipt` with its effect, or raises CommandRefused."""

    async def start_runtime(self, session_id: str, req: pb.StartRuntime, receipt: Receipt) -> None: ...

    async def deliver_input(self, session_id: str, req: pb.DeliverInput, receipt: Receipt) -> None: ...

    async def destroy_runtime(self, session_id: str, req: pb.DestroyRuntime, receipt: Receipt) -> None: ...


class CommandApplier:
    """Applies commands idempotently and reports their acknowledgements."""

    def __init__(self, db: Database, state: AgentState, runtimes: RuntimeOps) -> None:
        self._db = db
        self._state = state
        self._runtimes = runtimes
        self._tasks: asyncio.TaskGroup | None = None
        self._running = asyncio.Event()
        self._in_flight: set[str] = set()
        self._session_locks: dict[str, asyncio.Lock] = {}
        self._session_users: dict[str, int] = {}

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

        A command id already being applied is ignored here: the first copy's
        acknowledgement goes to whichever stream is current when it finishes."""
        if command.command_id in self._in_flight:
            log.info("command_already_in_progress", command_id=command.command_id, session_id=command.session_id)
            return
        if self._tasks is None:
            log.warning("command_dropped_shutting_down", command_id=command.command_id)
            return
        self._in_flight.add(command.command_id)
        self._tasks.create_task(self._apply_and_reply(command, reply))

    async def _apply_and_reply(self, command: pb.Command, reply: AckSink) -> None:
        try:
            ack = await self.apply(command)
        except Exception:
            # Not acknowledged: the control plane redelivers it after a reconnect.
            log.exception("command_failed", command_id=command.command_id, session_id=command.session_id)
            return
        finally:
            self._in_flight.discard(command.command_id)
        reply(ack)

    async def apply(self, command: pb.Command) -> pb.CommandAck:
        """Apply one command (unless already applied or stale); return its acknowledgement."""
        bound = log.bind(command_id=command.command_id, command_seq=command.command_seq, session_id=command.session_id)
        async with self._session_lock(command.session_id):
            outcome = await self._state.applied(command.command_id)
            if outcome is not None:
                bound.info("command_already_applied")
                return _ack(command, outcome.code, outcome.message)
            current = await self._state.lease_generation()
            if command.lease_generation < current:
                bound.warning("command_stale_lease", lease_generation=command.lease_generation, current=current)
                return _ack(
                    command,
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"command issued under lease generation {command.lease_generation}; current is {current}",
                )
            try:
                await self._dispatch(command)
            except CommandRefused as refused:
                bound.info("command_refused", code=refused.code.name, reason=refused.message)
                if refused.final:
                    await self._db.write(self._receipt(command, refused.code, refused.message))
                return _ack(command, refused.code, refused.message)
            bound.info("command_applied", kind=command.WhichOneof("body"))
            return _ack(command, grpc.StatusCode.OK, "")

    async def _dispatch(self, command: pb.Command) -> None:
        if not command.command_id or not command.session_id:
            raise CommandRefused(grpc.StatusCode.INVALID_ARGUMENT, "a command needs a command_id and a session_id")
        receipt = self._receipt(command, grpc.StatusCode.OK, "")
        kind = command.WhichOneof("body")
        if kind == "start_runtime":
            await self._runtimes.start_runtime(command.session_id, command.start_runtime, receipt)
        elif kind == "deliver_input":
            await self._runtimes.deliver_input(command.session_id, command.deliver_input, receipt)
        elif kind == "destroy_runtime":
            await self._runtimes.destroy_runtime(command.session_id, command.destroy_runtime, receipt)
        else:
            raise CommandRefused(grpc.StatusCode.UNIMPLEMENTED, f"this agent does not know command kind {kind!r}")

    def _receipt(self, command: pb.Command, code: grpc.StatusCode, message: str) -> Receipt:
        return lambda c: self._state.mark_applied_tx(c, command.command_id, command.command_seq, code, message)

    @contextlib.asynccontextmanager
    async def _session_lock(self, session_id: str) -> AsyncIterator[None]:
        """Serialise one session's commands; the lock is dropped when nobody uses it."""
        lock = self._session_locks.setdefault(session_id, asyncio.Lock())
        self._session_users[session_id] = self._session_users.get(session_id, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._session_users[session_id] -= 1
            if self._session_users[session_id] == 0:
                del self._session_users[session_id]
                del self._session_locks[session_id]


def _ack(command: pb.Command, code: grpc.StatusCode, message: str) -> pb.CommandAck:
    ack = pb.CommandAck(command_seq=command.command_seq, command_id=command.command_id)
    if code is not grpc.StatusCode.OK:
        ack.error.CopyFrom(status_pb2.Status(code=code.value[0], message=message))
    return ack
