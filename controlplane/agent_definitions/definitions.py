"""A project's agent definitions: created, read, listed, changed (each change a new immutable
version) and archived; and resolved to the version a new session pins.

Every call takes the caller's project and reads and writes only its agents: another
project's agent answers exactly as one that does not exist. A change is one transaction on the
agent's locked row, so versions are numbered without gaps and nothing is half-stored: a create
refused at any step leaves no agent, an update refused leaves no version.

Idempotency. CreateAgent's request id is unique per project: a retry with the same name and an
equal definition returns the agent it made (with its first version), whatever happened to it
since; the same id with another name or definition is ALREADY_EXISTS, reason REQUEST_ID_REUSED,
as for CreateSession. UpdateAgent with a definition equal to the newest version's makes no
version (so it is idempotent, and its retry after a lost answer succeeds, whatever
`expected_version` it names).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg
import structlog

from astrabox.agents.v1 import agent_pb2
from controlplane import named_definitions, store, validation
from controlplane.agent_definitions import specs
from controlplane.agents import Agents
from controlplane.errors import (
    AgentDefinitionArchived,
    AgentDefinitionExists,
    AgentDefinitionNotFound,
    AgentVersionConflict,
    AgentVersionNotFound,
)
from controlplane.page_tokens import PageTokens

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class AgentRecord:
    agent_id: str
    project_id: uuid.UUID
    name: str
    latest_version: int
    archived: bool
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> AgentRecord:
        return cls(
            agent_id=str(row["agent_id"]),
            project_id=row["project_id"],
            name=row["name"],
            latest_version=row["latest_version"],
            archived=row["archived"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )


@dataclass(frozen=True, slots=True)
class VersionRecord:
    agent_id: str
    version: int
    # The definition (a copy of the stored one: changing it changes nothing stored).
    spec: agent_pb2.AgentSpec
    spec_digest: str
    created_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> VersionRecord:
        return cls(
            agent_id=str(row["agent_id"]),
            version=row["version"],
            spec=agent_pb2.AgentSpec.FromString(bytes(row["spec"])),
            spec_digest=row["spec_digest"],
            created_at=row["created_at"],
        )


@dataclass(frozen=True, slots=True)
class Updated:
    agent: AgentRecord
    # The newest version: the new one, or the unchanged newest when the definition was equal.
    version: VersionRecord
    created: bool


@dataclass(frozen=True, slots=True)
class ResolvedAgent:
    """The agent version a new session starts from (and pins)."""

    agent_id: str
    name: str
    version: int
    spec: agent_pb2.AgentSpec
    spec_digest: str


def agent_name(value: str) -> str:
    """A new agent's name (`named_definitions.new_name`)."""
    return named_definitions.new_name("agent", value)


def agent_ref(value: str, field: str = "agent") -> uuid.UUID | str:
    """What a request names an agent by: its id (a UUID) or its name."""
    return named_definitions.ref("agent", value, field)


KIND = named_definitions.Kind(
    name="agent",
    id_column="agent_id",
    log_name="agent_definition",
    definitions=store.agent_definitions,
    versions=store.agent_definition_versions,
    not_found=AgentDefinitionNotFound,
    version_not_found=AgentVersionNotFound,
    exists=AgentDefinitionExists,
    archived=AgentDefinitionArchived,
    conflict=AgentVersionConflict,
)


class AgentDefinitions:
    def __init__(self, pool: asyncpg.Pool, agents: Agents, page_tokens: PageTokens) -> None:
        self._pool = pool
        # Where the engines' manifests come from, which definitions are checked against.
        self._agents = agents
        self._definitions = named_definitions.Definitions(pool, page_tokens, KIND)

    def _storing(
        self, spec: agent_pb2.AgentSpec
    ) -> tuple[str, named_definitions.InsertVersion, named_definitions.CheckIn]:
        """The spec's digest, how a version of it is stored, and its check against the engines the
        agents declared (made only when a version is about to be stored)."""
        specs.check_shape(spec)
        form = specs.canonical(spec)
        digest = specs.digest(form)

        async def insert(conn: asyncpg.Connection, agent_id: uuid.UUID, number: int) -> asyncpg.Record:
            return await store.agent_definition_versions.insert(conn, agent_id, number, form, digest)

        async def check(conn: asyncpg.Connection) -> None:
            specs.check_against(spec, await self._agents.declared_manifests(conn))

        return digest, insert, check

    async def create(
        self, project_id: uuid.UUID, request_id: str, name: str, spec: agent_pb2.AgentSpec
    ) -> tuple[AgentRecord, VersionRecord]:
        """A new agent with `spec` as its version 1 (or, for a retry, the agent the request made)."""
        validation.client_id("request_id", request_id)
        agent_name(name)
        row, first = await self._definitions.create(project_id, request_id, name, *self._storing(spec))
        return AgentRecord.from_row(row), VersionRecord.from_row(first)

    async def get(self, project_id: uuid.UUID, ref: str, version: int = 0) -> tuple[AgentRecord, VersionRecord]:
        """The agent and one of its versions (0: the newest); archived agents too."""
        row, found = await self._definitions.read(
            project_id, agent_ref(ref), named_definitions.version("version", version)
        )
        return AgentRecord.from_row(row), VersionRecord.from_row(found)

    async def resolve(
        self,
        project_id: uuid.UUID,
        ref: str,
        version: int = 0,
        conn: asyncpg.Connection | None = None,
        fields: tuple[str, str] = ("agent", "agent_version"),
    ) -> ResolvedAgent:
        """The version (0: the newest) of the project's agent `ref` (its name or id) a new session
        starts from. AgentDefinitionNotFound, AgentVersionNotFound, or AgentDefinitionArchived:
        an archived agent starts no session. `fields` name the request's fields in a refusal."""
        row, found = await self._definitions.read(
            project_id, agent_ref(ref, fields[0]), named_definitions.version(fields[1], version), conn
        )
        agent, pinned = AgentRecord.from_row(row), VersionRecord.from_row(found)
        if agent.archived:
            raise AgentDefinitionArchived(agent.name, "starts no new session (its versions stay readable)")
        return ResolvedAgent(agent.agent_id, agent.name, pinned.version, pinned.spec, pinned.spec_digest)

    async def list_agents(
        self, project_id: uuid.UUID, page_size: int, page_token: str, show_archived: bool
    ) -> tuple[list[AgentRecord], str]:
        """A page of the project's agents by name, and the next page's token."""
        rows, token = await self._definitions.page(project_id, page_size, page_token, show_archived)
        return [AgentRecord.from_row(r) for r in rows], token

    async def update(
        self, project_id: uuid.UUID, ref: str, spec: agent_pb2.AgentSpec, expected_version: int = 0
    ) -> Updated:
        """A new version with `spec`, unless it equals the newest; with `expected_version`, only if
        that is still the newest (else AgentVersionConflict)."""
        agent_ref(ref)
        named_definitions.version("expected_version", expected_version)
        digest, insert, check = self._storing(spec)
        row, newest, created = await self._definitions.update(project_id, ref, digest, expected_version, insert, check)
        return Updated(AgentRecord.from_row(row), VersionRecord.from_row(newest), created)

    async def list_versions(
        self, project_id: uuid.UUID, ref: str, page_size: int, page_token: str
    ) -> tuple[list[VersionRecord], str]:
        """A page of the agent's versions, newest first, and the next page's token."""
        rows, token = await self._definitions.versions(project_id, ref, page_size, page_token)
        return [VersionRecord.from_row(r) for r in rows], token

    async def archive(self, project_id: uuid.UUID, ref: str) -> AgentRecord:
        """Archive the agent: it starts no new session. Idempotent."""
        return AgentRecord.from_row(await self._definitions.archive(project_id, ref))
