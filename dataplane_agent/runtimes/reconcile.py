"""The reconciler: the sandboxes this agent holds against the sessions the control plane expects it to run.

`Placements` is the agent's view of the control plane's belief: the live
sessions a Welcome listed (as of its Hello), overridden by every StartRuntime
and DestroyRuntime applied after that Hello. `Inventory` lists the sandboxes
that exist (by labels, or by directory for the local driver). A `Reconciler`
pass, after every Welcome and periodically, compares them:

- a session recorded by an earlier agent process and still live is adopted
  (its sandbox is kept; its engine resumes with the next message), reported
  once as `SandboxReconciled{action: "adopted"}`;
- a recorded session that is no longer live has its engine closed and its
  sandbox destroyed; the record is forgotten, with a
  `SandboxReconciled{action: "destroyed"}`, only on a CONFIRMED verdict,
  otherwise it is kept and the next pass tries again;
- a live session whose sandbox is gone (removed behind the agent's back) has
  its runtime rebuilt at once if it is idle (`RuntimeLost`, a new sandbox,
  the engine resuming the conversation, `RuntimeStarted`), rather than at its
  next message; a rebuild that fails is left to that next message;
- a sandbox kept on purpose (`--retain-sandboxes`: recorded as retained when
  its session was released) is left alone, whatever its session;
- a sandbox no record names is destroyed unless its session is live (a
  StartRuntime redelivered after a crash re-opens it), and a warm-pool sandbox
  is destroyed unless the running pool owns it.

Nothing is destroyed before the control plane has said what is live, and no
session is touched while a command holds it (`HeldRuntimes.busy`).

Before any of that, at start, whatever an earlier agent process left running
in any sandbox of this agent (an engine, a workspace command) is ended, so
that every sandbox runs only what this process starts: one engine per
conversation; and the sandboxes kept on purpose are listed in the log, for an
operator to inspect and remove.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import structlog

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.sandboxes.base import (
    AGENT_LABEL,
    LAYER_BUILD_LABEL,
    POOL_LABEL,
    DestroyVerdict,
    ListedSandbox,
    ListingDriver,
    Sandbox,
    SandboxDriver,
)
from dataplane_agent.state import AgentState, SessionRecord

log = structlog.get_logger(__name__)

# When this agent process started: a layer-build sandbox older than that is a crashed build's.
_STARTED = time.time()

ADOPTED = "adopted"
DESTROYED = "destroyed"
RETAINED = "retained"
ADOPTED_REASON = "the data-plane agent restarted; the session is live, so its sandbox was kept"
NOT_LIVE_REASON = "the control plane does not expect this agent to run the session (deleted, archived, failed or moved)"
STALE_REASON = "a sandbox of the session that its runtime no longer uses"
VANISHED_REASON = "the sandbox disappeared (removed outside AstraBox)"


# -- what the control plane believes ------------------------------------------------


class Placements:
    """Which sessions this agent should run, as far as it knows.

    A Welcome's list is a snapshot taken after the Hello was sent; a session
    started or destroyed after that Hello is judged by that later command."""

    def __init__(self) -> None:
        self._live: frozenset[str] | None = None
        self._as_of = float("-inf")
        self._since: dict[str, tuple[float, bool]] = {}
        self.changed = asyncio.Event()

    @property
    def known(self) -> bool:
        """Whether the control plane has said anything yet."""
        return self._live is not None

    def believe(self, live: Iterable[str], as_of: float) -> None:
        """A Welcome's list of live sessions, computed after monotonic time `as_of`."""
        self._live, self._as_of = frozenset(live), as_of
        self._since = {sid: event for sid, event in self._since.items() if event[0] > as_of}
        self.changed.set()

    def placed(self, session_id: str) -> None:
        """A StartRuntime for the session is being applied."""
        self._since[session_id] = (time.monotonic(), True)

    def released(self, session_id: str) -> None:
        """The control plane destroyed the session's runtime (or its start failed)."""
        self._since[session_id] = (time.monotonic(), False)
        self.changed.set()

    def is_live(self, session_id: str) -> bool:
        """Whether the session should run here; True while nothing is known (destroy nothing blind)."""
        event = self._since.get(session_id)
        if event is not None and event[0] > self._as_of:
            return event[1]
        return self._live is None or session_id in self._live


# -- what exists ------------------------------------------------------------------


def pool_key(found: ListedSandbox) -> str:
    """The template key of a warm-pool sandbox; empty for a session's."""
    return found.labels.get(POOL_LABEL, "")


class Inventory(Protocol):
    """Lists the sandboxes of this agent that exist."""

    async def sandboxes(self) -> list[ListedSandbox]: ...


class LocalDirectoryInventory:
    """The local driver's sandboxes: `<root>/local-<id>/`, labelled by `run/sandbox.json`."""

    def __init__(self, root: Path, agent_id: str, inner_workspace: str = "/workspace") -> None:
        self._root = Path(root).resolve()
        self._agent_id = agent_id
        self._inner_workspace = inner_workspace

    async def sandboxes(self) -> list[ListedSandbox]:
        return await asyncio.to_thread(self._scan)

    def _scan(self) -> list[ListedSandbox]:
        found = []
        try:
            directories = sorted(p for p in self._root.iterdir() if p.name.startswith("local-") and p.is_dir())
        except FileNotFoundError:
            return []
        for directory in directories:
            record_path = directory / "run" / "sandbox.json"
            try:
                record = json.loads(record_path.read_text())
                created_at = record_path.stat().st_mtime
            except (OSError, ValueError):
                # Half made (the agent died inside create): ours, since it is under our root.
                record, created_at = {}, _mtime(directory)
            if not isinstance(record, dict) or record.get("agent_id", self._agent_id) != self._agent_id:
                continue
            sandbox_id = directory.name
            session_id = str(record.get("session_id") or sandbox_id.removeprefix("local-"))
            written = record.get("labels")
            labels = written if isinstance(written, dict) else {}
            sandbox = Sandbox(
                sandbox_id=sandbox_id,
                driver="local",
                session_id=session_id,
                workspace=directory / "workspace",
                inner_workspace=self._inner_workspace,
                home=directory / "home",
            )
            labels = {str(k): str(v) for k, v in labels.items()}
            # Whether something runs in it does not matter here (and a directory cannot tell).
            found.append(ListedSandbox(sandbox, labels, created_at, running=False))
        return found


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


# -- the runtimes it acts on --------------------------------------------------------


class HeldRuntimes(Protocol):
    """What the reconciler needs of `runtimes.Runtimes`."""

    def busy(self, session_id: str) -> bool:
        """A command is at work on the session right now."""

    def guarded(self, session_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        """Hold the session against commands while deciding and acting on it."""

    async def release(self, session_id: str, reason: str) -> DestroyVerdict | None:
        """Close the engine and destroy the sandbox of a recorded session (call while guarded);
        forget it with a SandboxReconciled output only when CONFIRMED; None when not recorded, or
        when it was kept on purpose instead (recorded as retained)."""

    async def recover_lost(self, session_id: str, reason: str) -> bool:
        """Rebuild the runtime of a recorded, idle session whose sandbox is gone (call while
        guarded); False when it is not idle or an earlier rebuild failed (its next input recovers it)."""


class PoolView(Protocol):
    """What the reconciler needs of `pool.WarmPool`."""

    def owns(self, found: ListedSandbox) -> bool: ...


@dataclass(frozen=True, slots=True)
class ReconcileSettings:
    """Seconds."""

    interval: float = 60.0
    # After a destruction that was not confirmed, try again this soon.
    retry: float = 10.0
    list_timeout: float = 30.0
    destroy_timeout: float = 60.0
    # For ending what an earlier agent process left running in one sandbox.
    end_timeout: float = 60.0


@dataclass(slots=True)
class Pass:
    """What one pass did."""

    adopted: list[str] = field(default_factory=list)
    destroyed: list[str] = field(default_factory=list)
    # Sandboxes whose destruction was not confirmed; kept and retried.
    unconfirmed: list[str] = field(default_factory=list)
    # Sandboxes of live sessions no record names yet (their StartRuntime re-opens them).
    kept: list[str] = field(default_factory=list)
    # Sessions whose vanished sandbox was rebuilt.
    recovered: list[str] = field(default_factory=list)
    # Sandboxes kept on purpose, left alone.
    retained: list[str] = field(default_factory=list)


class Reconciler:
    """Compares held sandboxes with the control plane's belief and settles the difference."""

    def __init__(
        self,
        *,
        state: AgentState,
        outbox: Outbox,
        driver: SandboxDriver,
        runtimes: HeldRuntimes,
        placements: Placements,
        inventory: Inventory,
        pool: PoolView | None = None,
        settings: ReconcileSettings = ReconcileSettings(),
    ) -> None:
        self._state = state
        self._outbox = outbox
        self._driver = driver
        self._runtimes = runtimes
        self._placements = placements
        self._inventory = inventory
        self._pool = pool
        self._settings = settings
        # Sessions recorded by an earlier agent process, not yet adopted or destroyed.
        self._inherited: set[str] | None = None
        # For the metrics: sandboxes the last pass found with no live session and could not destroy
        # (leaked until a later pass can), and every one a pass destroyed.
        self.leaked = 0
        self.reaped = 0
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Note what the previous agent process left recorded, and end whatever it left running in
        any sandbox of this agent (see `end_leftovers`). Call before anything of this process runs
        in a sandbox: before the relay connects, the warm pool starts or an engine is started."""
        records = await self._state.sessions()
        self._inherited = {r.session_id for r in records}
        for kept in await self._state.retained():
            log.warning(
                "sandbox_retained_kept",
                session_id=kept.session_id,
                sandbox_id=kept.sandbox.sandbox_id,
                workspace=str(kept.sandbox.workspace),
                reason=kept.reason,
                retained_at=kept.retained_at,
            )
        await self.end_leftovers([r.sandbox for r in records])

    async def end_leftovers(self, recorded: Iterable[Sandbox]) -> None:
        """End what an earlier agent process left running — engines (a `docker exec`'d CLI busy
        with a tool outlives its agent) and workspace commands — in `recorded` and every sandbox
        the inventory lists (one whose session was never recorded, its start cut short, is
        re-opened by the redelivered StartRuntime; a warm pool's is taken back), waiting until they
        are gone: from then on, each sandbox runs only what this process starts."""
        sandboxes = {s.sandbox_id: s for s in recorded}
        try:
            async with asyncio.timeout(self._settings.list_timeout):
                sandboxes.update((f.sandbox.sandbox_id, f.sandbox) for f in await self._inventory.sandboxes())
        except Exception as exc:  # the recorded ones are still ended
            log.warning("leftovers_not_listed", error=f"{type(exc).__name__}: {exc}")
        for kept in await self._state.retained():  # stopped on purpose, left as they are
            sandboxes.pop(kept.sandbox.sandbox_id, None)

        async def end(sandbox: Sandbox) -> None:
            try:
                async with asyncio.timeout(self._settings.end_timeout):
                    ended = await self._driver.end_leftovers(sandbox)
            except Exception as exc:
                log.warning("leftovers_not_ended", sandbox_id=sandbox.sandbox_id, error=f"{type(exc).__name__}: {exc}")
                return
            if ended:
                log.warning(
                    "leftovers_ended", session_id=sandbox.session_id, sandbox_id=sandbox.sandbox_id, processes=ended
                )

        await asyncio.gather(*(end(sandbox) for sandbox in sandboxes.values()))

    def on_welcome(self, welcome: pb.Welcome, hello_at: float) -> None:
        """The relay's Welcome listener: take the control plane's list and wake the loop."""
        if not welcome.HasField("live_sessions"):
            log.warning("welcome_without_live_sessions")
            return
        self._placements.believe(welcome.live_sessions.session_ids, hello_at)

    async def run(self) -> None:
        """Reconcile after every Welcome, every `interval`, and soon after an unconfirmed destruction."""
        wait = self._settings.interval
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._placements.changed.wait()
            self._placements.changed.clear()
            if not self._placements.known:
                wait = self._settings.interval
                continue
            try:
                done = await self.reconcile()
            except Exception:
                log.exception("reconcile_failed")
                done = Pass(unconfirmed=["?"])
            wait = self._settings.retry if done.unconfirmed else self._settings.interval

    async def reconcile(self) -> Pass:
        """One pass; returns what it did. Does nothing before the control plane has spoken."""
        done = Pass()
        if not self._placements.known:
            return done
        async with self._lock:
            if self._inherited is None:
                self._inherited = {r.session_id for r in await self._state.sessions()}
            records = {r.session_id: r for r in await self._state.sessions()}
            async with asyncio.timeout(self._settings.list_timeout):
                found = await self._inventory.sandboxes()
            present = {f.sandbox.sandbox_id for f in found}
            for record in records.values():
                await self._settle_recorded(record, present, done)
            recorded = {r.sandbox.sandbox_id for r in records.values()}
            retained = {r.sandbox.sandbox_id for r in await self._state.retained()}
            for item in found:
                if item.sandbox.sandbox_id in retained:
                    done.retained.append(item.sandbox.sandbox_id)
                elif item.sandbox.sandbox_id not in recorded:
                    await self._settle_unrecorded(item, records.keys(), done)
        self.leaked = len(done.unconfirmed)
        self.reaped += len(done.destroyed)
        if done.adopted or done.destroyed or done.unconfirmed or done.recovered:
            log.info(
                "reconciled",
                adopted=done.adopted,
                destroyed=done.destroyed,
                unconfirmed=done.unconfirmed,
                kept=done.kept,
                recovered=done.recovered,
            )
        return done

    async def _settle_recorded(self, record: SessionRecord, present: Collection[str], done: Pass) -> None:
        sid = record.session_id
        if self._runtimes.busy(sid):
            return
        if self._placements.is_live(sid):
            assert self._inherited is not None
            if sid in self._inherited:
                self._inherited.discard(sid)
                if record.sandbox.sandbox_id in present:
                    await self._report(sid, record.sandbox, ADOPTED, ADOPTED_REASON)
                    done.adopted.append(record.sandbox.sandbox_id)
            if record.sandbox.sandbox_id not in present:
                await self._recover(record, done)
            return
        async with self._runtimes.guarded(sid):
            if self._placements.is_live(sid):
                return  # started again while we waited
            verdict = await self._runtimes.release(sid, NOT_LIVE_REASON)
        if verdict is None:
            return
        if self._inherited is not None:
            self._inherited.discard(sid)
        if verdict is DestroyVerdict.CONFIRMED:
            done.destroyed.append(record.sandbox.sandbox_id)
        else:
            log.warning(
                "orphan_destroy_unconfirmed",
                session_id=sid,
                sandbox_id=record.sandbox.sandbox_id,
                verdict=verdict.value,
            )
            done.unconfirmed.append(record.sandbox.sandbox_id)

    async def _recover(self, record: SessionRecord, done: Pass) -> None:
        """Rebuild a live session's vanished sandbox, if it is still gone once the session is held
        (the listing is older than any command that ran since)."""
        sid = record.session_id
        async with self._runtimes.guarded(sid):
            current = await self._state.session(sid)
            if current is None or not self._placements.is_live(sid):
                return
            async with asyncio.timeout(self._settings.list_timeout):
                listed = {f.sandbox.sandbox_id for f in await self._inventory.sandboxes()}
            if current.sandbox.sandbox_id in listed:
                return
            log.warning("sandbox_vanished", session_id=sid, sandbox_id=current.sandbox.sandbox_id)
            try:
                recovered = await self._runtimes.recover_lost(sid, VANISHED_REASON)
            except Exception as exc:  # the next message tries again
                log.warning("sandbox_recovery_failed", session_id=sid, error=f"{type(exc).__name__}: {exc}")
                return
        if recovered:
            done.recovered.append(sid)

    async def _settle_unrecorded(self, item: ListedSandbox, recorded: Collection[str], done: Pass) -> None:
        sandbox = item.sandbox
        if item.labels.get(LAYER_BUILD_LABEL):
            # A layer's build (environments): its own end removes it; one made before this process
            # started is what a crash left, removed without a report (it is no session's).
            if item.created_at < _STARTED:
                await self._destroy(item, "an environment build an earlier agent process left", done, report=False)
            return
        if pool_key(item):
            if self._pool is not None and self._pool.owns(item):
                return
            await self._destroy(item, "a warm-pool sandbox no running pool owns", done, report=False)
            return
        sid = sandbox.session_id
        if self._runtimes.busy(sid):
            return
        if sid in recorded:
            await self._destroy(item, STALE_REASON, done, report=True)
            return
        if self._placements.is_live(sid):
            done.kept.append(sandbox.sandbox_id)
            return
        async with self._runtimes.guarded(sid):
            if self._placements.is_live(sid) or await self._state.session(sid) is not None:
                return
            await self._destroy(item, NOT_LIVE_REASON, done, report=True)

    async def _destroy(self, item: ListedSandbox, reason: str, done: Pass, *, report: bool) -> None:
        sandbox = item.sandbox
        try:
            async with asyncio.timeout(self._settings.destroy_timeout):  # not wait_for: see pool.py
                verdict = await self._driver.destroy(sandbox)
        except Exception as exc:
            log.warning("orphan_destroy_failed", sandbox_id=sandbox.sandbox_id, error=f"{type(exc).__name__}: {exc}")
            verdict = DestroyVerdict.UNCONFIRMED
        if verdict is not DestroyVerdict.CONFIRMED:
            log.warning("orphan_destroy_unconfirmed", sandbox_id=sandbox.sandbox_id, verdict=verdict.value)
            done.unconfirmed.append(sandbox.sandbox_id)
            return
        done.destroyed.append(sandbox.sandbox_id)
        if report:
            await self._report(sandbox.session_id, sandbox, DESTROYED, reason)
        else:
            log.info("sandbox_reconciled", action=DESTROYED, sandbox_id=sandbox.sandbox_id, reason=reason)

    async def _report(self, session_id: str, sandbox: Sandbox, action: str, reason: str) -> None:
        body = pb.SandboxReconciled(action=action, sandbox_id=sandbox.sandbox_id, driver=sandbox.driver, reason=reason)
        await self._outbox.append(session_id, "", body)
        log.info(
            "sandbox_reconciled", session_id=session_id, action=action, sandbox_id=sandbox.sandbox_id, reason=reason
        )


def inventory_for(driver: SandboxDriver, agent_id: str, local_root: Path) -> Inventory:
    """How to list the driver's sandboxes: by labels where it can, else the local driver's directories."""
    if callable(getattr(driver, "list_sandboxes", None)):
        return DriverInventory(driver, agent_id)  # type: ignore[arg-type]
    return LocalDirectoryInventory(local_root, agent_id)


class DriverInventory:
    """Sandboxes the driver lists by this agent's label."""

    def __init__(self, driver: ListingDriver, agent_id: str) -> None:
        self._driver = driver
        self._agent_id = agent_id

    async def sandboxes(self) -> list[ListedSandbox]:
        return await self._driver.list_sandboxes({AGENT_LABEL: self._agent_id})
