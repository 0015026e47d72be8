"""ListSessions' query on a populated database: its plan and time for each kind of filter.

Fills a throwaway PostgreSQL with `--sessions` sessions of one project (another project holds as
many again), labelled `team` (one of 20 values), `tier=gold` on one in 10,000 and `draft` on
every other one, in every state, created over the last 30 days; then runs the first page (50) of
a listing for each filter under EXPLAIN ANALYZE and prints its time, the indexes it used and the
plan's top line.

    python bench/listing_plans.py [--sessions 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from _common import embedded_postgres, revision

from controlplane import store
from controlplane.database import create_pool, migrate
from controlplane.listing import SessionFilter, label_selector_of
from controlplane.session import SessionState


class Explaining:
    """Stands in for a connection: runs each statement under EXPLAIN ANALYZE and keeps the plan."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn
        self.plan: list[str] = []

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        rows = await self._conn.fetch("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY ON) " + sql, *args)
        self.plan = [r[0] for r in rows]
        return []


async def populate(conn: asyncpg.Connection, sessions: int) -> Any:
    project = await conn.fetchval("SELECT project_id FROM projects LIMIT 1")
    other = await conn.fetchval(
        "INSERT INTO projects (project_id, name) VALUES (gen_random_uuid(), 'other') RETURNING project_id"
    )
    states = ["ready", "ready", "ready", "running", "archived", "archived", "failed", "creating", "deleted"]
    for owner in (project, other):
        await conn.execute(
            """
            INSERT INTO sessions (session_id, project_id, request_id, request_fingerprint, engine, permission_mode,
                                  model, labels, state, created_at, deleted_at)
            SELECT gen_random_uuid(), $1, 'r' || i, 'f', 'claude_code', 'default', '',
                   jsonb_build_object('team', 't' || (i % 20))
                     || CASE WHEN i % 10000 = 0 THEN '{"tier": "gold"}'::jsonb ELSE '{}'::jsonb END
                     || CASE WHEN i % 2 = 0 THEN '{"draft": "yes"}'::jsonb ELSE '{}'::jsonb END,
                   ($3::text[])[1 + i % 9],
                   now() - (i::bigint * 2592000 / $2 || ' seconds')::interval,
                   CASE WHEN i % 9 = 8 THEN now() END
            FROM generate_series(1, $2) AS i
            """,
            owner,
            sessions,
            states,
        )
    await conn.execute("ANALYZE")
    return project


async def main(args: argparse.Namespace) -> None:
    now = datetime.now(UTC)
    filters = {
        "none": SessionFilter(),
        "states=ready": SessionFilter(states=frozenset({SessionState.READY})),
        "states=failed,creating": SessionFilter(states=frozenset({SessionState.FAILED, SessionState.CREATING})),
        "team=t3 (5 %)": SessionFilter(labels=label_selector_of("team=t3")),
        "tier=gold (0.01 %)": SessionFilter(labels=label_selector_of("tier=gold")),
        "tier (0.01 %)": SessionFilter(labels=label_selector_of("tier")),
        "!draft (50 %)": SessionFilter(labels=label_selector_of("!draft")),
        "team!=t3": SessionFilter(labels=label_selector_of("team!=t3")),
        "last day": SessionFilter(created_after=now - timedelta(days=1)),
        "20-21 days ago": SessionFilter(
            created_after=now - timedelta(days=21), created_before=now - timedelta(days=20)
        ),
        "ready,team=t3,2 days": SessionFilter(
            states=frozenset({SessionState.READY}),
            labels=label_selector_of("team=t3"),
            created_after=now - timedelta(days=2),
        ),
    }
    async with embedded_postgres(fast=True) as dsn:
        pool = await create_pool(dsn, min_size=1, max_size=2)
        await migrate(pool)
        async with pool.acquire() as conn:
            began = time.monotonic()
            project = await populate(conn, args.sessions)
            print(f"populated 2 projects x {args.sessions} sessions in {time.monotonic() - began:.0f} s")
            db = Explaining(conn)
            print(f"{'filter':<24} {'ms':>8}  {'indexes':<40} plan")
            for name, listing in filters.items():
                await store.sessions.view_page(db, project, listing, 51, None)  # type: ignore[arg-type]
                plan = db.plan
                took = next((line.split(":")[1].strip() for line in plan if line.startswith("Execution Time")), "?")
                indexes = sorted(
                    {line.split(" using ")[1].split()[0] for line in plan if " using " in line and "sessions_" in line}
                    | {line.split(" on ")[1].split()[0] for line in plan if "Bitmap Index Scan on" in line}
                )
                seq = " + SEQ SCAN" if any("Seq Scan on sessions" in line for line in plan) else ""
                print(f"{name:<24} {took:>8}  {', '.join(indexes) + seq:<40} {plan[0].strip()}")
                if args.verbose:
                    print("\n".join("    " + line for line in plan))
        await pool.close()
    print(f"revision {revision()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--verbose", action="store_true", help="print whole plans")
    asyncio.run(main(parser.parse_args()))
