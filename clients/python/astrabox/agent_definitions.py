"""AgentService from a client: a project's agent definitions and their versions (`client.agents`).

    applied = await client.agents.apply("reviewer", spec)      # create, or a new version if it changed
    print(applied.agent.name, applied.version.version, applied.created)
    async for agent in client.agents.list():
        print(agent.name, agent.latest_version)
    agent, version = await client.agents.get("reviewer", version=2)
    await client.agents.archive("reviewer")

An agent definition (called an "agent" by the API and the command line; in this package "agents"
without more are the data-plane agents, the hosts) is a name and a series of immutable versions of
an `AgentSpec` (astrabox.agents.v1). The spec stays the protobuf message: it is the definition
itself, which `astrabox.agent_files` reads from and writes to YAML.

Every call has the client's deadline; reads, creates (with their request id), updates (a whole
definition: repeating one changes nothing more) and archives are retried while the server is away.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NamedTuple

import grpc

from astrabox._definition_calls import apply, pages
from astrabox.administration import Unary
from astrabox.agents.v1 import agent_pb2
from astrabox.agents.v1 import agent_service_pb2 as api
from astrabox.agents.v1 import agent_service_pb2_grpc as api_grpc

__all__ = ["AgentDefinition", "AgentDefinitions", "AgentVersion", "Applied"]


@dataclass(frozen=True, slots=True)
class AgentDefinition:
    """An agent definition as the server keeps it (`Agent` in agent.proto)."""

    agent_id: str
    name: str
    project_id: str
    latest_version: int
    """The newest version's number (versions count from 1)."""
    archived: bool
    """An archived agent starts no new session; its versions stay readable."""
    create_time: datetime
    update_time: datetime

    @classmethod
    def from_proto(cls, agent: agent_pb2.Agent) -> AgentDefinition:
        """From the `Agent` message the server sent."""
        return cls(
            agent.agent_id,
            agent.name,
            agent.project_id,
            agent.latest_version,
            agent.archived,
            agent.create_time.ToDatetime(tzinfo=UTC),
            agent.update_time.ToDatetime(tzinfo=UTC),
        )


@dataclass(frozen=True, slots=True)
class AgentVersion:
    """One immutable version of an agent's definition."""

    agent_id: str
    version: int
    spec: agent_pb2.AgentSpec
    spec_digest: str
    """SHA-256 of the spec's canonical form: equal definitions have equal digests."""
    create_time: datetime

    @classmethod
    def from_proto(cls, version: agent_pb2.AgentVersion) -> AgentVersion:
        """From the `AgentVersion` message the server sent."""
        return cls(
            version.agent_id,
            version.version,
            version.spec,
            version.spec_digest,
            version.create_time.ToDatetime(tzinfo=UTC),
        )


class Applied(NamedTuple):
    """What `AgentDefinitions.apply` (and `update`) did: the agent, its newest version, and whether
    that version was made now (False: the definition was equal to the newest one)."""

    agent: AgentDefinition
    version: AgentVersion
    created: bool

    @property
    def new_agent(self) -> bool:
        """Whether the agent itself was made now (its first version is the one made)."""
        return self.created and self.version.version == 1


class AgentDefinitions:
    """AgentService's calls; made by `AstraBoxClient.agents`, with the client's channel, key and retries.

    `agent` arguments take an agent's name or its id.
    """

    def __init__(self, channel: grpc.aio.Channel, unary: Unary) -> None:
        self._stub = api_grpc.AgentServiceStub(channel)  # type: ignore[no-untyped-call]
        self._unary = unary

    async def create(
        self, name: str, spec: agent_pb2.AgentSpec, *, request_id: str | None = None
    ) -> tuple[AgentDefinition, AgentVersion]:
        """A new agent `name` with `spec` as its version 1. Idempotent on `request_id` (a new uuid4 by
        default): a repeat answers the agent it made. ALREADY_EXISTS (AGENT_ALREADY_EXISTS) when the
        project has an agent of that name, archived or not."""
        request = api.CreateAgentRequest(request_id=request_id or str(uuid.uuid4()), name=name, spec=spec)
        response: api.CreateAgentResponse = await self._unary(self._stub.CreateAgent, request)
        return AgentDefinition.from_proto(response.agent), AgentVersion.from_proto(response.version)

    async def get(self, agent: str, version: int = 0) -> tuple[AgentDefinition, AgentVersion]:
        """The agent and one of its versions (0: the newest)."""
        request = api.GetAgentRequest(agent=agent, version=version)
        response: api.GetAgentResponse = await self._unary(self._stub.GetAgent, request)
        return AgentDefinition.from_proto(response.agent), AgentVersion.from_proto(response.version)

    async def list(self, *, archived: bool = False, page_size: int = 0) -> AsyncIterator[AgentDefinition]:
        """Every agent of the project by name (archived ones too with `archived`), page after page."""

        async def read(token: str) -> api.ListAgentsResponse:
            request = api.ListAgentsRequest(page_size=page_size, page_token=token, show_archived=archived)
            page: api.ListAgentsResponse = await self._unary(self._stub.ListAgents, request)
            return page

        async for item in pages(read, lambda page: page.agents):
            yield AgentDefinition.from_proto(item)

    async def update(self, agent: str, spec: agent_pb2.AgentSpec, *, expected_version: int = 0) -> Applied:
        """Gives the agent the definition `spec` (whole, not a patch): a new version, unless it equals
        the newest (then `created` is False). With `expected_version`, only if that is still the
        newest (else ABORTED, AGENT_VERSION_CONFLICT).

        Retried while the server is away: the second attempt of an update that was made finds the
        definition equal and answers the same version, `created` False."""
        request = api.UpdateAgentRequest(agent=agent, spec=spec, expected_version=expected_version)
        response: api.UpdateAgentResponse = await self._unary(self._stub.UpdateAgent, request)
        return Applied(
            AgentDefinition.from_proto(response.agent), AgentVersion.from_proto(response.version), response.created
        )

    async def apply(self, name: str, spec: agent_pb2.AgentSpec) -> Applied:
        """Makes the agent `name` be `spec`: creates it if the project has none of that name, else
        updates it (no new version when the definition is unchanged). Safe against a concurrent
        apply: an agent created in between (ALREADY_EXISTS) is updated instead."""

        async def create() -> Applied:
            made, version = await self.create(name, spec)
            return Applied(made, version, True)

        return await apply("AGENT", lambda: self.update(name, spec), create)

    async def versions(self, agent: str, *, page_size: int = 0) -> AsyncIterator[AgentVersion]:
        """Every version of the agent, newest first, page after page."""

        async def read(token: str) -> api.ListAgentVersionsResponse:
            request = api.ListAgentVersionsRequest(agent=agent, page_size=page_size, page_token=token)
            page: api.ListAgentVersionsResponse = await self._unary(self._stub.ListAgentVersions, request)
            return page

        async for item in pages(read, lambda page: page.versions):
            yield AgentVersion.from_proto(item)

    async def archive(self, agent: str) -> AgentDefinition:
        """Archives the agent: it starts no new session; running sessions go on, its versions stay readable."""
        response: api.ArchiveAgentResponse = await self._unary(
            self._stub.ArchiveAgent, api.ArchiveAgentRequest(agent=agent)
        )
        return AgentDefinition.from_proto(response.agent)
