"""How the docker driver's tests get their sandbox image, or skip saying why: `./scripts/test` builds
the image when a Docker daemon answers and it is missing (as root), and `require_docker` skips each
test with the one reason it cannot run (no daemon; no image, and what builds it), never an error."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from dataplane_agent.settings import DEFAULT_IMAGE
from tests.support.containers import require_docker

ROOT = Path(__file__).resolve().parents[1]


def _fake(directory: Path, name: str, script: str) -> None:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)


def _ensure_sandbox_image(
    tmp_path: Path, *, daemon: bool, image: bool, uid: int
) -> tuple[subprocess.CompletedProcess[str], str]:
    """scripts/test's ensure_sandbox_image with docker, id, debootstrap and the venv's commands
    faked: what it printed, and what `astrabox` was asked to do."""
    bin_dir, venv = tmp_path / "bin", tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    bin_dir.mkdir()
    calls = tmp_path / "astrabox-calls"
    _fake(
        bin_dir,
        "docker",
        f'case "$1" in info) exit {0 if daemon else 1};; image) exit {0 if image else 1};; esac; exit 2',
    )
    _fake(bin_dir, "id", f'[ "$1" = -u ] && echo {uid} || exec /usr/bin/id "$@"')
    _fake(bin_dir, "debootstrap", "exit 0")
    _fake(venv / "bin", "python", f"echo {DEFAULT_IMAGE}")
    _fake(venv / "bin", "astrabox", f'echo "$@" >> {calls}')
    result = subprocess.run(
        ["bash", "-c", f'source scripts/test && VENV="{venv}" && ensure_sandbox_image'],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )
    return result, calls.read_text() if calls.exists() else ""


@pytest.mark.parametrize("uid", [0, 1000])
def test_scripts_test_builds_the_missing_image_as_root_and_otherwise_says_why_not(tmp_path: Path, uid: int) -> None:
    result, built = _ensure_sandbox_image(tmp_path, daemon=True, image=False, uid=uid)

    assert result.returncode == 0, result.stderr
    if uid == 0:
        assert built == f"image build --tag {DEFAULT_IMAGE}\n"
        assert f"astrabox image build --tag {DEFAULT_IMAGE}" in result.stderr
    else:
        assert built == ""
        assert f"the sandbox image {DEFAULT_IMAGE} is missing and building it needs root" in result.stderr
        assert "the docker driver's tests will skip" in result.stderr


@pytest.mark.parametrize(("daemon", "image"), [(False, False), (True, True)])
def test_scripts_test_builds_nothing_without_a_daemon_or_with_the_image(
    tmp_path: Path, daemon: bool, image: bool
) -> None:
    result, built = _ensure_sandbox_image(tmp_path, daemon=daemon, image=image, uid=0)

    assert result.returncode == 0, result.stderr
    assert (built, result.stderr) == ("", "")


@pytest.fixture
async def daemon_without_the_image(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    """A Docker Engine API that answers and holds no image, at DOCKER_HOST."""

    async def answer(request: web.Request) -> web.Response:
        if request.path.endswith("/version"):
            return web.json_response({"Version": "27.0.0", "ApiVersion": "1.47"})
        return web.json_response({"message": f"No such image: {DEFAULT_IMAGE}"}, status=404)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{port}")
    monkeypatch.delenv("CI", raising=False)
    try:
        yield
    finally:
        await runner.cleanup()


async def test_a_missing_image_skips_the_docker_tests_saying_what_builds_it(daemon_without_the_image: None) -> None:
    with pytest.raises(pytest.skip.Exception) as skipped:
        await require_docker()

    reason = str(skipped.value)
    assert reason.startswith(f"the sandbox image {DEFAULT_IMAGE} is missing")
    assert ("needs root" in reason) == (os.geteuid() != 0) and "astrabox image build" in reason


async def test_no_daemon_skips_the_docker_tests_saying_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")

    with pytest.raises(pytest.skip.Exception) as skipped:
        await require_docker()

    assert str(skipped.value).startswith("no Docker daemon is reachable")
