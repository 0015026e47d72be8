"""Shared fixtures for the data-plane agent tests: the offline model and a sandbox root."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dataplane_agent.offline_model import OfflineModel


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
