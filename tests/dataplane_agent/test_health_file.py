"""The agent's health file (`dataplane_agent.health`) on a real agent database and a real local
driver: NOT_SERVING without a stream to the control plane or with a driver that cannot run, the
outbox's depth as it grows, and NOT_SERVING once the agent stops."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.health import HealthFile
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from dataplane_agent.state_database import Database


async def test_the_health_file_says_whether_the_agent_can_serve_and_how_deep_its_outbox_is(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "agent.db")
    outbox = Outbox(db)
    bwrap = tmp_path / "bwrap"  # the driver's bubblewrap, taken away below
    bwrap.symlink_to(shutil.which("bwrap") or "/usr/bin/bwrap")
    driver = LocalSandboxDriver(tmp_path / "sandboxes", bwrap=str(bwrap))
    await driver.probe()  # as the agent does at start
    connected = False
    path = tmp_path / "health.json"
    health = HealthFile(
        path, stream_connected=lambda: connected, outbox=outbox, driver=driver, write_interval=0.05,
        driver_probe_interval=0,
    )  # fmt: skip

    def read() -> dict[str, Any]:
        written: dict[str, Any] = json.loads(path.read_text())
        return written

    await health.write()
    assert read()["status"] == "NOT_SERVING" and read()["stream_connected"] is False
    assert (read()["outbox_depth"], read()["driver_usable"]) == (0, True)

    connected = True
    for session_id in ("s-1", "s-1", "s-2"):
        await outbox.append(session_id, "t-1", pb.EngineMessage(type_name="AssistantMessage", payload_json="{}"))
    await health.write()
    assert (read()["status"], read()["outbox_depth"], read()["outbox_sessions"]) == ("SERVING", 3, 2)
    assert "s-1" not in path.read_text()  # no session id

    bwrap.unlink()
    await health.write()
    assert (read()["status"], read()["driver_usable"]) == ("NOT_SERVING", False)
    assert "bubblewrap" in read()["driver_error"]

    bwrap.symlink_to(shutil.which("bwrap") or "/usr/bin/bwrap")
    running = asyncio.create_task(health.run())
    async with asyncio.timeout(30):
        while read()["status"] != "SERVING":
            await asyncio.sleep(0.05)
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    assert (read()["status"], read()["stopped"]) == ("NOT_SERVING", True)
    await db.close()
