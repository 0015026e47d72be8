"""The `projects` and `api_keys` tables: every statement that reads or writes them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from controlplane.errors import KeyNotFound, ProjectExists
from controlplane.identity.callers import Role

# What one listing returns at most (projects and keys are few; a listing is never unbounded).
MAX_LISTED = 1000


@dataclass(frozen=True, slots=True)
class ProjectRecord:
    project_id: uuid.UUID
    name: str
    operator: bool
    created_at: datetime
    # Where its sessions that bind credentials may run: "any" or "dedicated" (migration 0033).
    credential_hosts: str = "any"


@dataclass(frozen=True, slots=True)
class KeyRecord:
    key_id: str
    project_id: uuid.UUID
    name: str
    role: Role
    created_by: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None


@dataclass(frozen=True, slots=True)
class StoredKey:
    """A key as the authenticator needs it: its record, its project and the digest to check."""

    key: KeyRecord
    project: ProjectRecord
    secret_sha256: bytes


_KEY_COLUMNS = (
    "k.key_id, k.project_id, k.name, k.role, k.created_by, k.created_at, k.expires_at, k.revoked_at, k.last_used_at"
)


def _project(row: asyncpg.Record) -> ProjectRecord:
    return ProjectRecord(row["project_id"], row["name"], row["operator"], row["created_at"], row["credential_hosts"])


def _key(row: asyncpg.Record) -> KeyRecord:
    return KeyRecord(
        row["key_id"],
        row["project_id"],
        row["name"],
        Role.from_label(row["role"]),
        row["created_by"],
        row["created_at"],
        row["expires_at"],
        row["revoked_at"],
        row["last_used_at"],
    )


async def find_key(pool: asyncpg.Pool, key_id: str) -> StoredKey | None:
    row = await pool.fetchrow(
        f"SELECT {_KEY_COLUMNS}, k.secret_sha256, p.name AS project_name, p.operator, p.created_at AS project_created_at"
        " FROM api_keys k JOIN projects p USING (project_id) WHERE k.key_id = $1",
        key_id,
    )
    if row is None:
        return None
    project = ProjectRecord(row["project_id"], row["project_name"], row["operator"], row["project_created_at"])
    return StoredKey(_key(row), project, bytes(row["secret_sha256"]))


async def touch_key(pool: asyncpg.Pool, key_id: str) -> None:
    """Record that the key was used now, at most once a minute (one write per key per minute)."""
    await pool.execute(
        "UPDATE api_keys SET last_used_at = now() WHERE key_id = $1"
        " AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')",
        key_id,
    )


async def insert_key(
    conn: asyncpg.Connection | asyncpg.Pool,
    *,
    key_id: str,
    project_id: uuid.UUID,
    name: str,
    role: Role,
    secret_sha256: bytes,
    created_by: str,
    expires_at: datetime | None,
) -> KeyRecord:
    row = await conn.fetchrow(
        "INSERT INTO api_keys AS k (key_id, project_id, name, role, secret_sha256, created_by, expires_at)"
        f" VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {_KEY_COLUMNS}",
        key_id,
        project_id,
        name,
        role.label,
        secret_sha256,
        created_by,
        expires_at,
    )
    return _key(row)


async def list_keys(pool: asyncpg.Pool, project_id: uuid.UUID) -> list[KeyRecord]:
    rows = await pool.fetch(
        f"SELECT {_KEY_COLUMNS} FROM api_keys k WHERE k.project_id = $1 ORDER BY k.created_at DESC, k.key_id LIMIT $2",
        project_id,
        MAX_LISTED,
    )
    return [_key(row) for row in rows]


async def revoke_key(pool: asyncpg.Pool, key_id: str, project_ids: list[uuid.UUID] | None) -> KeyRecord:
    """Revoke a key of one of `project_ids` (None: any project); KeyNotFound otherwise. A revoked
    key keeps its first revocation time."""
    row = await pool.fetchrow(
        "UPDATE api_keys AS k SET revoked_at = coalesce(k.revoked_at, now())"
        f" WHERE k.key_id = $1 AND ($2::uuid[] IS NULL OR k.project_id = ANY($2)) RETURNING {_KEY_COLUMNS}",
        key_id,
        project_ids,
    )
    if row is None:
        raise KeyNotFound(key_id)
    return _key(row)


async def insert_project(pool: asyncpg.Pool, name: str) -> ProjectRecord:
    try:
        row = await pool.fetchrow(
            "INSERT INTO projects (project_id, name) VALUES ($1, $2) RETURNING *", uuid.uuid4(), name
        )
    except asyncpg.UniqueViolationError:
        raise ProjectExists(name) from None
    return _project(row)


async def find_project(pool: asyncpg.Pool, project_id: uuid.UUID) -> ProjectRecord | None:
    row = await pool.fetchrow("SELECT * FROM projects WHERE project_id = $1", project_id)
    return _project(row) if row else None


async def find_project_by_name(pool: asyncpg.Pool, name: str) -> ProjectRecord | None:
    row = await pool.fetchrow("SELECT * FROM projects WHERE name = $1", name)
    return _project(row) if row else None


async def list_projects(pool: asyncpg.Pool, only: uuid.UUID | None = None) -> list[ProjectRecord]:
    rows = await pool.fetch(
        "SELECT * FROM projects WHERE $1::uuid IS NULL OR project_id = $1 ORDER BY name LIMIT $2", only, MAX_LISTED
    )
    return [_project(row) for row in rows]


async def set_credential_hosts(
    pool: asyncpg.Pool, project_id: uuid.UUID, credential_hosts: str
) -> ProjectRecord | None:
    row = await pool.fetchrow(
        "UPDATE projects SET credential_hosts = $2 WHERE project_id = $1 RETURNING *", project_id, credential_hosts
    )
    return _project(row) if row else None


async def credential_hosts(conn: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID) -> str:
    """Where the project's sessions that bind credentials may run: "any" or "dedicated"."""
    found: str | None = await conn.fetchval("SELECT credential_hosts FROM projects WHERE project_id = $1", project_id)
    return found or "any"


async def operator_project(conn: asyncpg.Connection) -> ProjectRecord:
    """The first operator project (`default`, made by the migration that made the table)."""
    row = await conn.fetchrow("SELECT * FROM projects WHERE operator ORDER BY created_at, name LIMIT 1")
    if row is None:
        raise LookupError("no operator project: the identity migration did not run")
    return _project(row)


async def any_key(conn: asyncpg.Connection) -> bool:
    return bool(await conn.fetchval("SELECT EXISTS (SELECT 1 FROM api_keys)"))


_BOOTSTRAP_LOCK_KEY = 0x41535442  # "ASTB": one replica bootstraps at a time


async def lock_bootstrap(conn: asyncpg.Connection) -> None:
    """Serialise bootstrapping replicas until the transaction ends."""
    await conn.execute("SELECT pg_advisory_xact_lock($1)", _BOOTSTRAP_LOCK_KEY)
