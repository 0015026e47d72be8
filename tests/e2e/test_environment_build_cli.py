"""`astrabox environments build` and `apply` as a user runs them against a real stack (a real agent on
the local driver building with the host's pip): each agent's progress shown as it streams, then READY
and exit 0 for a tiny environment (pip `six`), or FAILED with pip's own error and exit 1 for a package
that does not exist. Also `client.environments.build` yielding the steps as dataclasses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from astrabox.client import AstraBoxClient
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

ASTRABOX = [sys.executable, "-m", "astrabox"]
MISSING = "astrabox-no-such-package-4f1c"


def astrabox(stack: Stack, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ASTRABOX, args[0], "--target", stack.address, *args[1:]], capture_output=True, text=True, timeout=600, cwd=cwd
    )


async def test_build_shows_progress_then_ready_or_the_pip_error(
    stack: Stack, client: AstraBoxClient, tmp_path: Path
) -> None:
    (tmp_path / "tiny.yaml").write_text("name: tiny\npackages:\n  pip: [six]\n")
    applied = astrabox(stack, "environments", "apply", "--no-build", "tiny.yaml", cwd=tmp_path)
    assert (applied.returncode, applied.stdout) == (0, "created tiny v1\n"), applied.stderr

    built = astrabox(stack, "environments", "build", "tiny", "--wait")
    assert built.returncode == 0, built.stdout + built.stderr
    lines = built.stdout.splitlines()
    agent_id = lines[-1].split()[0]
    # Not a terminal: one line per step, the steps before the end, READY last.
    assert any(line.startswith(f"{agent_id}  [") and "pip" in line for line in lines[:-1]), built.stdout
    assert "READY" in lines[-1] and "100%" in lines[-1], built.stdout
    assert "FAILED" not in built.stdout

    # Built once: asked again, the agent answers READY at once.
    again = [step async for step in client.environments.build("tiny", 1)]
    assert [(s.agent_id, s.state) for s in again][-1] == (agent_id, "ready")
    assert again[-1].build_digest == (await client.environments.get("tiny"))[1].build_digest

    (tmp_path / "broken.yaml").write_text(f"name: broken\npackages:\n  pip: [{MISSING}]\n")
    failed = astrabox(stack, "environments", "apply", "broken.yaml", cwd=tmp_path)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    out = failed.stdout.splitlines()
    assert out[0] == "created broken v1"
    failure = next(i for i, line in enumerate(out) if "FAILED" in line)
    assert out[failure].startswith(f"{agent_id}  FAILED (pip)"), failed.stdout
    # pip's own words, below the line, indented.
    error = "\n".join(out[failure + 1 :])
    assert error.startswith("    ") and "No matching distribution found" in error and MISSING in error, failed.stdout


async def test_build_without_wait_returns_at_the_first_step_and_the_build_goes_on(
    stack: Stack, client: AstraBoxClient, tmp_path: Path
) -> None:
    (tmp_path / "tiny.yaml").write_text("name: tiny\npackages:\n  pip: [six]\n")
    assert astrabox(stack, "environments", "apply", "--no-build", "tiny.yaml", cwd=tmp_path).returncode == 0
    started = astrabox(stack, "environments", "build", "tiny")
    assert started.returncode == 0, started.stderr
    assert started.stdout.splitlines()[-1] == "the build goes on on the agents; `--wait` follows it to its end"
    # The build went on without the caller: its end is READY.
    steps = [step async for step in client.environments.build("tiny")]
    assert steps[-1].state == "ready" and steps[-1].done

    unknown = astrabox(stack, "environments", "build", "tiny", "--agent", "agent-nobody", "--wait")
    assert unknown.returncode == 1 and "AGENT_NOT_CONNECTED" in unknown.stderr, unknown.stderr
