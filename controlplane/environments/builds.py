"""BuildEnvironment: an environment version's layer built on agents ahead of its sessions.

Each agent asked (one, or every live one) is queued a BuildLayer command, durable like any other
(an agent that reconnects gets it again); the agent builds through the same store its sessions'
starts use and acknowledges the outcome. While it builds it sends BuildProgress on its stream,
which the replica holding the stream publishes in-process (`BuildProgressHub`) to the callers
waiting on that build digest. A caller sees each agent's steps until READY or FAILED; an agent's
acknowledgement is the fallback, read every ACK_POLL seconds, so a lost progress message (a
stream cut mid-build, an agent on another replica: progress does not cross replicas) still ends
with the agent's outcome, without its steps. Cancelling the call cancels no build."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence

import asyncpg

from astrabox.environments.v1 import environment_pb2 as epb
from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane import store
from controlplane.agents import Agents
from controlplane.errors import AgentNotConnected, NoAgentAvailable
from controlplane.journal import Journal
from serverkit.waits import bounded

# The session_id of commands about no session (agent_commands.session_id is NOT NULL).
NO_SESSION = "00000000-0000-0000-0000-000000000000"
# How often a caller's pending agents' acknowledgements are read.
ACK_POLL = 1.0
# Progress messages kept for one slow caller; older ones are dropped (progress only).
_QUEUE_SIZE = 256
_DONE = (epb.BUILD_STATE_READY, epb.BUILD_STATE_FAILED)


class BuildProgressHub:
    """Progress of layer builds, from the agent streams this replica holds to its waiting callers."""

    def __init__(self) -> None:
        self._subscribers: dict[str, set[asyncio.Queue[epb.BuildProgress]]] = {}

    @contextlib.contextmanager
    def subscribe(self, build_digest: str) -> Iterator[asyncio.Queue[epb.BuildProgress]]:
        queue: asyncio.Queue[epb.BuildProgress] = asyncio.Queue(_QUEUE_SIZE)
        self._subscribers.setdefault(build_digest, set()).add(queue)
        try:
            yield queue
        finally:
            waiting = self._subscribers.get(build_digest, set())
            waiting.discard(queue)
            if not waiting:
                self._subscribers.pop(build_digest, None)

    def publish(self, agent_id: str, progress: epb.BuildProgress) -> None:
        """Hand `progress` from agent `agent_id`'s stream to those waiting: the stream's own agent id
        is the one reported, whatever the message says."""
        reported = epb.BuildProgress()
        reported.CopyFrom(progress)
        reported.agent_id = agent_id
        reported.error = reported.error[:4096]
        reported.message = reported.message[:1024]
        for queue in self._subscribers.get(progress.build_digest, ()):
            if queue.full():
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
            queue.put_nowait(reported)


class EnvironmentBuilds:
    """Queues BuildLayer commands and follows them to their end."""

    def __init__(self, pool: asyncpg.Pool, journal: Journal, agents: Agents, hub: BuildProgressHub) -> None:
        self._pool = pool
        self._journal = journal
        self._agents = agents
        self._hub = hub

    async def targets(self, agent_id: str) -> list[str]:
        """The agents to build on: `agent_id` (AgentNotConnected unless it is live), or every live
        one (NoAgentAvailable when there is none)."""
        live = await store.agents.live_agents(self._pool)
        if agent_id:
            if agent_id not in live:
                raise AgentNotConnected(
                    f"agent {agent_id[:128]} is not connected: it cannot build now", {"agent_id": agent_id[:128]}
                )
            return [agent_id]
        if not live:
            raise NoAgentAvailable("no data-plane agent is connected to build the layer on")
        return live

    async def build(
        self, spec: epb.EnvironmentSpec, build_digest: str, agent_ids: Sequence[str]
    ) -> AsyncIterator[epb.BuildProgress]:
        """Each agent's progress, until every one is READY or FAILED."""
        with self._hub.subscribe(build_digest) as queue:
            command = runner_pb2.Command(build_layer=runner_pb2.BuildLayer(spec=spec, build_digest=build_digest))
            pending: dict[str, str] = {}
            async with self._journal.transaction() as tx:
                for agent_id in agent_ids:
                    pending[agent_id] = await self._agents.enqueue(tx, agent_id, NO_SESSION, command)
            while pending:
                try:
                    progress = await bounded(queue.get(), ACK_POLL)
                except TimeoutError:
                    for agent_id, command_id in list(pending.items()):
                        outcome = await store.agent_commands.outcome(self._pool, command_id)
                        if outcome is not None:
                            del pending[agent_id]
                            yield _from_ack(agent_id, build_digest, outcome)
                    continue
                if progress.agent_id not in pending:
                    continue
                yield progress
                if progress.state in _DONE:
                    del pending[progress.agent_id]


def _from_ack(agent_id: str, build_digest: str, error: str) -> epb.BuildProgress:
    """An agent's outcome told by its acknowledgement (its steps were not seen here)."""
    progress = epb.BuildProgress(
        agent_id=agent_id,
        build_digest=build_digest,
        state=epb.BUILD_STATE_FAILED if error else epb.BUILD_STATE_READY,
        phase="failed" if error else "ready",
        percent=0 if error else 100,
        error=error[:4096],
    )
    progress.time.GetCurrentTime()
    return progress
