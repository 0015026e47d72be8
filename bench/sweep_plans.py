"""The deadline sweep's queries on a populated database: their plans and times.

Fills a throwaway PostgreSQL with `--sessions` sessions (most released long ago, over 0-60 days, a few released
with a sandbox still named, the rest live on `--agents` agents) and `--commands` acknowledged agent
commands, then runs every query one sweep pass makes under EXPLAIN ANALYZE (the prune in a
transaction rolled back) and prints each plan's top line, whether it scans a whole table, and its
time. The sweep runs every 2 s on every replica: none of these may read a whole table.

    python bench/sweep_plans.py [--sessions 100000] [--commands 1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import asyncpg
from _common import embedded_postgres, revision

from controlplane import store
from controlplane.database import migrate


class Explaining:
    """Stands in for a connection: runs each statement under EXPLAIN ANALYZE and keeps the plan."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn
        self.plan: list[str] = []

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        rows = await self._conn.fetch("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY ON) " + sql, *args)
        self.plan = [r[0] for r in rows]
        return []

    async def fetchval(self, sql: str, *args: Any) -> int:
        await self.fetch(sql, *args)
        return 0


async def populate(conn: asyncpg.Connection, sessions: int, commands: int, agents: int) -> None:
    project = await conn.fetchval("SELECT project_id FROM projects LIMIT 1")
    await conn.executemany(
        "INSERT INTO agents (agent_id, generation, lease_expires_at, drivers, engines, capacity, instance_id)"
        " VALUES ($1, 1, now() + interval '1 hour', '{local}', '{claude_code}', 100, 'bench')",
        [(f"agent-{i}",) for i in range(agents)],
    )
    # 95 % released long ago, 0.1 % released with their sandbox still named, the rest live.
    await conn.execute(
        """
        INSERT INTO sessions (session_id, project_id, request_id, request_fingerprint, engine, permission_mode,
                              model, labels, state, runtime_available, agent_id, last_seq, sandbox_id, deleted_at,
                              released_at)
        SELECT gen_random_uuid(), $1, 'r' || i, 'f', 'claude_code', 'default', '', '{}'::jsonb,
               CASE WHEN i % 100 < 95 THEN (CASE WHEN i % 2 = 0 THEN 'deleted' ELSE 'archived' END)
                    WHEN i % 100 = 95 THEN 'running' WHEN i % 100 = 96 THEN 'creating' ELSE 'ready' END,
               i % 100 >= 95, 'agent-' || (i % $3), 1,
               CASE WHEN i % 1000 = 0 OR i % 100 >= 95 THEN 'sb-' || i END,
               CASE WHEN i % 100 < 95 AND i % 2 = 0 THEN now() END,
               CASE WHEN i % 100 < 95 THEN now() - ((i % 60) || ' days')::interval END
        FROM generate_series(1, $2) AS i
        """,
        project,
        sessions,
        agents,
    )
    await conn.execute(
        "INSERT INTO events (session_id, seq, kind, payload) SELECT session_id, 1, 'x', '{}' FROM sessions"
    )
    await conn.execute(
        """
        INSERT INTO agent_commands (agent_id, command_seq, command_id, session_id, body, created_at, acked_at)
        SELECT s.agent_id, n, gen_random_uuid()::text, s.session_id, '\\x'::bytea,
               now() - (n || ' seconds')::interval, now() - (n || ' seconds')::interval
        FROM generate_series(1, $1) AS n
        JOIN (SELECT session_id, agent_id, row_number() OVER () - 1 AS k FROM sessions) s ON s.k = n % $2
        """,
        commands,
        sessions,
    )
    await conn.execute("ANALYZE")


async def main(args: argparse.Namespace) -> None:
    async with embedded_postgres(fast=True) as dsn:
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
        await migrate(pool)
        async with pool.acquire() as conn:
            began = time.monotonic()
            await populate(conn, args.sessions, args.commands, args.agents)
            print(f"populated {args.sessions} sessions, {args.commands} commands in {time.monotonic() - began:.0f} s")
            db = Explaining(conn)
            queries: dict[str, Callable[[], Awaitable[Any]]] = {
                "on_lapsed_leases": lambda: store.sessions.on_lapsed_leases(db),  # type: ignore[arg-type]
                "interrupts_overdue": lambda: store.sessions.interrupts_overdue(db),  # type: ignore[arg-type]
                "startups_overdue": lambda: store.sessions.startups_overdue(db, timedelta(minutes=3)),  # type: ignore[arg-type]
                "destroys_due": lambda: store.sessions.destroys_due(db, timedelta(seconds=30), 500),  # type: ignore[arg-type]
                "idle_since": lambda: store.sessions.idle_since(db, timedelta(minutes=15)),  # type: ignore[arg-type]
                "undelivered_since": lambda: store.turns.undelivered_since(db, timedelta(minutes=4)),  # type: ignore[arg-type]
                "turns_over_time": lambda: store.sessions.turns_over_time(db),  # type: ignore[arg-type]
                "prune_done": lambda: store.agent_commands.prune_done(db, timedelta(days=1), 500),  # type: ignore[arg-type]
                "lock_forgettable": lambda: store.sessions.lock_forgettable(db, timedelta(days=30), 100),  # type: ignore[arg-type]
            }
            print(f"{'query':<20} {'whole-table scan':<18} {'ms':>8}  plan")
            for name, run in queries.items():
                step = conn.transaction()
                await step.start()
                try:
                    await run()
                finally:
                    await step.rollback()  # the prune's EXPLAIN ANALYZE deleted rows
                plan = db.plan
                scans = sorted({line.split(" on ")[1].split()[0] for line in plan if "Seq Scan on" in line})
                took = next((line.split(":")[1].strip() for line in plan if line.startswith("Execution Time")), "?")
                print(f"{name:<20} {', '.join(scans) or 'none':<18} {took:>8}  {plan[0].strip()}")
                if args.verbose:
                    print("\n".join("    " + line for line in plan))
        await pool.close()
    print(f"revision {revision()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--commands", type=int, default=1_000_000)
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--verbose", action="store_true", help="print whole plans")
    asyncio.run(main(parser.parse_args()))
