"""Shared fixtures for the data-plane agent tests: the offline model, its route and a sandbox root."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dataplane_agent.offline_model import OfflineModel
from dataplane_agent.routes.model import ModelRoute, Upstream
from tests.support.containers import containers, sandbox_runtime  # noqa: F401 - fixtures


@pytest.fixture
async def offline_model() -> AsyncIterator[OfflineModel]:
    model = OfflineModel()
    await model.start()
    try:
        yield model
    finally:
        await model.stop()


@pytest.fixture
def bwrap() -> str:
    path = shutil.which("bwrap")
    if path is None:
        pytest.skip("bubblewrap is not installed")
    return path


@pytest.fixture
def sandbox_root(tmp_path: Path) -> Path:
    root = tmp_path / "sandboxes"
    root.mkdir()
    return root


@pytest.fixture
async def model_route(offline_model: OfflineModel, tmp_path: Path) -> AsyncIterator[ModelRoute]:
    """The offline model behind a model route, as the agent serves it to sandboxes."""
    async with ModelRoute(tmp_path / "model-route", Upstream(offline_model.base_url)) as route:
        yield route
