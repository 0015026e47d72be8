"""Data-plane agents: their leases, the engines they declared, placement, and the commands queued for them.

Commands are rows in `agent_commands`, numbered per agent in the transaction
that enqueues them, delivered in order until the agent acknowledges them.
Whichever replica holds the agent's stream is woken through the live tail.

Placement: an agent's capacity (its Hello's) is how many live runtimes it runs
at once. A session occupies a slot while it is creating, while a turn is in
progress (including a runtime being started again for it) and while it is
ready with its runtime running; an archived, deleted or failed session, one
stopped while idle and one whose runtime was lost free their slot
(`store.agents.OCCUPYING`). A cordoned or draining agent (`controlplane.drains`) takes no new
session: placement skips it, and rechecks under the agent's row lock, so a cordon racing a placement
either sees the session placed (and the drain moves it once idle) or keeps it off. When every live
agent that runs the engine is cordoned the answer is AgentsCordoned (FAILED_PRECONDITION). A session is placed on the live agent with the
most free slots (the project's own first), whose row it locks and recounts,
so concurrent placements on any replica never exceed a capacity. When live
agents run the engine but all are full the answer is CapacityExhausted
(RESOURCE_EXHAUSTED); NoAgentAvailable only when none runs it. A session
stopped while idle restarts in place on its agent (which keeps its files), so
it needs a slot there: when that agent is full its message fails with the
same reason rather than running past the capacity, and is not moved to
another agent (which would lose its workspace).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane import store, validation
from controlplane.engines import EngineManifest
from controlplane.errors import (
    AgentsCordoned,
    CapacityExhausted,
    DedicatedHostsUnavailable,
    InvalidArgument,
    IsolationUnavailable,
    NoAgentAvailable,
)
from controlplane.identity import store as identity_store
from controlplane.journal import JournalTransaction
from serverkit import tracing

# How often `place` tries another agent when the one it picked was filled by a concurrent placement.
_PLACE_ATTEMPTS = 8


def _agents(count: int) -> str:
    return f"{count} agent{'s' if count != 1 else ''}"


class _Full(Exception):
    """The agent picked for a placement turned out full once its row was locked."""


async def _has_room(conn: asyncpg.Connection, agent_id: str) -> bool:
    load = await store.agents.open_load(conn, agent_id)
    return load is not None and load[1] < load[0]


def _dedicated_load(engine: str, agents: int, capacity: int, live: int) -> str:
    if agents == 0:
        return f"none of them that can run {engine} is connected and uncordoned"
    return f"all are full ({_agents(agents)}, {live} of {capacity} live runtimes)"


def agent_key(agent_id: str) -> str:
    """The live-tail key that wakes the stream of `agent_id`."""
    return f"agent:{agent_id}"


@dataclass(frozen=True, slots=True)
class AgentHello:
    agent_id: str
    instance_id: str
    drivers: Sequence[str]
    # What each engine the agent runs can do (the engines offered are these kinds).
    engines: Sequence[EngineManifest]
    capacity: int
    # The newest output_seq the agent holds, per session.
    sessions: Mapping[str, int]
    # The agent's release (Hello.agent_version); empty from an agent older than that field.
    version: str = ""
    # The project its join token dedicated it to (identity.agent_admission); None: the shared pool.
    project_id: uuid.UUID | None = None
    # How its sandboxes are isolated (Hello.isolation): "gvisor", "container", "bubblewrap"; empty: not said.
    isolation: str = ""


@dataclass(frozen=True, slots=True)
class Lease:
    generation: int
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class QueuedCommand:
    command_seq: int
    command_id: str
    session_id: str
    body: bytes  # a serialized runner.v1.Command without seq and lease


class Agents:
    def __init__(self, pool: asyncpg.Pool, lease_ttl: timedelta) -> None:
        self._pool = pool
        self._ttl = lease_ttl

    async def register(self, hello: AgentHello) -> Lease:
        """Grant a new lease; its generation fences commands of older streams. Heartbeats renew it
        (`controlplane.leases`)."""
        row = await store.agents.register(
            self._pool,
            hello.agent_id,
            self._ttl,
            hello.drivers,
            [m.kind for m in hello.engines],
            {m.kind: m.to_json() for m in hello.engines},
            hello.capacity,
            hello.instance_id,
            hello.version,
            hello.project_id,
            hello.isolation,
        )
        return Lease(row["generation"], row["lease_expires_at"])

    async def engine_manifest(
        self, engine: str, agent_id: str = "", conn: asyncpg.Connection | None = None
    ) -> EngineManifest:
        """The manifest requests for `engine` are validated against: as `agent_id` (a session's
        agent) declared it, else as the live agent that connected last did, else as any agent
        did (placing on it then fails: NoAgentAvailable). An engine no agent declared is an
        InvalidArgument while agents running others are connected, else NoAgentAvailable."""
        db = conn or self._pool
        value = await store.agents.engine_manifest(db, engine, agent_id)
        if value is not None:
            return EngineManifest.from_json(engine, value)
        running = await store.agents.live_engines(db)
        if running:
            raise InvalidArgument(
                "engine", f"unknown engine {validation.echo(engine)}; connected agents run: {', '.join(running)}"
            )
        raise NoAgentAvailable(f"no connected data-plane agent can run {engine}; start one with `astrabox agent`")

    async def declared_manifests(self, conn: asyncpg.Connection | None = None) -> dict[str, EngineManifest]:
        """The manifest of every engine an agent declared, by kind, each as `engine_manifest` picks it
        (agent definitions are checked against these: `controlplane.agent_definitions`)."""
        found = await store.agents.declared_manifests(conn or self._pool)
        return {kind: EngineManifest.from_json(kind, value) for kind, value in found.items()}

    async def mark_held_runtimes(self, agent_id: str, session_ids: Sequence[str]) -> None:
        """An agent that reconnected still holds these sessions' runtimes."""
        await store.sessions.mark_held_runtimes(self._pool, agent_id, session_ids)

    async def pick_for(
        self, engine: str, project_id: uuid.UUID | None, conn: asyncpg.Connection | None = None
    ) -> str | None:
        """The live agent that runs `engine` for the project with the most free capacity: the
        project's own agents first, then the shared pool.

        Inside a transaction, pass its connection: taking a second one from the
        pool while holding the first can exhaust the pool under load."""
        return await store.agents.pick_for(conn or self._pool, engine, project_id)

    async def place(
        self,
        conn: asyncpg.Connection,
        engine: str,
        project_id: uuid.UUID | None,
        binds_credentials: bool = False,
        isolation: str = "",
    ) -> str:
        """Claim a slot for a session on the live agent that runs `engine` for the project with the
        most free ones (`pick_for`), inside the transaction of `conn`, which keeps the agent's row
        locked until it ends. A session that `binds_credentials` of a project whose credential_hosts
        is "dedicated" goes only to the project's own agents (DedicatedHostsUnavailable when none has
        a free slot). Raises CapacityExhausted when live agents run the engine but all are full,
        NoAgentAvailable when none does. A session whose environment asks for an `isolation` ("gvisor")
        goes only to agents offering it: IsolationUnavailable when agents run the engine but none of
        them does."""
        dedicated = (
            binds_credentials
            and project_id is not None
            and await identity_store.credential_hosts(conn, project_id) == "dedicated"
        )
        for _ in range(_PLACE_ATTEMPTS):
            agent_id = await store.agents.pick_for(conn, engine, project_id, dedicated, isolation)
            if agent_id is None:
                break
            try:
                # A savepoint: an agent found full once locked (a concurrent placement took its last
                # slot) is unlocked again before another is tried, so that two placements never hold
                # each other's agents.
                async with conn.transaction():
                    if not await _has_room(conn, agent_id):
                        raise _Full
            except _Full:
                continue
            return agent_id
        agents, capacity, live = await store.agents.fleet_load(conn, engine, project_id, dedicated, isolation)
        if dedicated:
            raise DedicatedHostsUnavailable(
                f"the session binds credentials, and its project runs such sessions only on its dedicated hosts"
                f" (credential_hosts: dedicated): {_dedicated_load(engine, agents, capacity, live)}; free a slot,"
                " dedicate another agent (`astrabox hosts dedicate AGENT_ID --project PROJECT_ID`), or let the"
                " shared pool run them (`astrabox projects credential-hosts any`)",
                agents,
                capacity,
                live,
            )
        if agents == 0 and isolation and (await store.agents.fleet_load(conn, engine, project_id, dedicated))[0]:
            raise IsolationUnavailable(
                f"the session's environment asks for isolation {isolation!r}, and no connected data-plane agent"
                f" that can run {engine} offers it; start one whose sandboxes run under gVisor"
                " (`astrabox agent --driver docker --sandbox-runtime runsc`)",
                {"isolation": isolation},
            )
        if agents == 0 and (cordoned := await store.agents.cordoned_count(conn, engine, project_id, False, isolation)):
            raise AgentsCordoned(
                f"every connected data-plane agent that can run {engine} is cordoned or draining"
                f" ({_agents(cordoned)}); uncordon one (`astrabox hosts uncordon AGENT_ID`) or start another"
                " agent (`astrabox agent`)",
                {"cordoned": str(cordoned)},
            )
        if agents == 0:
            raise NoAgentAvailable(f"no connected data-plane agent can run {engine}; start one with `astrabox agent`")
        raise CapacityExhausted(
            f"every connected data-plane agent that can run {engine} is full ({_agents(agents)}, {live} of"
            f" {capacity} live runtimes); archive or delete sessions you no longer need (a session stopped"
            " while idle holds no slot), or add capacity (`astrabox agent --capacity N`, or another agent)",
            agents,
            capacity,
            live,
        )

    async def claim_restart(self, conn: asyncpg.Connection, agent_id: str) -> None:
        """Claim a slot on `agent_id` for a session stopped there while idle, whose runtime starts
        again in place, inside the transaction of `conn` (which keeps the agent's row locked until it
        ends); CapacityExhausted when the agent has none free."""
        load = await store.agents.load(conn, agent_id)
        if load is None:
            raise LookupError(f"agent {agent_id} is not registered")
        capacity, live = load
        if live >= capacity:
            raise CapacityExhausted(
                f"the session's runtime was stopped while idle and can only start again on its agent"
                f" {agent_id}, which keeps its files, and that agent is full ({live} of {capacity} live"
                " runtimes); archive or delete a session you no longer need, or raise the agent's"
                " `--capacity`, then send the message again",
                1,
                capacity,
                live,
            )

    async def committed_cursors(self, agent_id: str, named: Mapping[str, int]) -> dict[str, int]:
        """Committed output_seq for every session the agent named or holds here."""
        cursors = dict.fromkeys(named, 0)
        cursors.update(await store.sessions.committed_cursors(self._pool, agent_id, list(named)))
        return cursors

    async def live_sessions(self, agent_id: str) -> list[str]:
        """Sessions placed on the agent whose runtime it should keep: neither
        released (deleted, archived) nor failed. The agent destroys the others."""
        return await store.sessions.live_on(self._pool, agent_id)

    async def enqueue(self, tx: JournalTransaction, agent_id: str, session_id: str, command: runner_pb2.Command) -> str:
        """Queue `command` for the agent inside `tx`; returns its command id."""
        command_id = command.command_id or str(uuid.uuid4())
        command_seq = await store.agents.next_command_seq(tx.conn, agent_id)
        if command_seq is None:
            raise LookupError(f"agent {agent_id} is not registered")
        body = runner_pb2.Command()
        body.CopyFrom(command)
        body.command_id = command_id
        body.session_id = session_id
        body.traceparent = body.traceparent or tracing.traceparent()
        await store.agent_commands.insert(
            tx.conn, agent_id, command_seq, command_id, session_id, body.SerializeToString()
        )
        tx.wake(agent_key(agent_id), command_seq)
        return command_id

    async def unacked(self, agent_id: str, after_seq: int, limit: int = 100) -> list[QueuedCommand]:
        rows = await store.agent_commands.unacked(self._pool, agent_id, after_seq, limit)
        return [QueuedCommand(r["command_seq"], r["command_id"], r["session_id"], bytes(r["body"])) for r in rows]
