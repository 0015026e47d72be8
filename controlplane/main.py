"""`astrabox controlplane` / `python -m controlplane`: run the control plane until signalled."""

from __future__ import annotations

import asyncio
import signal
import sys

import structlog

from astrabox.secret_settings import warn_on_command_line
from controlplane.database import DatabaseUnreachable, SchemaMismatch
from controlplane.server import serve
from controlplane.settings import ControlPlaneSettings, SettingsError
from serverkit import heap, logs

log = structlog.get_logger(__name__)


async def run_until_signalled(settings: ControlPlaneSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with serve(settings) as running:
        heap.freeze_startup()  # the process's startup objects out of every later collection
        print(f"controlplane listening on {running.address}", flush=True)
        if running.metrics_address:
            print(f"controlplane metrics on http://{running.metrics_address}/metrics", flush=True)
        if running.web_url:
            print(f"controlplane web API and console on {running.web_url}", flush=True)
        await stop.wait()
        log.info("controlplane_stopping")


def main(argv: list[str] | None = None) -> None:
    try:
        settings = ControlPlaneSettings.from_args(argv)
    except SettingsError as error:
        sys.exit(f"astrabox controlplane: {error}")
    logs.configure()
    warn_on_command_line(settings.secrets_on_command_line, "astrabox controlplane", log)
    try:
        asyncio.run(run_until_signalled(settings))
    except SettingsError as error:
        sys.exit(f"astrabox controlplane: {error}")
    except SchemaMismatch as error:  # nothing was migrated, nothing served
        log.error("schema_mismatch", error=str(error))
        sys.exit(f"astrabox controlplane: {error}")
    except DatabaseUnreachable as error:
        # The URL goes to the log, where its password is masked, so the operator sees which database.
        log.error("database_unreachable", database_url=settings.database_url, error=str(error))
        sys.exit(f"astrabox controlplane: cannot connect to the database: {error}")
