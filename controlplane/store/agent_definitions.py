"""The `agent_definitions` table: a project's named agents (AgentService), their newest version's
number, whether they are archived, and the CreateAgent request id that made each one.

Every statement names the project: an agent of another project is never read, locked or changed.
"""

from __future__ import annotations

import uuid

import asyncpg


def _named(ref: uuid.UUID | str) -> str:
    """The condition that picks the project's ($1) agent named by `ref` ($2): its id, or its name
    (a name never has the form of an id)."""
    return "project_id = $1 AND " + ("agent_id = $2" if isinstance(ref, uuid.UUID) else "name = $2")


async def insert(
    conn: asyncpg.Connection, agent_id: uuid.UUID, project_id: uuid.UUID, name: str, request_id: str
) -> asyncpg.Record | None:
    """Insert the agent at version 1; None when the project has an agent with this name or made with
    this request id already (waiting for a concurrent insert of either to end first)."""
    return await conn.fetchrow(
        "INSERT INTO agent_definitions (agent_id, project_id, name, latest_version, request_id)"
        " VALUES ($1, $2, $3, 1, $4) ON CONFLICT DO NOTHING RETURNING *",
        agent_id,
        project_id,
        name,
        request_id,
    )


async def by_request_id(
    db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, request_id: str
) -> asyncpg.Record | None:
    return await db.fetchrow(
        "SELECT * FROM agent_definitions WHERE project_id = $1 AND request_id = $2", project_id, request_id
    )


async def find(
    db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, ref: uuid.UUID | str, lock: bool = False
) -> asyncpg.Record | None:
    """The project's agent with this id (a UUID) or name; `lock`: locked until the transaction
    ends, so that its changes take turns."""
    return await db.fetchrow(
        f"SELECT * FROM agent_definitions WHERE {_named(ref)}{' FOR UPDATE' if lock else ''}", project_id, ref
    )


async def page(
    db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, after_name: str, show_archived: bool, limit: int
) -> list[asyncpg.Record]:
    """The project's agents by name, after `after_name`; archived ones only if `show_archived`."""
    rows: list[asyncpg.Record] = await db.fetch(
        "SELECT * FROM agent_definitions WHERE project_id = $1 AND name > $2 AND ($3 OR NOT archived)"
        " ORDER BY name LIMIT $4",
        project_id,
        after_name,
        show_archived,
        limit,
    )
    return rows


async def set_latest(conn: asyncpg.Connection, agent_id: uuid.UUID, version: int) -> asyncpg.Record:
    """The agent's newest version is now `version`."""
    row = await conn.fetchrow(
        "UPDATE agent_definitions SET latest_version = $2, updated_at = now() WHERE agent_id = $1 RETURNING *",
        agent_id,
        version,
    )
    assert row is not None
    return row


async def archive(conn: asyncpg.Connection, agent_id: uuid.UUID) -> asyncpg.Record:
    row = await conn.fetchrow(
        "UPDATE agent_definitions SET archived = true, updated_at = now() WHERE agent_id = $1 RETURNING *", agent_id
    )
    assert row is not None
    return row
