"""`astrabox db status` and `astrabox db migrate`: the control plane's schema, seen and upgraded
before its replicas start (the upgrade order is: migrate, then the replicas, then the agents).

Both take the database URL exactly as `astrabox controlplane` does (`--database-url-file`,
ASTRABOX_DATABASE_URL, ...), verify every applied migration's checksum first, and stop with the
replica's own error (`controlplane.database.SchemaMismatch`) when one was edited or the database is
newer than this version understands.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence

from controlplane import database
from controlplane.settings import add_database_url, database_url
from serverkit import logs


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="astrabox db", description="The control plane's database schema.")
    actions = parser.add_subparsers(dest="action", required=True)
    for name, what in (
        ("status", "list the migrations applied (their checksums verified) and those pending"),
        ("migrate", "apply the pending migrations and say which"),
    ):
        add_database_url(actions.add_parser(name, help=what, description=what))
    args = parser.parse_args(argv)
    url = database_url(args)
    logs.configure(level="warning")  # what was applied is the output, on stdout; problems on stderr
    if args.action == "status":
        print(asyncio.run(_status(url)), end="")
    else:
        print(asyncio.run(_migrate(url)), end="")
    return 0


async def _status(url: str) -> str:
    pool = await database.create_pool(url, min_size=1, max_size=1)
    try:
        found = await database.status(pool)
    finally:
        await pool.close()
    lines = [f"applied: {len(found.applied)}, pending: {len(found.pending)}"]
    for row in found.applied:
        checksum = row["checksum"][:12] if row["checksum"] else "(recorded before checksums)"
        lines.append(f"  applied  {row['name']}  {checksum}  {row['applied_at']:%Y-%m-%d %H:%M:%S %Z}")
    for migration in found.pending:
        lines.append(f"  pending  {migration.name}  {migration.checksum[:12]}")
    lines.append(
        "up to date" if not found.pending else "run `astrabox db migrate` (or start a replica) to apply the pending"
    )
    return "\n".join(lines) + "\n"


async def _migrate(url: str) -> str:
    pool = await database.create_pool(url, min_size=1, max_size=1)
    try:
        applied = await database.migrate(pool)
    finally:
        await pool.close()
    if not applied:
        return "nothing to apply: the schema is up to date\n"
    return "".join(f"applied {name}\n" for name in applied) + f"{len(applied)} migration(s) applied\n"
