"""What a round records as it goes: faults, sessions, turns, watchers and what clients were told.

Times are `time.monotonic()` of the chaos process unless named `*_wall`
(journal times are compared with wall-clock fault windows).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Fault:
    kind: str
    target: str
    start: float
    start_wall: float
    end: float = 0.0
    end_wall: float = 0.0
    detail: str = ""
    # Whether this fault may make an agent's lease lapse (its stream or process was hit, or the
    # database or a replica it depends on was down).
    excuses_lapse_of: frozenset[str] = frozenset()
    # An agent kill: what the killed agent had started on the host and still ran before it restarted.
    left_on_host: list[str] = field(default_factory=list)

    def finish(self, detail: str = "") -> None:
        self.end, self.end_wall = time.monotonic(), time.time()
        if detail:
            self.detail = detail


@dataclass
class Turn:
    session_id: str
    turn_id: str
    client_message_id: str
    text: str
    script: str
    permission_mode: str
    accepted_at: float
    accepted_seq: int
    ended_at: float | None = None
    outcome: str | None = None


@dataclass
class WatcherLog:
    """What one watching client received: each event's (seq, kind, turn_id), in arrival order."""

    session_id: str
    after_seq: int
    received: list[tuple[int, str, str]] = field(default_factory=list)
    # Things the stream itself did wrong (a seq twice, a gap, out of order), as they happened.
    anomalies: list[str] = field(default_factory=list)
    resumes: int = 0
    ended: str = ""
    # For a watcher still open when the round ended: the journal's last seq it was given time to reach.
    caught_up_to: int = 0

    @property
    def last_seq(self) -> int:
        return self.received[-1][0] if self.received else self.after_seq


@dataclass
class SessionLog:
    session_id: str
    permission_mode: str
    created_at: float
    turns: list[Turn] = field(default_factory=list)
    watchers: list[WatcherLog] = field(default_factory=list)
    # "archived" or "deleted" once the driver (or a fault) released it; with whether a turn was open.
    released: str = ""
    released_during_turn: bool = False
    interactions_answered: int = 0


@dataclass
class ClientErrors:
    """Every error a client call or watch saw, by (call, code, reason); and the ones a client must
    never see (UNKNOWN, INTERNAL), each with its message."""

    counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    forbidden: list[tuple[str, str, str, str]] = field(default_factory=list)  # (call, code, message, session)
    # NO_AGENT_AVAILABLE answered while every agent ran and none was hit by a fault.
    refused_with_agents_up: list[tuple[str, str]] = field(default_factory=list)  # (message, detail)


@dataclass
class Round:
    """Everything recorded in one round."""

    seed: int
    faults: list[Fault] = field(default_factory=list)
    sessions: dict[str, SessionLog] = field(default_factory=dict)
    errors: ClientErrors = field(default_factory=ClientErrors)
    started: float = field(default_factory=time.monotonic)
    faults_stopped: float = 0.0
    settled: float = 0.0

    def turns(self) -> list[Turn]:
        return [turn for session in self.sessions.values() for turn in session.turns]
