"""The `project_quotas` table: the limits set for each project (a NULL column: the default)."""

from __future__ import annotations

import uuid

import asyncpg

# The quota columns, in the order the table declares them.
COLUMNS = ("live_sessions", "sessions_per_minute", "message_bytes", "upload_bytes", "concurrent_commands")


async def get(db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID) -> asyncpg.Record | None:
    """The project's row; None when no quota was ever set for it."""
    return await db.fetchrow("SELECT * FROM project_quotas WHERE project_id = $1", project_id)


async def put(
    db: asyncpg.Connection | asyncpg.Pool, project_id: uuid.UUID, values: dict[str, int | None], updated_by: str
) -> asyncpg.Record:
    """Set every quota of the project (None: back to the default) and return the row."""
    ordered = [values.get(column) for column in COLUMNS]
    row = await db.fetchrow(
        "INSERT INTO project_quotas AS q (project_id, live_sessions, sessions_per_minute, message_bytes,"
        " upload_bytes, concurrent_commands, updated_by) VALUES ($1, $2, $3, $4, $5, $6, $7)"
        " ON CONFLICT (project_id) DO UPDATE SET live_sessions = $2, sessions_per_minute = $3,"
        " message_bytes = $4, upload_bytes = $5, concurrent_commands = $6, updated_by = $7, updated_at = now()"
        " RETURNING *",
        project_id,
        *ordered,
        updated_by,
    )
    assert row is not None
    return row
