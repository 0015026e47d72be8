"""A real Docker Engine for the docker driver's tests.

`require_docker()` skips the calling test, saying why, when no Docker daemon answers or the
sandbox image is missing (`./scripts/test` builds it as root when a daemon answers); under CI,
which builds the image whenever a daemon answers, a missing image fails the test instead.
`Containers` lists and removes what one test installation left, so a failing
test leaks nothing; the `containers` fixture gives each test its own.

`sandbox_runtime` runs a test once per OCI runtime (runc, runsc: gVisor); without runsc registered
with dockerd its runsc run skips, saying how to register it, and under CI (whose scripts register it:
`ensure_runsc`) it fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiodocker
import pytest

from dataplane_agent.sandboxes.base import INSTALLATION_LABEL
from dataplane_agent.sandboxes.isolation import RUNC, RUNSC, RUNTIMES
from dataplane_agent.settings import DEFAULT_IMAGE

_TIMEOUT = 30.0


async def require_docker(image: str = DEFAULT_IMAGE) -> None:
    try:
        async with asyncio.timeout(10):
            docker = aiodocker.Docker()
            async with docker:
                await docker.version()
    except (AssertionError, ValueError, OSError, TimeoutError, aiodocker.DockerError) as error:
        pytest.skip(
            f"no Docker daemon is reachable ({type(error).__name__}: {error}); start dockerd or set DOCKER_HOST"
        )
    async with aiodocker.Docker() as docker:
        try:
            await docker.images.inspect(image)
        except aiodocker.DockerError as error:
            if error.status != 404:
                raise
            if os.environ.get("CI"):
                pytest.fail(f"the sandbox image {image} is missing: .ci/run builds it before the tests")
            pytest.skip(_image_missing(image))


async def require_runtime(runtime: str) -> None:
    """Skips the calling test (fails it under CI) when dockerd does not know `runtime`."""
    if runtime == RUNC:
        return
    async with asyncio.timeout(_TIMEOUT), aiodocker.Docker() as docker:
        known = (await docker.system.info()).get("Runtimes") or {}
    if runtime in known:
        return
    why = (
        f"the Docker daemon has no runtime {runtime!r} (it has: {', '.join(sorted(known))}): `apt-get install runsc`"
        " and register it (scripts/test's ensure_runsc: `source scripts/test && ensure_runsc`, as root)"
    )
    if os.environ.get("CI"):
        pytest.fail(f"{why}; .ci/run registers it before the tests")
    pytest.skip(why)


def _image_missing(image: str) -> str:
    """Why the docker tests skip without the sandbox image, and what makes it."""
    if os.geteuid() != 0:
        return (
            f"the sandbox image {image} is missing, and building it needs root: run `sudo .venv/bin/astrabox "
            "image build` (or ./scripts/test as root, which builds it when a Docker daemon answers)"
        )
    return (
        f"the sandbox image {image} is missing: run `.venv/bin/astrabox image build` (./scripts/test builds "
        "it when a Docker daemon answers; see its output for why it did not)"
    )


def new_installation() -> str:
    return f"test-{uuid.uuid4().hex[:10]}"


class Containers:
    """The containers of one installation."""

    def __init__(self, installation: str) -> None:
        self.installation = installation

    async def list(self) -> list[dict[str, Any]]:
        filters = json.dumps({"label": [f"{INSTALLATION_LABEL}={self.installation}"]})
        async with asyncio.timeout(_TIMEOUT), aiodocker.Docker() as docker:
            return [c._container for c in await docker.containers.list(all="1", filters=filters)]

    async def inspect(self, name: str) -> dict[str, Any] | None:
        async with asyncio.timeout(_TIMEOUT), aiodocker.Docker() as docker:
            try:
                return (await docker.containers.get(name))._container
            except aiodocker.DockerError as error:
                if error.status == 404:
                    return None
                raise

    async def remove_all(self) -> None:
        async with asyncio.timeout(_TIMEOUT), aiodocker.Docker() as docker:
            for info in await self.list():
                with contextlib.suppress(aiodocker.DockerError):
                    await docker.containers.container(info["Id"]).delete(force=True)


@pytest.fixture
async def containers() -> AsyncIterator[Containers]:
    """A test installation of its own; every container of it is removed afterwards. Skips without Docker."""
    await require_docker()
    containers = Containers(new_installation())
    try:
        yield containers
    finally:
        await containers.remove_all()


def memory_mb(runtime: str) -> int:
    """A small sandbox's memory limit under `runtime`: under runsc it also holds gVisor's own kernel and
    page cache (about 100 MB here), and a sandbox at 256 MB was killed whole by the host's OOM killer."""
    return 512 if runtime == RUNSC else 256


def pids(runtime: str) -> int:
    """A small sandbox's pids limit under `runtime`: under runsc it counts gVisor's host threads and the
    ptrace platform's stub processes, and at 128 a few relays and shells made gVisor fail whole."""
    return 512 if runtime == RUNSC else 128


@pytest.fixture(params=RUNTIMES)
async def sandbox_runtime(request: pytest.FixtureRequest) -> str:
    """Each OCI runtime in turn (`require_runtime`): a test taking it runs under runc and under gVisor."""
    runtime: str = request.param
    await require_docker()
    await require_runtime(runtime)
    return runtime
