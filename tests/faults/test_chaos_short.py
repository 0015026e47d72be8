"""CI's short chaos round: `bench/chaos.py` for two minutes with a fixed seed, every fault kind on
the table, and not one violation (lost, duplicated or stuck input, watcher off the journal,
unsettled session, leaked sandbox, error a client must never see)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SEED = 11


@pytest.mark.timeout(900)
def test_a_short_chaos_round_breaks_no_promise() -> None:
    argv = [sys.executable, "bench/chaos.py", "--duration", "120", "--seed", str(SEED), "--sessions", "3",
            "--fault-gap", "1", "4", "--settle", "150", "--quiet", "45"]  # fmt: skip
    paths = [str(ROOT), str(ROOT / "clients" / "python"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=840, check=False)
    report = result.stdout + "\n--- stderr (tail) ---\n" + result.stderr[-4000:]
    faults = re.search(r"^faults: (\d+)", result.stdout, re.MULTILINE)
    turns = re.search(r"turns: (\d+) accepted, (\d+) completed", result.stdout)
    assert faults and turns, report
    # The round did what it is for: faults were injected while turns ran to their end.
    assert int(faults[1]) >= 10 and int(turns[2]) >= 5, report
    assert result.returncode == 0 and "violations: none" in result.stdout, report
