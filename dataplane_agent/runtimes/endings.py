"""How a session's runtime ends here: stopped idle, stopped over its disk limit, destroyed,
retained, or released by the reconciler.

`RuntimeEndings` does these for `runtimes.Runtimes`: an idle stop closes the engine and stops the
sandbox, keeping its files (RuntimeStopped; the next input starts both again); a destruction
closes the engine, settling its turns, and destroys the sandbox, the session forgotten only once
the driver confirms it; with `retain_sandboxes` the sandbox is stopped and recorded as retained
instead, for inspection. Each commits its report with the command's receipt.
"""

from __future__ import annotations

import functools
import sqlite3

import grpc
import structlog

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.errors import CommandRefused, DestroyNotDone
from dataplane_agent.keyed_locks import KeyedLocks
from dataplane_agent.runtimes.disk_limit import OverLimit
from dataplane_agent.runtimes.held import Held
from dataplane_agent.runtimes.reconcile import DESTROYED, RETAINED
from dataplane_agent.sandboxes.base import DestroyVerdict
from dataplane_agent.state import SessionRecord
from dataplane_agent.state_database import Receipt, in_order
from dataplane_agent.turns.session import describe

log = structlog.get_logger(__name__)


def _no_receipt(c: sqlite3.Connection) -> None:
    """A receipt for work no command asked for."""


class RuntimeEndings:
    """Stops, destroys, retains and releases the runtimes of `Runtimes`' sessions; `rebuild_failed`
    is the sessions whose rebuild failed, `guards` their guards."""

    def __init__(
        self,
        held: Held,
        *,
        retain_sandboxes: bool,
        guards: KeyedLocks,
        rebuild_failed: set[str],
    ) -> None:
        self._held = held
        self._retain = retain_sandboxes
        self._guards = guards
        self._rebuild_failed = rebuild_failed

    async def stop_runtime(self, session_id: str, req: pb.StopRuntime, receipt: Receipt) -> None:
        """Close an idle session's engine and stop its sandbox, keeping its files; a session that is
        busy here (a turn runs, an input waits) is left alone. The next input starts both again."""
        async with self._guards.hold(session_id):
            record = await self._held.state.session(session_id)
            if record is None:  # nothing held
                await self._held.db.write(receipt)
                return
            turns = self._held.sessions.get(session_id)
            stop = functools.partial(self._stopped, record, req.reason, receipt)
            if turns is None:  # no engine since the agent started: only the sandbox to stop
                await stop()
            elif not await turns.stop_idle(stop):
                log.info("runtime_stop_skipped", session_id=session_id, reason="the session is busy on the agent")
                await self._held.db.write(receipt)
                return
            self._held.metrics.idle_stops.inc()

    async def _stopped(self, record: SessionRecord, reason: str, receipt: Receipt) -> None:
        """Stop the sandbox (its engine is closed) and report it, with the command's receipt."""
        try:
            await self._held.launcher.stop(record.sandbox)
        except Exception as exc:
            raise CommandRefused(
                grpc.StatusCode.UNAVAILABLE, f"the sandbox could not be stopped: {describe(exc)}", final=False
            ) from exc
        body = pb.RuntimeStopped(reason=reason, sandbox_id=record.sandbox.sandbox_id)
        await self._held.db.write(
            in_order(lambda c: self._held.outbox.append_tx(c, record.session_id, "", body), receipt)
        )
        log.info("runtime_stopped", session_id=record.session_id, sandbox_id=record.sandbox.sandbox_id, reason=reason)

    async def stop_over_limit(self, found: OverLimit) -> None:
        """End the session's turn and queued messages with `found.reason` and stop its runtime,
        keeping its files (RUNTIME_STOPPED); its next message starts the runtime again."""
        async with self._guards.hold(found.session_id):
            record = await self._held.state.session(found.session_id)
            turns = self._held.sessions.pop(found.session_id, None)
            if record is None or turns is None:
                return
            await turns.close(found.reason)
            await self._stopped(record, found.reason, _no_receipt)

    async def destroy_runtime(self, session_id: str, req: pb.DestroyRuntime, receipt: Receipt) -> pb.DestroyVerdict:
        """Stop the engine and destroy the sandbox (CONFIRMED), or keep it stopped with
        `retain_sandboxes` (RETAINED); the session is forgotten only then. DestroyNotDone, with the
        verdict, when the sandbox is still there."""
        self._held.placements.released(session_id)
        async with self._guards.hold(session_id):
            record = await self._held.state.session(session_id)
            if record is None:
                # Nothing held: already destroyed or retained (a sandbox no record names is the reconciler's).
                await self._held.db.write(receipt)
                return await self.released_verdict(session_id)
            reason = f"the runtime was destroyed ({req.reason})" if req.reason else "the runtime was destroyed"
            if self._retain:
                await self._keep(record, reason, req.reason, receipt)
                return pb.DESTROY_VERDICT_RETAINED
            verdict = await self._teardown(record, reason, receipt)
        if verdict is DestroyVerdict.CONFIRMED:
            return pb.DESTROY_VERDICT_CONFIRMED
        message = f"sandbox {record.sandbox.sandbox_id} destruction is {verdict.value}; the session is kept"
        if verdict is DestroyVerdict.REFUSED:
            raise DestroyNotDone(grpc.StatusCode.FAILED_PRECONDITION, message, pb.DESTROY_VERDICT_REFUSED)
        raise DestroyNotDone(grpc.StatusCode.UNAVAILABLE, message, pb.DESTROY_VERDICT_UNCONFIRMED)

    async def released_verdict(self, session_id: str) -> pb.DestroyVerdict:
        """What became of the sandbox of a session this agent no longer holds: RETAINED when it is
        recorded as kept, else CONFIRMED (destroyed, or never here)."""
        retained = await self._held.state.retained_session(session_id)
        return pb.DESTROY_VERDICT_RETAINED if retained is not None else pb.DESTROY_VERDICT_CONFIRMED

    async def release(self, session_id: str, reason: str) -> DestroyVerdict | None:
        """Destroy the runtime of a session the control plane no longer expects here (hold its guard).
        Forgotten, with a SandboxReconciled output, only when the destruction is confirmed. With
        `retain_sandboxes` it is kept instead (SandboxReconciled{action: "retained"}): None, as for
        a session not held."""
        record = await self._held.state.session(session_id)
        if record is None:
            return None
        sandbox = record.sandbox
        body = pb.SandboxReconciled(
            action=DESTROYED, sandbox_id=sandbox.sandbox_id, driver=sandbox.driver, reason=reason
        )

        def reported(c: sqlite3.Connection) -> None:
            self._held.outbox.append_tx(c, session_id, "", body)

        if self._retain:
            body.action = RETAINED
            await self._keep(record, f"the runtime was released ({reason})", reason, reported)
            return None
        return await self._teardown(record, f"the runtime was destroyed ({reason})", reported)

    async def _teardown(self, record: SessionRecord, reason: str, step: Receipt) -> DestroyVerdict:
        """Close the engine (settling its turns with `reason`) and destroy the sandbox; on a confirmed
        destruction forget the session, committing `step` with it."""
        session_id = record.session_id
        bound = log.bind(session_id=session_id)
        turns = self._held.sessions.get(session_id)
        if turns is not None:
            await turns.close(reason)
        verdict = await self._held.launcher.destroy(record.sandbox)
        if verdict is DestroyVerdict.CONFIRMED:
            await self._held.db.write(in_order(lambda c: self._held.state.delete_session_tx(c, session_id), step))
            self._held.sessions.pop(session_id, None)
            self._rebuild_failed.discard(session_id)
            self._held.launcher.forget(session_id)
            await self._held.transcripts.forget(session_id)
            bound.info("runtime_destroyed", sandbox_id=record.sandbox.sandbox_id)
        return verdict

    async def _keep(self, record: SessionRecord, reason: str, why: str, step: Receipt) -> None:
        """Close the engine (settling its turns with `reason`) and stop the sandbox, keeping it for
        inspection: the session is no longer held, and the sandbox is recorded as retained, with
        `step`, in one transaction. DestroyNotDone (UNCONFIRMED) when it cannot be stopped."""
        session_id, sandbox = record.session_id, record.sandbox
        turns = self._held.sessions.get(session_id)
        if turns is not None:
            await turns.close(reason)
        try:
            await self._held.launcher.stop(sandbox)
        except Exception as exc:  # whatever the driver raised: still there, tried again
            raise DestroyNotDone(
                grpc.StatusCode.UNAVAILABLE,
                f"sandbox {sandbox.sandbox_id} could not be stopped to be retained: {describe(exc)}",
                pb.DESTROY_VERDICT_UNCONFIRMED,
            ) from exc
        await self._held.db.write(in_order(lambda c: self._held.state.retain_session_tx(c, record, why), step))
        self._held.sessions.pop(session_id, None)
        self._rebuild_failed.discard(session_id)
        self._held.launcher.forget(session_id)
        await self._held.transcripts.forget(session_id)
        log.warning(
            "sandbox_retained", session_id=session_id, sandbox_id=sandbox.sandbox_id, workspace=str(sandbox.workspace)
        )
