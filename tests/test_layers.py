"""The layer contracts in pyproject.toml ([tool.importlinter]) hold, and `lint-imports` fails,
naming the import, when a copy of the tree is given one that breaks them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
# Where each root package lives, relative to the repository.
PACKAGES = ("controlplane", "dataplane_agent", "astrabox_server", "clients/python/astrabox")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports on the tree at `root`, whose packages come first on the path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "clients" / "python")])}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(root / "pyproject.toml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the packages and the contracts."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_repository_keeps_every_layer_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "bad_import", "names"),
    [
        ("clients/python/astrabox/render.py", "import controlplane.journal", "astrabox.render -> controlplane.journal"),
        ("clients/python/astrabox/client.py", "import asyncpg", "astrabox.client -> asyncpg"),
        (
            "controlplane/kernel.py",
            "from dataplane_agent.relay import outbox",
            "controlplane.kernel -> dataplane_agent.relay.outbox",
        ),
        (
            "dataplane_agent/relay/client.py",
            "import controlplane.errors",
            "dataplane_agent.relay.client -> controlplane.errors",
        ),
        (
            "dataplane_agent/relay/outbox.py",
            "from astrabox_server import stack",
            "dataplane_agent.relay.outbox -> astrabox_server.stack",
        ),
        ("controlplane/engines.py", "import claude_agent_sdk", "controlplane.engines -> claude_agent_sdk"),
    ],
)
def test_a_bad_import_fails_the_check_naming_it(tree: Path, module: str, bad_import: str, names: str) -> None:
    assert lint_imports(tree).returncode == 0  # the copy itself is fine
    with open(tree / module, "a") as source:
        source.write(f"\n{bad_import}  # the deliberate violation\n")
    result = lint_imports(tree)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "BROKEN" in result.stdout and names in result.stdout, result.stdout
