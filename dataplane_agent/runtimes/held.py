"""What a session's runtime is made of here, shared by `Runtimes` and the parts that start
and end one (`starts`, `endings`).

One `Held` per agent, made by `Runtimes`: the database and the records its parts commit to,
the outbox they report in, the transcripts kept outside the sandboxes, the `Launcher`, what
the control plane asked for (`Placements`), the metrics, and the turns of the sessions held
(made by `Runtimes` only, which restarts their engines).
"""

from __future__ import annotations

from dataclasses import dataclass

from dataplane_agent.metrics import AgentMetrics
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.runtimes.launch import Launcher
from dataplane_agent.runtimes.reconcile import Placements
from dataplane_agent.state import AgentState
from dataplane_agent.state_database import Database
from dataplane_agent.turns.session import SessionTurns
from dataplane_agent.turns.transcripts import TranscriptStore


@dataclass(frozen=True, slots=True)
class Held:
    """The collaborators and the map of session turns a runtime's parts share."""

    db: Database
    state: AgentState
    outbox: Outbox
    transcripts: TranscriptStore
    launcher: Launcher
    placements: Placements
    metrics: AgentMetrics
    sessions: dict[str, SessionTurns]
