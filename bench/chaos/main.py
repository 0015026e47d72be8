"""A chaos round from start to exit status: bring the cluster up, drive sessions while faults are
injected, stop the faults, let everything settle, check, report."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg
from _common import api_key_file, revision

from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from chaos import checks, journal, report, sandboxes
from chaos.checks import Facts
from chaos.cluster import Cluster
from chaos.driver import Driver
from chaos.faults import Injector
from chaos.records import Round
from serverkit import logs


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench/chaos.py",
        description=sys.modules["chaos"].__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of faults (default %(default)s)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: a new one, printed)")
    parser.add_argument("--sessions", type=int, default=4, help="sessions driven at once (default %(default)s)")
    parser.add_argument("--driver", choices=("local", "docker"), default="local", help="sandbox driver (default %(default)s)")  # fmt: skip
    parser.add_argument("--agents", type=int, default=2, help="data-plane agents (default %(default)s)")
    parser.add_argument("--replicas", type=int, default=2, help="control-plane replicas (default %(default)s)")
    parser.add_argument("--capacity", type=int, default=8, help="each agent's --capacity (default %(default)s)")
    parser.add_argument("--fault-gap", type=float, nargs=2, default=(2.0, 8.0), metavar=("MIN", "MAX"),
                        help="seconds between one fault's end and the next in a lane (default 2 8)")  # fmt: skip
    parser.add_argument("--lanes", type=int, default=1, help="faults injected at once, on different targets (default %(default)s)")  # fmt: skip
    parser.add_argument("--idle-stop-after", type=float, default=20.0, help="the replicas' idle stop, 0: off (default %(default)s)")  # fmt: skip
    parser.add_argument("--settle", type=float, default=150.0,
                        help="seconds every turn has to end once the faults stop (default %(default)s)")  # fmt: skip
    parser.add_argument("--quiet", type=float, default=60.0,
                        help="seconds of nothing happening at the end: sandboxes must go, commands stop (default %(default)s)")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs, agent state)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    logs.configure("json", "error")
    sys.exit(asyncio.run(chaos_round(args)))


async def chaos_round(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="astrabox-chaos-"))
    key_path, api_key = api_key_file(work)
    cluster = Cluster(
        work, rng, key_path, replicas=args.replicas, agents=args.agents, driver=args.driver,
        capacity=args.capacity, idle_stop_after=args.idle_stop_after, installation=f"chaos-{uuid.uuid4().hex[:8]}",
    )  # fmt: skip
    round = Round(args.seed)
    rev = revision()
    print(f"chaos: seed {args.seed}, work dir {work}", file=sys.stderr)
    try:
        await cluster.start()
        injector: Injector | None = None
        driver = Driver(
            cluster.client_proxy.address, api_key, round, rng, args.sessions, args.idle_stop_after,
            capacity_free=lambda: bool(injector and injector.quiet_for(25.0) and driver.live_runtimes() < args.agents * args.capacity),
        )  # fmt: skip
        injector = Injector(cluster, driver, round, rng, tuple(args.fault_gap))
        stop_faults = asyncio.Event()
        round.started = time.monotonic()
        driving = asyncio.create_task(driver.run())
        faulting = asyncio.create_task(injector.run(stop_faults, args.lanes))
        try:
            await asyncio.wait({driving}, timeout=args.duration)
        finally:
            stop_faults.set()
            await faulting  # the fault in progress ends first (a process down is started again)
        if driving.done():
            driving.result()  # the driver failed: its error, not a report
        round.faults_stopped = time.monotonic()
        await cluster.ensure_running()
        driver.settle_by = time.monotonic() + args.settle
        driver.stopping.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(driving, args.settle + 60.0)
        round.settled = time.monotonic()
        facts, leak_clear = await quiet_period(cluster, driver, round, args.quiet)
        violations = checks.run_all(facts)
        report.print_report(
            round, facts.journals, violations,
            report.header(args.seed, args.duration, args.driver, args.sessions, rev),
            round.settled - round.faults_stopped, leak_clear,
        )  # fmt: skip
        await driver.close()
        return 1 if violations else 0
    finally:
        await cluster.stop()
        await sandboxes.sweep(cluster)
        if args.keep:
            print(f"chaos: logs and state kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


async def quiet_period(cluster: Cluster, driver: Driver, round: Round, quiet: float) -> tuple[Facts, float | None]:
    """Nothing happens for `quiet` seconds: sandboxes of released sessions must go, commands must
    stop, watchers of live sessions must catch up. Then everything the checks read, read once."""
    conn = await asyncpg.connect(cluster.postgres.dsn)
    try:
        quiet_since = await journal.now(conn)
        session_ids = list(round.sessions)
        started = time.monotonic()
        leak_clear: float | None = None
        while True:
            rows = await journal.sessions(conn, session_ids)
            found = await sandboxes.survey(cluster)
            clear = not checks.leaks(Facts(round, {}, rows, {}, found, [], quiet_since, []))
            if clear and leak_clear is None:
                leak_clear = time.monotonic() - round.faults_stopped
            elif not clear:
                leak_clear = None
            if time.monotonic() - started >= quiet:
                break
            await asyncio.sleep(2.0)
        journals = await journal.journals(conn, session_ids)
        await catch_up(driver, journals)
        await driver.stop_watchers()
        journals = await journal.journals(conn, session_ids)
        rows = await journal.sessions(conn, session_ids)
        commands = await journal.commands(conn)
    finally:
        await conn.close()
    projections = {}
    async with AstraBoxClient.connect(cluster.controlplane_addresses[0], api_key=driver.api_key) as client:
        for sid in session_ids:
            with contextlib.suppress(AstraBoxError):
                projections[sid] = await client.get_session(sid)
    facts = Facts(round, journals, rows, projections, found, commands, quiet_since, driver.stuck)
    return facts, leak_clear


async def catch_up(driver: Driver, journals: dict[str, list[journal.Row]], timeout: float = 30.0) -> None:
    """Give the watchers still open the time to receive what their sessions' journals hold now."""
    for watcher, _ in driver.live_watchers:
        rows = journals.get(watcher.log.session_id) or []
        watcher.log.caught_up_to = rows[-1].seq if rows else 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(w.log.last_seq >= w.log.caught_up_to for w, _ in driver.live_watchers):
            return
        await asyncio.sleep(0.2)
