"""`astrabox run --agent NAME[@VERSION]` as a user runs it: an agent applied from its file, then one
prompt run in a session started from it (the real CLI, the offline model), pinned to the version
asked for; an agent that does not exist is one line and no session."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from astrabox.client import AstraBoxClient
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

ASTRABOX = [sys.executable, "-m", "astrabox"]


def astrabox(stack: Stack, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ASTRABOX, args[0], "--target", stack.address, *args[1:]], capture_output=True, text=True, timeout=300, cwd=cwd
    )


async def test_run_starts_its_session_from_the_agent_and_version_named(
    stack: Stack, client: AstraBoxClient, tmp_path: Path
) -> None:
    (tmp_path / "echo.yaml").write_text("name: echo\ndescription: first\n")
    assert astrabox(stack, "agents", "apply", "echo.yaml", cwd=tmp_path).stdout == "created echo v1\n"
    (tmp_path / "echo.yaml").write_text("name: echo\ndescription: second\n")
    assert astrabox(stack, "agents", "apply", "echo.yaml", cwd=tmp_path).stdout == "echo v2 (new version)\n"

    newest = astrabox(stack, "run", "--agent", "echo", "run: echo from-the-agent")
    assert newest.returncode == 0, newest.stderr
    first_line = newest.stdout.splitlines()[0]
    assert first_line.startswith("session ") and first_line.endswith(" (agent echo v2)")
    assert "from-the-agent" in newest.stdout
    session = await client.get_session(first_line.split()[1])
    assert (session.agent.name, session.agent.version) == ("echo", 2)

    pinned = astrabox(stack, "run", "--agent", "echo@1", "run: echo pinned")
    assert pinned.returncode == 0, pinned.stderr
    assert pinned.stdout.splitlines()[0].endswith(" (agent echo v1)")

    missing = astrabox(stack, "run", "--agent", "nobody", "run: echo never")
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr.startswith("astrabox: NOT_FOUND AGENT_NOT_FOUND: ") and len(missing.stderr.splitlines()) == 1
