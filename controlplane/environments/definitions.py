"""A project's environments: created, read, listed, changed (each change a new immutable version)
and archived; and resolved to the version a new session pins.

Every call takes the caller's project and reads and writes only its environments: another
project's environment answers exactly as one that does not exist. A change is one transaction on
the environment's locked row, so versions are numbered without gaps and nothing is half-stored.

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


class EnvironmentDefinitions:
    def __init__(self, pool: asyncpg.Pool, page_tokens: PageTokens) -> None:
        self._pool = pool
        self._pages = named_definitions.Pages(page_tokens, _KIND)

    async def create(
        self, project_id: uuid.UUID, request_id: str, name: str, spec: epb.EnvironmentSpec
    ) -> tuple[EnvironmentRecord, EnvironmentVersionRecord]:
        """A new environment with `spec` as its version 1 (or, for a retry, the one the request made)."""
        validation.client_id("request_id", request_id)
        named_definitions.new_name(_KIND, name)
        specs.check(spec)
        form = specs.canonical(spec)
        digest = named_definitions.digest(form)
        async with self._pool.acquire() as conn, conn.transaction():
            known = await store.environments.by_request_id(conn, project_id, request_id)
            if known is None:
                row = await store.environments.insert(conn, uuid.uuid4(), project_id, name, request_id)
                if row is not None:
                    first = await store.environment_versions.insert(
                        conn, row["environment_id"], 1, form, digest, specs.build_digest(spec)
                    )
                    log.info("environment_created", environment_id=str(row["environment_id"]), name=name)
                    return EnvironmentRecord.from_row(row), EnvironmentVersionRecord.from_row(first)
                # A concurrent create took the name, or the request id (a retry running alongside).
                known = await store.environments.by_request_id(conn, project_id, request_id)
                if known is None:
                    raise EnvironmentExists(name)
            first = await store.environment_versions.get(conn, known["environment_id"], 1)
            assert first is not None
            made = (str(known["environment_id"]), known["name"], first["spec_digest"])
            named_definitions.same_request(_KIND, request_id, made, (name, digest))
            return EnvironmentRecord.from_row(known), EnvironmentVersionRecord.from_row(first)

    async def get(
        self, project_id: uuid.UUID, ref: str, version: int = 0
    ) -> tuple[EnvironmentRecord, EnvironmentVersionRecord]:
        """The environment and one of its versions (0: the newest); archived environments too."""
        return await self._read(project_id, environment_ref(ref), named_definitions.version("version", version))

    async def _read(
        self, project_id: uuid.UUID, ref: uuid.UUID | str, version: int, conn: asyncpg.Connection | None = None
    ) -> tuple[EnvironmentRecord, EnvironmentVersionRecord]:
        db = conn or self._pool
        row = await store.environments.find(db, project_id, ref)
        if row is None:
            raise EnvironmentNotFound(str(ref))
        environment = EnvironmentRecord.from_row(row)
        wanted = version or environment.latest_version
        found = await store.environment_versions.get(db, row["environment_id"], wanted)
        if found is None:
            raise EnvironmentVersionNotFound(environment.name, wanted, environment.latest_version)
        return environment, EnvironmentVersionRecord.from_row(found)

    async def resolve(
        self, project_id: uuid.UUID, ref: str, version: int = 0, conn: asyncpg.Connection | None = None
    ) -> PinnedEnvironment:
        """The version (0: the newest) of the project's environment `ref` (its name or id) a new
        session pins, named by CreateSession's fields `environment` and `environment_version`.
        EnvironmentNotFound, EnvironmentVersionNotFound, or EnvironmentArchived: an archived
        environment starts no session."""
        environment, found = await self._read(
            project_id,
            environment_ref(ref),
            named_definitions.version("environment_version", version),
            conn,
        )
        if environment.archived:
            raise EnvironmentArchived(environment.name, "starts no new session (its versions stay readable)")
        return PinnedEnvironment(
            environment.environment_id, environment.name, found.version, found.build_digest, found.spec
        )

    async def list_environments(
        self, project_id: uuid.UUID, page_size: int, page_token: str, show_archived: bool
    ) -> tuple[list[EnvironmentRecord], str]:
        """A page of the project's environments by name, and the next page's token."""
        size = named_definitions.page_size(page_size)
        after = self._pages.after_name(project_id, show_archived, page_token)
        rows = await store.environments.page(self._pool, project_id, after, show_archived, size + 1)
        found = [EnvironmentRecord.from_row(r) for r in rows[:size]]
        last = found[-1].name if len(rows) > size else None
        return found, self._pages.next_by_name(project_id, show_archived, last)

    async def update(
        self, project_id: uuid.UUID, ref: str, spec: epb.EnvironmentSpec, expected_version: int = 0
    ) -> Updated:
        """A new version with `spec`, unless it equals the newest; with `expected_version`, only if
        that is still the newest (else EnvironmentVersionConflict)."""
        key = environment_ref(ref)
        named_definitions.version("expected_version", expected_version)
        specs.check(spec)
        form = specs.canonical(spec)
        digest = named_definitions.digest(form)
        async with self._pool.acquire() as conn, conn.transaction():
            row = await store.environments.find(conn, project_id, key, lock=True)
            if row is None:
                raise EnvironmentNotFound(ref)
            environment = EnvironmentRecord.from_row(row)
            if environment.archived:
                raise EnvironmentArchived(environment.name, "takes no new version (create another environment)")
            newest = await store.environment_versions.get(conn, row["environment_id"], environment.latest_version)
            assert newest is not None
            if newest["spec_digest"] == digest:
                return Updated(environment, EnvironmentVersionRecord.from_row(newest), created=False)
            if expected_version and expected_version != environment.latest_version:
                raise EnvironmentVersionConflict(environment.name, expected_version, environment.latest_version)
            number = environment.latest_version + 1
            made = await store.environment_versions.insert(
                conn, row["environment_id"], number, form, digest, specs.build_digest(spec)
            )
            changed = await store.environments.set_latest(conn, row["environment_id"], number)
        log.info("environment_updated", environment_id=environment.environment_id, version=number)
        return Updated(EnvironmentRecord.from_row(changed), EnvironmentVersionRecord.from_row(made), created=True)

    async def list_versions(
        self, project_id: uuid.UUID, ref: str, page_size: int, page_token: str
    ) -> tuple[list[EnvironmentVersionRecord], str]:
        """A page of the environment's versions, newest first, and the next page's token."""
        key = environment_ref(ref)
        size = named_definitions.page_size(page_size)
        row = await store.environments.find(self._pool, project_id, key)
        if row is None:
            raise EnvironmentNotFound(ref)
        before = self._pages.before_version(row["environment_id"], page_token)
        rows = await store.environment_versions.page(self._pool, row["environment_id"], before, size + 1)
        found = [EnvironmentVersionRecord.from_row(r) for r in rows[:size]]
        last = found[-1].version if len(rows) > size else None
        return found, self._pages.next_by_version(row["environment_id"], last)

    async def archive(self, project_id: uuid.UUID, ref: str) -> EnvironmentRecord:
        """Archive the environment: it starts no new session; its sessions go on. Idempotent."""
        key = environment_ref(ref)
        async with self._pool.acquire() as conn, conn.transaction():
            row = await store.environments.find(conn, project_id, key, lock=True)
            if row is None:
                raise EnvironmentNotFound(ref)
            if row["archived"]:
                return EnvironmentRecord.from_row(row)
            archived = await store.environments.archive(conn, row["environment_id"])
        log.info("environment_archived", environment_id=str(row["environment_id"]))
        return EnvironmentRecord.from_row(archived)
