"""`astrabox controlplane` / `python -m controlplane`: run the control plane until signalled."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

import structlog

from controlplane import logs
from controlplane.server import serve
from controlplane.settings import ControlPlaneSettings, SettingsError

log = structlog.get_logger(__name__)


async def run_until_signalled(settings: ControlPlaneSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with serve(settings) as running:
        print(f"controlplane listening on {running.address}", flush=True)
        await stop.wait()
        log.info("controlplane_stopping")


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="astrabox controlplane", description=__doc__)
    ControlPlaneSettings.add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if not args.database_url:
        sys.exit("astrabox controlplane needs --database-url (or ASTRABOX_DATABASE_URL); `astrabox up` embeds one")
    logs.configure()
    try:
        asyncio.run(run_until_signalled(ControlPlaneSettings.from_args(args)))
    except SettingsError as error:
        sys.exit(f"astrabox controlplane: {error}")
