"""The control plane's process (`python -m controlplane`: `run_until_signalled`) serves with the
objects it started with frozen (serverkit.heap): a full collection, which stalls every stream of the
process while it runs, scans only what was made since, not the tens of thousands of startup objects."""

from __future__ import annotations

import asyncio
import gc
import signal

import pytest

from controlplane.main import run_until_signalled
from tests.controlplane.test_quotas import settings


async def test_a_serving_control_plane_leaves_its_startup_objects_out_of_collections(
    database_url: str, bootstrap_key_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    gc.unfreeze()
    process = asyncio.create_task(run_until_signalled(settings(database_url, bootstrap_key_file)))
    try:
        printed = ""
        async with asyncio.timeout(30):
            while "controlplane listening on" not in printed and not process.done():
                await asyncio.sleep(0.01)
                printed += capsys.readouterr().out
        assert not process.done(), process
        # What a full collection scans (gc.get_objects: the generations, not the frozen) is fewer
        # objects than were frozen: most of the heap is out of every collection.
        assert len(gc.get_objects()) < gc.get_freeze_count()
    finally:
        process.cancel()
        await asyncio.gather(process, return_exceptions=True)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):  # run_until_signalled's, on the tests' shared loop
            loop.remove_signal_handler(sig)
        gc.unfreeze()
