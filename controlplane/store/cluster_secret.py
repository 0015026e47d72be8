"""The `cluster_secret` table: the one secret every replica of this database shares (made by a migration)."""

from __future__ import annotations

import asyncpg


async def read(db: asyncpg.Connection | asyncpg.Pool) -> str | None:
    secret: str | None = await db.fetchval("SELECT secret FROM cluster_secret")
    return secret
