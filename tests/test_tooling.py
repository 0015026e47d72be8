"""The wire contracts pass buf, and the checked-in generated code is current."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ROOT / "clients" / "python"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", ".binpb")
# buf comes from the buf-bin package of the test extra, installed beside python.
BUF = Path(sys.executable).parent / "buf"


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def generated_files(root: Path) -> set[Path]:
    return {path.relative_to(root) for path in (root / "astrabox").rglob("*") if path.name.endswith(GENERATED_SUFFIXES)}


def test_buf_lint_passes() -> None:
    result = run(BUF, "lint")
    assert result.returncode == 0, result.stdout + result.stderr


def test_buf_build_passes() -> None:
    result = run(BUF, "build", "-o", "/dev/null")
    assert result.returncode == 0, result.stdout + result.stderr


def test_checked_in_generated_code_matches_a_fresh_generation(tmp_path: Path) -> None:
    result = run(sys.executable, GENERATED / "generate.py", "--out", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr

    fresh, checked_in = generated_files(tmp_path), generated_files(GENERATED)
    assert fresh, "the generator produced nothing"
    assert sorted(fresh - checked_in) == [], "generated files missing from the repo"
    assert sorted(checked_in - fresh) == [], "stale generated files in the repo"
    differing = [str(p) for p in sorted(fresh) if not filecmp.cmp(tmp_path / p, GENERATED / p, shallow=False)]
    assert differing == [], "regenerate with: python clients/python/generate.py"
    packages = {p.relative_to(tmp_path) for p in tmp_path.rglob("__init__.py")}
    assert all((GENERATED / p).is_file() for p in packages), "package __init__.py files missing"
