"""`python -m dataplane_agent.offline_model --port N`: serve the offline model in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

from dataplane_agent.offline_model.server import OfflineModel
from serverkit import logs


async def _serve(host: str, port: int) -> None:
    model = OfflineModel()
    await model.start(host=host, port=port)
    print(model.base_url, flush=True)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopped.set)
    try:
        await stopped.wait()
    finally:
        await model.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dataplane_agent.offline_model", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default: 0, any free port)")
    parser.add_argument("--debug", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    # Logs go to stderr: stdout carries only the base URL, for scripts to read.
    logs.configure(level="debug" if args.debug else "warning", stream=sys.stderr)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.host, args.port))


if __name__ == "__main__":
    main()
