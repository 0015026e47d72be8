"""A project's environments: created, read, listed, changed (each change a new immutable version)
and archived; and resolved to the version a new session pins.

Every call takes the caller's project and reads and writes only its environments: another
project's environment answers exactly as one that does not exist. Their life in the database is
the agents' (`named_definitions.Definitions`); what is theirs is the spec's checks and digests.

Idempotency, as for agent definitions: CreateEnvironment's request id is unique per project; a
retry with the same name and an equal definition returns the environment it made (with its first
version); the same id with another name or definition is REQUEST_ID_REUSED. UpdateEnvironment with
a definition equal to the newest version's makes no version (whatever `expected_version` it names).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg
import structlog

from astrabox.environments.v1 import environment_pb2 as epb
from controlplane import named_definitions, store, validation
from controlplane.environments import specs
from controlplane.errors import (
    CredentialNotFound,
    EnvironmentArchived,
    EnvironmentExists,
    EnvironmentNotFound,
    EnvironmentVersionConflict,
    EnvironmentVersionNotFound,
)
from controlplane.page_tokens import PageTokens

log = structlog.get_logger(__name__)

_KIND = "environment"


@dataclass(frozen=True, slots=True)
class EnvironmentRecord:
    environment_id: str
    project_id: uuid.UUID
    name: str
    latest_version: int
    archived: bool
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> EnvironmentRecord:
        return cls(
            environment_id=str(row["environment_id"]),
            project_id=row["project_id"],
            name=row["name"],
            latest_version=row["latest_version"],
            archived=row["archived"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )


@dataclass(frozen=True, slots=True)
class EnvironmentVersionRecord:
    environment_id: str
    version: int
    # The definition (a copy of the stored one: changing it changes nothing stored).
    spec: epb.EnvironmentSpec
    spec_digest: str
    build_digest: str
    created_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> EnvironmentVersionRecord:
        return cls(
            environment_id=str(row["environment_id"]),
            version=row["version"],
            spec=epb.EnvironmentSpec.FromString(bytes(row["spec"])),
            spec_digest=row["spec_digest"],
            build_digest=row["build_digest"],
            created_at=row["created_at"],
        )


@dataclass(frozen=True, slots=True)
class Updated:
    environment: EnvironmentRecord
    # The newest version: the new one, or the unchanged newest when the definition was equal.
    version: EnvironmentVersionRecord
    created: bool


@dataclass(frozen=True, slots=True)
class PinnedEnvironment:
    """The environment version a new session runs in (and pins), as the session keeps it."""

    environment_id: str
    name: str
    version: int
    build_digest: str
    spec: epb.EnvironmentSpec


def environment_ref(value: str, field: str = "environment") -> uuid.UUID | str:
    return named_definitions.ref(_KIND, value, field)


KIND = named_definitions.Kind(
    name=_KIND,
    id_column="environment_id",
    log_name="environment",
    definitions=store.environments,
    versions=store.environment_versions,
    not_found=EnvironmentNotFound,
    version_not_found=EnvironmentVersionNotFound,
    exists=EnvironmentExists,
    archived=EnvironmentArchived,
    conflict=EnvironmentVersionConflict,
)


def _storing(
    project_id: uuid.UUID, spec: epb.EnvironmentSpec
) -> tuple[str, named_definitions.InsertVersion, named_definitions.CheckIn]:
    """The checked spec's digest, how a version of it is stored (with its build digest), and the
    check that every credential it binds is one of the project's (made when a version is stored)."""
    specs.check(spec)
    form = specs.canonical(spec)
    digest, build_digest = named_definitions.digest(form), specs.build_digest(spec)

    async def insert(conn: asyncpg.Connection, environment_id: uuid.UUID, number: int) -> asyncpg.Record:
        return await store.environment_versions.insert(conn, environment_id, number, form, digest, build_digest)

    async def check(conn: asyncpg.Connection) -> None:
        await _credentials_exist(conn, project_id, spec)

    return digest, insert, check


async def _credentials_exist(conn: asyncpg.Connection, project_id: uuid.UUID, spec: epb.EnvironmentSpec) -> None:
    """CredentialNotFound, naming the binding's field, for the first binding of a credential the
    project does not have (a typo found at apply, not at a session's first request)."""
    names = [binding.credential for binding in spec.credentials]
    if not names:
        return
    known = {row["name"] for row in await store.credential_store.named(conn, project_id, names)}
    for index, name in enumerate(names):
        if name not in known:
            missing = CredentialNotFound(name)
            missing.metadata["field"] = f"spec.credentials[{index}].credential"
            raise missing


class EnvironmentDefinitions:
    def __init__(self, pool: asyncpg.Pool, page_tokens: PageTokens) -> None:
        self._definitions = named_definitions.Definitions(pool, page_tokens, KIND)

    async def create(
        self, project_id: uuid.UUID, request_id: str, name: str, spec: epb.EnvironmentSpec
    ) -> tuple[EnvironmentRecord, EnvironmentVersionRecord]:
        """A new environment with `spec` as its version 1 (or, for a retry, the one the request made)."""
        validation.client_id("request_id", request_id)
        named_definitions.new_name(_KIND, name)
        row, first = await self._definitions.create(project_id, request_id, name, *_storing(project_id, spec))
        return EnvironmentRecord.from_row(row), EnvironmentVersionRecord.from_row(first)

    async def get(
        self, project_id: uuid.UUID, ref: str, version: int = 0
    ) -> tuple[EnvironmentRecord, EnvironmentVersionRecord]:
        """The environment and one of its versions (0: the newest); archived environments too."""
        row, found = await self._definitions.read(
            project_id, environment_ref(ref), named_definitions.version("version", version)
        )
        return EnvironmentRecord.from_row(row), EnvironmentVersionRecord.from_row(found)

    async def resolve(
        self, project_id: uuid.UUID, ref: str, version: int = 0, conn: asyncpg.Connection | None = None
    ) -> PinnedEnvironment:
        """The version (0: the newest) of the project's environment `ref` (its name or id) a new
        session pins, named by CreateSession's fields `environment` and `environment_version`.
        EnvironmentNotFound, EnvironmentVersionNotFound, or EnvironmentArchived: an archived
        environment starts no session."""
        row, found = await self._definitions.read(
            project_id, environment_ref(ref), named_definitions.version("environment_version", version), conn
        )
        environment, pinned = EnvironmentRecord.from_row(row), EnvironmentVersionRecord.from_row(found)
        if environment.archived:
            raise EnvironmentArchived(environment.name, "starts no new session (its versions stay readable)")
        return PinnedEnvironment(
            environment.environment_id, environment.name, pinned.version, pinned.build_digest, pinned.spec
        )

    async def list_environments(
        self, project_id: uuid.UUID, page_size: int, page_token: str, show_archived: bool
    ) -> tuple[list[EnvironmentRecord], str]:
        """A page of the project's environments by name, and the next page's token."""
        rows, token = await self._definitions.page(project_id, page_size, page_token, show_archived)
        return [EnvironmentRecord.from_row(r) for r in rows], token

    async def update(
        self, project_id: uuid.UUID, ref: str, spec: epb.EnvironmentSpec, expected_version: int = 0
    ) -> Updated:
        """A new version with `spec`, unless it equals the newest; with `expected_version`, only if
        that is still the newest (else EnvironmentVersionConflict)."""
        environment_ref(ref)
        named_definitions.version("expected_version", expected_version)
        digest, insert, check = _storing(project_id, spec)
        row, newest, created = await self._definitions.update(project_id, ref, digest, expected_version, insert, check)
        return Updated(EnvironmentRecord.from_row(row), EnvironmentVersionRecord.from_row(newest), created)

    async def list_versions(
        self, project_id: uuid.UUID, ref: str, page_size: int, page_token: str
    ) -> tuple[list[EnvironmentVersionRecord], str]:
        """A page of the environment's versions, newest first, and the next page's token."""
        rows, token = await self._definitions.versions(project_id, ref, page_size, page_token)
        return [EnvironmentVersionRecord.from_row(r) for r in rows], token

    async def archive(self, project_id: uuid.UUID, ref: str) -> EnvironmentRecord:
        """Archive the environment: it starts no new session; its sessions go on. Idempotent."""
        return EnvironmentRecord.from_row(await self._definitions.archive(project_id, ref))
