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


_version = named_definitions.version


class AgentDefinitions:
    def __init__(self, pool: asyncpg.Pool, agents: Agents, page_tokens: PageTokens) -> None:
        self._pool = pool
        # Where the engines' manifests come from, which definitions are checked against.
        self._agents = agents
        self._pages = named_definitions.Pages(page_tokens, "agent")

    async def create(
        self, project_id: uuid.UUID, request_id: str, name: str, spec: agent_pb2.AgentSpec
    ) -> tuple[AgentRecord, VersionRecord]:
        """A new agent with `spec` as its version 1 (or, for a retry, the agent the request made)."""
        validation.client_id("request_id", request_id)
        agent_name(name)
        specs.check_shape(spec)
        form = specs.canonical(spec)
        digest = specs.digest(form)
        async with self._pool.acquire() as conn, conn.transaction():
            known = await store.agent_definitions.by_request_id(conn, project_id, request_id)
            if known is None:
                specs.check_against(spec, await self._agents.declared_manifests(conn))
                row = await store.agent_definitions.insert(conn, uuid.uuid4(), project_id, name, request_id)
                if row is not None:
                    first = await store.agent_definition_versions.insert(conn, row["agent_id"], 1, form, digest)
                    agent, version = AgentRecord.from_row(row), VersionRecord.from_row(first)
                    log.info("agent_definition_created", agent_id=agent.agent_id, name=name, project_id=str(project_id))
                    return agent, version
                # A concurrent create took the name, or the request id (a retry running alongside).
                known = await store.agent_definitions.by_request_id(conn, project_id, request_id)
                if known is None:
                    raise AgentDefinitionExists(name)
            first = await store.agent_definition_versions.get(conn, known["agent_id"], 1)
            assert first is not None
            made = (str(known["agent_id"]), known["name"], first["spec_digest"])
            named_definitions.same_request("agent", request_id, made, (name, digest))
            return AgentRecord.from_row(known), VersionRecord.from_row(first)

    async def get(self, project_id: uuid.UUID, ref: str, version: int = 0) -> tuple[AgentRecord, VersionRecord]:
        """The agent and one of its versions (0: the newest); archived agents too."""
        return await self._read(self._pool, project_id, agent_ref(ref), _version("version", version))

    async def _read(
        self, db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, ref: uuid.UUID | str, version: int
    ) -> tuple[AgentRecord, VersionRecord]:
        row = await store.agent_definitions.find(db, project_id, ref)
        if row is None:
            raise AgentDefinitionNotFound(str(ref))
        agent = AgentRecord.from_row(row)
        wanted = version or agent.latest_version
        found = await store.agent_definition_versions.get(db, row["agent_id"], wanted)
        if found is None:
            raise AgentVersionNotFound(agent.name, wanted, agent.latest_version)
        return agent, VersionRecord.from_row(found)

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
        agent, found = await self._read(
            conn or self._pool, project_id, agent_ref(ref, fields[0]), _version(fields[1], version)
        )
        if agent.archived:
            raise AgentDefinitionArchived(agent.name, "starts no new session (its versions stay readable)")
        return ResolvedAgent(agent.agent_id, agent.name, found.version, found.spec, found.spec_digest)

    async def list_agents(
        self, project_id: uuid.UUID, page_size: int, page_token: str, show_archived: bool
    ) -> tuple[list[AgentRecord], str]:
        """A page of the project's agents by name, and the next page's token."""
        size = named_definitions.page_size(page_size)
        after = self._pages.after_name(project_id, show_archived, page_token)
        rows = await store.agent_definitions.page(self._pool, project_id, after, show_archived, size + 1)
        agents = [AgentRecord.from_row(r) for r in rows[:size]]
        next_token = self._pages.next_by_name(project_id, show_archived, agents[-1].name if len(rows) > size else None)
        return agents, next_token

    async def update(
        self, project_id: uuid.UUID, ref: str, spec: agent_pb2.AgentSpec, expected_version: int = 0
    ) -> Updated:
        """A new version with `spec`, unless it equals the newest; with `expected_version`, only if
        that is still the newest (else AgentVersionConflict)."""
        key = agent_ref(ref)
        _version("expected_version", expected_version)
        specs.check_shape(spec)
        form = specs.canonical(spec)
        digest = specs.digest(form)
        async with self._pool.acquire() as conn, conn.transaction():
            row = await store.agent_definitions.lock(conn, project_id, key)
            if row is None:
                raise AgentDefinitionNotFound(ref)
            agent = AgentRecord.from_row(row)
            if agent.archived:
                raise AgentDefinitionArchived(agent.name, "takes no new version (create another agent)")
            newest = await store.agent_definition_versions.get(conn, row["agent_id"], agent.latest_version)
            assert newest is not None
            if newest["spec_digest"] == digest:
                return Updated(agent, VersionRecord.from_row(newest), created=False)
            if expected_version and expected_version != agent.latest_version:
                raise AgentVersionConflict(agent.name, expected_version, agent.latest_version)
            specs.check_against(spec, await self._agents.declared_manifests(conn))
            number = agent.latest_version + 1
            made = await store.agent_definition_versions.insert(conn, row["agent_id"], number, form, digest)
            changed = await store.agent_definitions.set_latest(conn, row["agent_id"], number)
        log.info("agent_definition_updated", agent_id=agent.agent_id, version=number, project_id=str(project_id))
        return Updated(AgentRecord.from_row(changed), VersionRecord.from_row(made), created=True)

    async def list_versions(
        self, project_id: uuid.UUID, ref: str, page_size: int, page_token: str
    ) -> tuple[list[VersionRecord], str]:
        """A page of the agent's versions, newest first, and the next page's token."""
        key = agent_ref(ref)
        size = named_definitions.page_size(page_size)
        row = await store.agent_definitions.find(self._pool, project_id, key)
        if row is None:
            raise AgentDefinitionNotFound(ref)
        before = self._pages.before_version(row["agent_id"], page_token)
        rows = await store.agent_definition_versions.page(self._pool, row["agent_id"], before, size + 1)
        found = [VersionRecord.from_row(r) for r in rows[:size]]
        next_token = self._pages.next_by_version(row["agent_id"], found[-1].version if len(rows) > size else None)
        return found, next_token

    async def archive(self, project_id: uuid.UUID, ref: str) -> AgentRecord:
        """Archive the agent: it starts no new session. Idempotent."""
        key = agent_ref(ref)
        async with self._pool.acquire() as conn, conn.transaction():
            row = await store.agent_definitions.lock(conn, project_id, key)
            if row is None:
                raise AgentDefinitionNotFound(ref)
            if row["archived"]:
                return AgentRecord.from_row(row)
            archived = await store.agent_definitions.archive(conn, row["agent_id"])
        log.info("agent_definition_archived", agent_id=str(row["agent_id"]), project_id=str(project_id))
        return AgentRecord.from_row(archived)
