"""The console's first paint with 1,000 sessions listed, against the same screen with none.

One process: an embedded PostgreSQL, a control plane in process (`controlplane.server.serve`) with
its web port serving the built console, and a stand-in agent registered in the database so that
CreateSession can place sessions (nothing runs them: they stay `creating`, which the listing shows
as any other state). `--sessions` sessions (default 1,000) are created through the SDK in the
operator project `default`, with labels; a second project, `empty`, with its own admin key, has
none: the baseline, measured in the same run.

Then headless Chromium (Debian's, through Playwright) opens the sessions screen (`/#/sessions`),
the key already in the tab's session storage as after a sign-in, `--runs` times per project,
alternating, each time in a fresh browser context (no cache: every run loads the page, its
scripts and styles, calls WhoAmI and ListSessions, as a first visit does). Measured in the page,
from navigation start:

  first-contentful-paint   the browser's paint timing entry (the first text: "Checking the
                           credential…")
  ListSessions answered    the end of the ListSessions response (resource timing), for the
                           share of the call in the next figure
  first page of rows       the sessions table, no longer busy, holding its first page (25 rows of
                           sessions, or "No sessions."), painted: a MutationObserver sees the rows,
                           the time is taken in the next animation frame's following task

Prints the median, p90 and max per project and the ratio of the medians (sessions / empty), with
the date and the revision. Timings are printed, never asserted.

    python bench/console_paint.py [--sessions 1000] [--runs 15]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import json
import platform
import shutil
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from _common import api_key_file, embedded_postgres, percentile, revision
from playwright.async_api import async_playwright

from astrabox.client import AstraBoxClient
from controlplane.agents import AgentHello, Agents
from controlplane.database import create_pool, migrate
from controlplane.engines import EngineManifest
from controlplane.server import serve
from controlplane.settings import ControlPlaneSettings
from dataplane_agent.engines.claude_code import MANIFEST as CLAUDE_CODE
from dataplane_agent.relay.client import engine_manifest_proto
from serverkit import logs

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
PAGE_SIZE = 25  # what the sessions screen asks ListSessions for
CREATE_CONCURRENCY = 16

# Runs before the console's own scripts: the key in session storage, and a watch for the first page
# of rows that notes when it is in the document and when it has been painted.
INIT_SCRIPT = """
sessionStorage.setItem("astrabox.apiKey", %(key)s);
window.__rows = {};
new MutationObserver((_, observer) => {
  const table = document.querySelector("table.list");
  if (!table) return;
  // Only rows shown after ListSessions was asked: the table is busy first, then not.
  if (table.getAttribute("aria-busy") === "true") window.__rows.sawBusy = true;
  if (!window.__rows.sawBusy || table.getAttribute("aria-busy") !== "false") return;
  const rows = table.querySelectorAll("tbody tr a").length;
  const empty = table.querySelector("tbody td.empty");
  if (rows < %(expected)d && !(%(expected)d === 0 && empty)) return;
  observer.disconnect();
  window.__rows.inDocument = performance.now();
  window.__rows.count = rows;
  requestAnimationFrame(() => setTimeout(() => { window.__rows.painted = performance.now(); }, 0));
}).observe(document, { childList: true, subtree: true, attributes: true });
"""

FIGURES = """
new Promise((resolve) => {
  const poll = () => {
    if (window.__rows.painted === undefined) return setTimeout(poll, 20);
    const fcp = performance.getEntriesByName("first-contentful-paint")[0];
    const listed = performance.getEntriesByType("resource").find((e) => e.name.includes("/ListSessions"));
    // The entry is added once the response's body has been read, which may come after the rows.
    if (!listed) return setTimeout(poll, 20);
    resolve({
      fcp: fcp ? fcp.startTime : null,
      listed: listed ? listed.responseEnd : null,
      rows: window.__rows.painted,
      count: window.__rows.count,
    });
  };
  poll();
})
"""


@dataclasses.dataclass
class Project:
    name: str
    key: str
    sessions: int
    fcp: list[float] = dataclasses.field(default_factory=list)
    listed: list[float] = dataclasses.field(default_factory=list)
    rows: list[float] = dataclasses.field(default_factory=list)


async def populate(address: str, admin_key: str, sessions: int) -> str:
    """Creates `sessions` sessions in `default` and the project `empty`; returns `empty`'s admin key."""
    async with AstraBoxClient.connect(address, api_key=admin_key) as client:
        await client.admin.set_quotas(live_sessions=sessions + 100, sessions_per_minute=sessions + 100)
        empty = await client.admin.create_project("empty")
        empty_key = (await client.admin.create_api_key("paint", role="admin", project_id=empty.project_id)).secret
        began = time.perf_counter()
        limit = asyncio.Semaphore(CREATE_CONCURRENCY)

        async def create(i: int) -> None:
            async with limit:
                await client.create_session(
                    request_id=f"paint-{i}", labels={"bench": "console-paint", "team": f"t{i % 20}"}
                )

        await asyncio.gather(*(create(i) for i in range(sessions)))
        listed = await client.list_sessions(page_size=PAGE_SIZE)
        assert len(listed.sessions) == min(PAGE_SIZE, sessions), listed
        print(f"created {sessions} sessions in {time.perf_counter() - began:.1f} s", flush=True)
    return empty_key


async def paint(browser: Any, url: str, project: Project) -> tuple[float, float, float]:
    context = await browser.new_context(viewport={"width": 1366, "height": 768})
    try:
        expected = min(PAGE_SIZE, project.sessions)
        await context.add_init_script(INIT_SCRIPT % {"key": json.dumps(project.key), "expected": expected})
        page = await context.new_page()
        await page.goto(f"{url}/#/sessions")
        figures = await asyncio.wait_for(page.evaluate(FIGURES), timeout=60)
        assert figures.get("count") == expected, figures
        return float(figures["fcp"]), float(figures["listed"]), float(figures["rows"])
    finally:
        await context.close()


async def bench(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="astrabox-bench-paint-"))
    try:
        async with embedded_postgres(args.fast_postgres) as dsn:
            key_file, admin_key = api_key_file(work)
            settings = ControlPlaneSettings(
                database_url=dsn,
                listen="127.0.0.1:0",
                web_listen="127.0.0.1:0",
                bootstrap_key_file=str(key_file),
                # The stand-in agent never renews its lease: it must outlive the run.
                lease_ttl=timedelta(hours=1),
                idle_stop_after=timedelta(0),
            )
            pool = await create_pool(dsn, min_size=1, max_size=2)
            try:
                await migrate(pool)
                manifest = EngineManifest.from_proto(engine_manifest_proto(CLAUDE_CODE))
                agents = Agents(pool, settings.lease_ttl)
                await agents.register(AgentHello("bench-agent", "bench", ["local"], [manifest], args.sessions + 10, {}))
            finally:
                await pool.close()
            async with serve(settings) as control_plane:
                empty_key = await populate(control_plane.address, admin_key, args.sessions)
                projects = [Project("default", admin_key, args.sessions), Project("empty", empty_key, 0)]
                await measure(args, control_plane.web_url.rstrip("/"), projects)
            report(args, projects)
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def measure(args: argparse.Namespace, url: str, projects: list[Project]) -> None:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for _ in range(args.warmup):
                for project in projects:
                    await paint(browser, url, project)
            for run in range(args.runs):
                # Alternating, the first one each run in turn: neither always goes first.
                for project in projects if run % 2 == 0 else projects[::-1]:
                    fcp, listed, rows = await paint(browser, url, project)
                    project.fcp.append(fcp)
                    project.listed.append(listed)
                    project.rows.append(rows)
        finally:
            await browser.close()


def report(args: argparse.Namespace, projects: list[Project]) -> None:
    now = datetime.datetime.now().astimezone()
    postgres = "fast (fsync off)" if args.fast_postgres else "durable"
    print(
        f"console_paint  {now:%Y-%m-%d %H:%M %Z}  {revision()}  sessions={args.sessions} runs={args.runs}"
        f" warmup={args.warmup} postgres={postgres}  python {platform.python_version()}"
    )
    print()
    print("The sessions screen in headless Chromium, fresh context each run, ms from navigation start:")
    print()
    print("| project | sessions | figure | n | p50 ms | p90 ms | max ms |")
    print("|---|--:|---|--:|--:|--:|--:|")
    for project in projects:
        for name, values in (
            ("first-contentful-paint", project.fcp),
            ("ListSessions answered", project.listed),
            ("first page of rows", project.rows),
        ):
            p50, p90 = percentile(values, 50), percentile(values, 90)
            print(
                f"| {project.name} | {project.sessions} | {name} | {len(values)} | {p50:.1f} | {p90:.1f}"
                f" | {max(values):.1f} |"
            )
    listed, empty = projects
    print()
    for name, a, b in (
        ("first-contentful-paint", listed.fcp, empty.fcp),
        ("ListSessions answered", listed.listed, empty.listed),
        ("first page of rows", listed.rows, empty.rows),
    ):
        ratio = percentile(a, 50) / percentile(b, 50)
        diff = percentile(a, 50) - percentile(b, 50)
        print(f"{name}: {args.sessions} sessions / none = {ratio:.2f} (median {diff:+.1f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=1000, help="sessions listed (default %(default)s)")
    parser.add_argument("--runs", type=int, default=15, help="measured page loads per project (default %(default)s)")
    parser.add_argument(
        "--warmup", type=int, default=2, help="unmeasured loads per project first (default %(default)s)"
    )
    parser.add_argument("--fast-postgres", action="store_true", help="PostgreSQL with fsync off (default: durable)")
    args = parser.parse_args()
    logs.configure("json", "warning")
    asyncio.run(bench(args))


if __name__ == "__main__":
    main()
