"""The users of a chaos round: sessions created, driven with the offline model's scripts, their
questions answered, sometimes interrupted, then archived or deleted; each one watched.

`--sessions` actors run side by side, each going through one session after another until the
round stops; the offline model's scripts are chosen so that turns run tools, ask questions, wait
for approvals, run long enough to be hit, start background tasks, and (with a per-message
permission mode) change what the engine runs with.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
import uuid
from collections.abc import Callable
from typing import Any

from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from astrabox.events import TURN_END_KINDS
from astrabox.sessionkernel.v1 import events_pb2
from chaos.calls import Calls
from chaos.records import Round, SessionLog, Turn, WatcherLog
from chaos.watchers import Watcher

# An actor that waits longer than this for a turn's end records it as stuck and leaves the session
# as it is (releasing it would settle the turn and hide what happened).
TURN_DEADLINE_S = 240.0
READY_DEADLINE_S = 240.0


def script(rng: random.Random) -> tuple[str, str]:
    """(kind, text) of one message; each text carries a marker of its own."""
    marker = f"m{uuid.uuid4().hex[:8]}"
    kind = rng.choices(["run", "steps", "sleep", "ask", "background", "hello"], weights=[30, 25, 15, 15, 8, 7], k=1)[0]
    text = {
        "run": f"run: echo {marker}",
        "steps": f"steps: {rng.randint(2, 6)}\n{marker}",
        "sleep": f"sleep: {rng.randint(2, 8)}\n{marker}",
        "ask": f"ask: Which colour for {marker}? red|blue",
        "background": f"background: sleep {rng.randint(1, 5)}; echo {marker}",
        "hello": f"Say hello ({marker})",
    }[kind]
    return kind, text


class Actor:
    """One user, going through sessions one after another."""

    def __init__(self, driver: Driver, index: int) -> None:
        self._driver = driver
        self._rng = random.Random(driver.rng.random())
        self.index = index
        self.session: SessionLog | None = None
        self._ended: dict[str, str] = {}
        self._changed = asyncio.Event()
        self._interactions: asyncio.Queue[events_pb2.SessionEvent] = asyncio.Queue()
        self._ready: str = ""  # "ready" or "failed" once the runtime started or could not
        self._watchers: list[tuple[Watcher, asyncio.Task[None]]] = []

    @property
    def turn_open(self) -> bool:
        return self.session is not None and any(t.turn_id not in self._ended for t in self.session.turns)

    async def run(self) -> None:
        while not self._driver.stopping.is_set():
            await self._lifetime()

    async def _lifetime(self) -> None:
        driver, rng = self._driver, self._rng
        mode = rng.choice(["default", "default", "bypassPermissions"])
        request_id = str(uuid.uuid4())
        try:
            created = await driver.calls(
                "CreateSession", "", lambda: driver.client.create_session(request_id=request_id, permission_mode=mode)
            )
        except AstraBoxError:
            await asyncio.sleep(1.0)
            return
        session = SessionLog(created.session_id, mode, time.monotonic())
        driver.round.sessions[session.session_id] = session
        self.session, self._ended, self._ready = session, {}, ""
        self._interactions = asyncio.Queue()
        self._watchers = []
        self._watch(0, primary=True)
        answering = asyncio.create_task(self._answer())
        try:
            await self._converse()
        finally:
            answering.cancel()
            await asyncio.gather(answering, return_exceptions=True)
            if session.released:
                await self._stop_watchers()
            else:  # still live at the end of the round: the driver stops them after the last checks
                driver.live_watchers.extend(self._watchers)
        self.session = None

    async def _stop_watchers(self) -> None:
        """A released session's watchers end once they have what the primary one saw (or soon after)."""
        primary = self._watchers[0][0].log
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(15.0):
                while any(w.log.last_seq < primary.last_seq for w, _ in self._watchers):
                    await asyncio.sleep(0.2)
        for watcher, task in self._watchers:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            watcher.log.ended = watcher.log.ended or "stopped after the session was released"

    async def _converse(self) -> None:
        driver, rng, session = self._driver, self._rng, self.session
        assert session is not None
        if not await self._until(lambda: bool(self._ready), READY_DEADLINE_S):
            return  # never ready: the checks judge it
        if self._ready == "failed":
            if not driver.stopping.is_set():
                await self.release("deleted")  # as a user would; its sandbox must go too
            return
        for index in range(rng.randint(2, 6)):
            if driver.stopping.is_set() or session.released:
                break
            if rng.random() < 0.25:  # a second watcher, resuming from somewhere in the middle
                last = max((t.accepted_seq for t in session.turns), default=1)
                self._watch(rng.randint(0, last))
            if not await self._send():
                break
            if rng.random() < 0.2 and index:
                continue  # the next message queues behind this one
            turn = session.turns[-1]
            if turn.script == "sleep" and rng.random() < 0.3:
                await asyncio.sleep(rng.uniform(1.0, 3.0))
                await self._interrupt()
            if not await self._turns_end():
                return
            if driver.idle_stop_after and rng.random() < 0.1:
                await self._pause(driver.idle_stop_after + rng.uniform(2.0, 8.0))  # long enough for an idle stop
            else:
                await self._pause(rng.uniform(0.0, 2.0))
        if not await self._turns_end():
            return
        if not driver.stopping.is_set() and not session.released:
            await self.release("archived" if rng.random() < 0.3 else "deleted")

    async def _send(self) -> bool:
        driver, session = self._driver, self.session
        assert session is not None
        kind, text = script(self._rng)
        # Now and then a message with a permission mode of its own, for its turn only.
        mode = "bypassPermissions" if session.permission_mode == "default" and self._rng.random() < 0.15 else ""
        message_id = str(uuid.uuid4())
        try:
            sent = await driver.calls(
                "SendMessage",
                session.session_id,
                lambda: driver.client.send_message(session.session_id, text, message_id, permission_mode=mode),
            )
        except AstraBoxError:
            return False  # released meanwhile, or the platform away for minutes (counted)
        session.turns.append(
            Turn(session.session_id, sent.turn_id, message_id, text, kind, mode, time.monotonic(), sent.seq)
        )
        return True

    async def _interrupt(self) -> None:
        driver, session = self._driver, self.session
        assert session is not None
        request_id = str(uuid.uuid4())
        with contextlib.suppress(AstraBoxError):
            await driver.calls(
                "InterruptTurn",
                session.session_id,
                lambda: driver.client.interrupt_turn(session.session_id, request_id),
            )

    async def release(self, how: str) -> None:
        """Archive or delete the session (also called by the faults, in the middle of a turn)."""
        driver, session = self._driver, self.session
        if session is None or session.released:
            return
        session.released, session.released_during_turn = how, self.turn_open
        request_id = str(uuid.uuid4())
        call = driver.client.archive_session if how == "archived" else driver.client.delete_session
        with contextlib.suppress(AstraBoxError):
            await driver.calls(
                f"{how[:-1].title()}Session", session.session_id, lambda: call(session.session_id, request_id)
            )

    async def _turns_end(self) -> bool:
        """Wait until every turn sent has ended; False (each open one recorded as stuck) after the deadline."""
        session = self.session
        assert session is not None
        if await self._until(lambda: not self.turn_open, self._driver.turn_deadline()):
            return True
        for turn in session.turns:
            if turn.turn_id not in self._ended:
                self._driver.stuck.append(turn)
        return False

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._driver.stopping.wait(), seconds)

    async def _until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 1.0))
        return True

    def _watch(self, after_seq: int, primary: bool = False) -> None:
        session = self.session
        assert session is not None
        log = WatcherLog(session.session_id, after_seq)
        session.watchers.append(log)
        driver = self._driver
        watcher = Watcher(driver.address, driver.api_key, log, driver.calls, self._on_event if primary else None)
        self._watchers.append((watcher, asyncio.create_task(watcher.run())))

    async def _on_event(self, event: events_pb2.SessionEvent) -> None:
        kind = event.WhichOneof("payload")
        session = self.session
        if kind in TURN_END_KINDS:
            self._ended[event.turn_id] = kind or ""
            if session is not None:
                for turn in session.turns:
                    if turn.turn_id == event.turn_id and turn.ended_at is None:
                        turn.ended_at, turn.outcome = time.monotonic(), kind
        elif kind == "runtime_ready":
            self._ready = self._ready or "ready"
        elif kind == "runtime_failed":
            self._ready = self._ready or "failed"
        elif kind == "interaction_requested":
            self._interactions.put_nowait(event)
        elif kind in ("session_archived", "session_deleted") and session is not None and not session.released:
            session.released = kind.removeprefix("session_")
        self._changed.set()

    async def _answer(self) -> None:
        """Answer every question as a user would: approve tools, pick the first option; some slowly."""
        driver, session = self._driver, self.session
        assert session is not None
        while True:
            event = await self._interactions.get()
            interaction = event.interaction_requested.interaction
            if self._rng.random() < 0.3:
                await asyncio.sleep(self._rng.uniform(0.5, 4.0))
            request_id = f"answer-{interaction.interaction_id}"
            if interaction.questions:
                answer: dict[str, Any] = {
                    "answers": {q.question: (q.options[0] if q.options else "yes") for q in interaction.questions}
                }
            else:
                answer = {"allow": True}
            respond = functools.partial(
                driver.client.respond_to_interaction,
                session.session_id,
                interaction.interaction_id,
                request_id=request_id,
                **answer,
            )
            try:
                await driver.calls("RespondToInteraction", session.session_id, respond)
                session.interactions_answered += 1
            except AstraBoxError:
                pass  # closed meanwhile (turn settled, session released): nothing to answer


class Driver:
    """The actors, their shared client and what they record."""

    def __init__(
        self,
        address: str,
        api_key: str,
        round: Round,
        rng: random.Random,
        sessions: int,
        idle_stop_after: float,
        capacity_free: Callable[[], bool],
    ) -> None:
        self.address, self.api_key, self.round, self.rng = address, api_key, round, rng
        self.idle_stop_after = idle_stop_after
        self.client = AstraBoxClient.connect(address, api_key=api_key, timeout=15.0)
        self.calls = Calls(round, capacity_free, self._free_capacity)
        self.actors = [Actor(self, index) for index in range(sessions)]
        # The watchers of the sessions still live when the round stopped, with their tasks.
        self.live_watchers: list[tuple[Watcher, asyncio.Task[None]]] = []
        self.stuck: list[Turn] = []
        self.stopping = asyncio.Event()
        # Once the round stops, open turns have until then to end (the settle deadline).
        self.settle_by: float | None = None

    def turn_deadline(self) -> float:
        """Seconds an actor waits for its open turns now."""
        if self.settle_by is None:
            return TURN_DEADLINE_S
        return max(0.0, min(TURN_DEADLINE_S, self.settle_by - time.monotonic()))

    def live_runtimes(self) -> int:
        """Sessions of this round that should hold a runtime: neither released nor failed to start."""
        return sum(1 for actor in self.actors if actor.session is not None and not actor.session.released)

    def with_open_turn(self) -> list[Actor]:
        return [actor for actor in self.actors if actor.turn_open and actor.session and not actor.session.released]

    async def run(self) -> None:
        """Until `stopping` is set: then every actor sends nothing more and waits for its open turns."""
        async with asyncio.TaskGroup() as tasks:
            for actor in self.actors:
                tasks.create_task(actor.run())

    async def _free_capacity(self) -> None:
        """Delete the oldest archived session, as a user refused for capacity would."""
        archived = [s for s in self.round.sessions.values() if s.released == "archived"]
        if not archived:
            return
        oldest = min(archived, key=lambda s: s.created_at)
        oldest.released = "deleted"
        request_id = str(uuid.uuid4())
        with contextlib.suppress(AstraBoxError):
            await self.client.delete_session(oldest.session_id, request_id=request_id)

    async def stop_watchers(self) -> None:
        for watcher, task in self.live_watchers:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            watcher.log.ended = watcher.log.ended or "stopped at the end of the round"

    async def close(self) -> None:
        await self.stop_watchers()
        await self.client.close()
