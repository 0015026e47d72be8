"""`astrabox up` as a person runs it: its terminal shows the banner and readable lines only (the
logs go to <data dir>/astrabox.log), it stops on Ctrl-C without a traceback, and the halves'
settings it takes (metrics, capacity, idle stop) reach them from a flag, a variable or its config
file."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from dataplane_agent.sandboxes.disk import release_mounts
from tests.support.processes import Process

pytestmark = pytest.mark.e2e

ASTRABOX = str(Path(sys.executable).with_name("astrabox"))
# What asyncio or Python prints when something went wrong out of sight.
NOT_FOR_A_TERMINAL = (
    "Traceback (most recent call last)",
    "Exception in callback",
    "Task was destroyed",
    "exception was never retrieved",
)


def unreadable_lines(output: str) -> list[str]:
    """The lines of `output` a person should never see on a terminal: JSON log lines, tracebacks."""
    found = [line for line in output.splitlines() if any(marker in line for marker in NOT_FOR_A_TERMINAL)]
    for line in output.splitlines():
        try:
            if isinstance(json.loads(line), dict):
                found.append(line)
        except ValueError:
            continue
    return found


StartUp = Callable[..., tuple[Process, str]]


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data directory outside pytest's (0700) temporary tree: as root the embedded PostgreSQL runs
    as `postgres`, which must get through to it."""
    scratch = Path(tempfile.mkdtemp(prefix="astrabox-up-test-"))
    scratch.chmod(0o711)
    try:
        yield scratch / "data"
    finally:
        release_mounts(scratch)
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture
def start_up(tmp_path: Path, data_dir: Path) -> Iterator[StartUp]:
    """Starts `astrabox up` on free ports in `data_dir`; Ctrl-C'd (SIGINT, as a terminal sends it)
    at the end if still running. Its terminal's output (stdout and stderr) is in up.log."""
    started: list[Process] = []

    def start(*args: str, env: dict[str, str] | None = None) -> tuple[Process, str]:
        argv = [ASTRABOX, "up", "--listen", "127.0.0.1:0", "--web-listen", "127.0.0.1:0"]
        argv += ["--data-dir", str(data_dir), *args]
        model = {"ANTHROPIC_API_KEY": "", "ASTRABOX_MODEL_BASE_URL": ""}  # the offline model answers
        up = Process("up", argv, tmp_path / "up.log", {**model, **(env or {})})
        started.append(up)
        return up, up.wait_for_line(r"AstraBox is up on (\S+)", timeout=180).group(1)

    yield start
    for up in started:
        if up.proc.poll() is None:
            interrupt(up)
        up.stop(timeout=60)


def interrupt(up: Process) -> int:
    os.killpg(up.proc.pid, signal.SIGINT)
    return up.proc.wait(timeout=60)


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return str(response.read().decode())


async def test_up_reads_its_config_file_serves_both_halves_metrics_and_leaves_a_readable_terminal(
    start_up: StartUp, tmp_path: Path, data_dir: Path
) -> None:
    config = tmp_path / "up.toml"
    config.write_text('metrics_listen = "127.0.0.1:0"\ncapacity = 1\n')

    up, address = start_up("--config", str(config))

    controlplane, agent = up.wait_for_line(r"metrics: control plane (http://\S+), agent (http://\S+)").groups()
    assert "astrabox_database_up 1.0" in scrape(controlplane)
    assert "astrabox_agent_relay_connected 1.0" in scrape(agent)
    log_file = up.wait_for_line(r"logs: (\S+)").group(1)
    assert log_file == str(data_dir / "astrabox.log")

    # The file's capacity reached the agent: one live runtime, and no room for a second.
    async with AstraBoxClient.connect(address) as client:
        await client.start_session(ready_timeout=120)
        with pytest.raises(AstraBoxError) as refused:
            await client.create_session()
    assert (refused.value.code, refused.value.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "CAPACITY_EXHAUSTED")

    assert interrupt(up) == 0
    output = up.output()
    assert unreadable_lines(output) == [], output
    logged = [json.loads(line) for line in Path(log_file).read_text().splitlines()]
    events = {entry["event"] for entry in logged}
    assert {"controlplane_listening", "agent_started", "agent_stopped", "embedded_postgres_stopped"} <= events


async def test_up_hands_idle_stop_after_from_its_environment_to_the_control_plane(start_up: StartUp) -> None:
    up, address = start_up(env={"ASTRABOX_IDLE_STOP_AFTER": "1"})

    async with AstraBoxClient.connect(address) as client:
        session = await client.start_session(ready_timeout=120)
        async with asyncio.timeout(60):
            while not (await client.get_session(session.id)).runtime_stopped:
                await asyncio.sleep(0.5)

    assert interrupt(up) == 0
    output = up.output()
    assert unreadable_lines(output) == [], output


async def test_up_with_a_log_format_puts_every_log_line_on_the_terminal(start_up: StartUp, data_dir: Path) -> None:
    up, _ = start_up("--log-format", "json")
    up.wait_for_line(r'"event": "agent_started"')
    assert "logs: " not in up.tail(100)
    assert interrupt(up) == 0
    assert not (data_dir / "astrabox.log").exists()
