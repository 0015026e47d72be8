"""Environment layers on the local driver: packages fetched on the host (the real apt and pip, the host's
registries), installed in a sandbox without network, mounted read-only into the environment's sandboxes;
built once per digest and shared, never left half-built, a failure in the package manager's own words,
and old unused layers swept."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from astrabox.environments.v1 import environment_pb2 as env_pb
from dataplane_agent.environments.layers import BuildRequest, LayerStore
from dataplane_agent.environments.local_layers import LocalLayers
from dataplane_agent.environments.steps import LayerBuildError
from dataplane_agent.sandboxes.base import Sandbox, SandboxSpec
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from dataplane_agent.settings import AgentSettings
from dataplane_agent.state import AgentState
from dataplane_agent.state_database import Database

# Not on the host (checked below), so only the layer can bring it.
APT_PACKAGE = "tree"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _request(*, apt: tuple[str, ...] = (), pip: tuple[str, ...] = (), setup: str = "") -> BuildRequest:
    spec = env_pb.EnvironmentSpec(packages=env_pb.Packages(apt=apt, pip=pip), setup_script=setup)
    return BuildRequest.from_spec(_digest(spec.SerializeToString(deterministic=True).hex()), spec)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def driver(sandbox_root: Path, bwrap: str) -> LocalSandboxDriver:
    return LocalSandboxDriver(sandbox_root, bwrap=bwrap)


@pytest.fixture
async def state(tmp_path: Path) -> AsyncIterator[AgentState]:
    db = await Database.open(tmp_path / "agent.db")
    yield AgentState(db)
    await db.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def store(tmp_path: Path, driver: LocalSandboxDriver, state: AgentState, clock: Clock) -> LayerStore:
    layers = LayerStore(LocalLayers(tmp_path / "layers", driver, "agent-1"), state, retention=86400.0, clock=clock)
    await layers.start()
    return layers


async def _sh(driver: LocalSandboxDriver, sandbox: Sandbox, script: str) -> subprocess.CompletedProcess[str]:
    launcher = await driver.launcher(sandbox, ["/bin/sh", "-c"], {"HOME": "/ignored", "ASTRABOX_OWN": "ours"})
    return await asyncio.to_thread(subprocess.run, [str(launcher), script], capture_output=True, text=True, timeout=60)


def test_the_apt_package_is_not_on_the_host() -> None:
    assert subprocess.run(["dpkg", "-s", APT_PACKAGE], capture_output=True).returncode != 0


async def test_pip_and_apt_packages_are_usable_in_the_sandbox_and_the_layer_is_built_once(
    store: LayerStore, driver: LocalSandboxDriver, tmp_path: Path
) -> None:
    request = _request(apt=(APT_PACKAGE,), pip=("six",))
    layer = await store.ensure(request)
    assert layer.path == tmp_path / "layers" / request.build_digest and store.builds == 1
    built_at = layer.path.stat().st_mtime_ns

    spec = SandboxSpec(
        session_id="with-env", agent_id="agent-1", layer=layer.path, variables={"GREETING": "hi", "ASTRABOX_OWN": "x"}
    )
    sandbox = await driver.create(spec)
    result = await _sh(
        driver,
        sandbox,
        "python3 -c 'import six; print(six.__name__)' && tree --version && echo $GREETING $ASTRABOX_OWN $HOME"
        " && touch /opt/astrabox/env/written 2>/dev/null || echo read-only",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "six" and lines[1].startswith("tree v")
    # The environment's variables are seen; AstraBox's own (the launcher's, HOME) win.
    assert lines[2] == "hi ours /home/agent"
    assert lines[3] == "read-only" and not (layer.path / "written").exists()

    plain = await driver.create(SandboxSpec(session_id="without-env", agent_id="agent-1"))
    assert (await _sh(driver, plain, "tree --version")).returncode == 127

    again = await store.ensure(request)
    assert again == layer and store.builds == 1
    assert layer.path.stat().st_mtime_ns == built_at


async def test_a_missing_pip_package_fails_with_pips_message_and_leaves_no_layer(
    store: LayerStore, tmp_path: Path
) -> None:
    request = _request(pip=("astrabox-no-such-package-zz",))
    with pytest.raises(LayerBuildError, match="No matching distribution found for astrabox-no-such-package-zz"):
        await store.ensure(request)
    assert not (tmp_path / "layers" / request.build_digest).exists()
    assert list((tmp_path / "layers" / ".staging").iterdir()) == []
    # Not remembered as built: the next start tries again.
    with pytest.raises(LayerBuildError):
        await store.ensure(request)
    assert store.builds == 2


async def test_a_missing_apt_package_fails_with_apts_message(store: LayerStore, tmp_path: Path) -> None:
    request = _request(apt=("astrabox-no-such-package-zz",))
    with pytest.raises(LayerBuildError, match="Unable to locate package astrabox-no-such-package-zz") as failed:
        await store.ensure(request)
    assert failed.value.phase == "apt" and len(str(failed.value)) < 4200
    assert not (tmp_path / "layers" / request.build_digest).exists()


async def test_a_failing_setup_script_fails_the_build_with_its_output(store: LayerStore, tmp_path: Path) -> None:
    request = _request(setup="echo 'configuring widgets'; echo 'widget config is broken' >&2; exit 3")
    with pytest.raises(LayerBuildError, match="widget config is broken"):
        await store.ensure(request)
    assert not (tmp_path / "layers" / request.build_digest).exists()


async def test_a_setup_script_longer_than_the_build_timeout_fails_the_build_saying_so(
    tmp_path: Path, driver: LocalSandboxDriver, state: AgentState
) -> None:
    """--layer-build-timeout reaches the builder: a step still running after it is stopped."""
    settings = AgentSettings.from_args(["--layer-build-timeout", "1"], {})
    store = LayerStore(
        LocalLayers(tmp_path / "layers", driver, "agent-1", step_timeout=settings.layer_build_timeout), state
    )
    await store.start()
    request = _request(setup="sleep 120")
    with pytest.raises(LayerBuildError, match="did not finish within 1s") as failed:
        await store.ensure(request)
    assert failed.value.phase == "setup"
    assert not (tmp_path / "layers" / request.build_digest).exists()


async def test_an_entry_that_is_an_option_is_refused_before_any_manager_runs() -> None:
    spec = env_pb.EnvironmentSpec(packages=env_pb.Packages(pip=["--index-url=http://evil.example/"]))
    with pytest.raises(LayerBuildError, match="is not a package name"):
        BuildRequest.from_spec(_digest("x"), spec)


async def test_concurrent_starts_share_one_build(store: LayerStore) -> None:
    request = _request(setup='echo built > "$ASTRABOX_LAYER/marker"')
    layers = await asyncio.gather(*(store.ensure(request) for _ in range(3)))
    assert store.builds == 1 and len(set(layers)) == 1
    assert layers[0].path is not None and (layers[0].path / "marker").read_text() == "built\n"


async def test_a_crashed_builds_debris_is_removed_at_start(
    tmp_path: Path, driver: LocalSandboxDriver, state: AgentState
) -> None:
    debris = tmp_path / "layers" / ".staging" / "abc-1234"
    debris.mkdir(parents=True)
    await LayerStore(LocalLayers(tmp_path / "layers", driver, "agent-1"), state).start()
    assert not debris.exists()


async def test_the_sweep_removes_an_old_unused_layer_and_keeps_a_used_one(
    store: LayerStore, clock: Clock, tmp_path: Path
) -> None:
    used = await store.ensure(_request(setup="true # used"))
    unused = await store.ensure(_request(setup="true # unused"))
    clock.now += 3600
    assert await store.sweep(in_use={used.build_digest}) == []  # within the retention
    clock.now += 2 * 86400
    assert await store.sweep(in_use={used.build_digest}) == [unused.build_digest]
    assert used.path is not None and used.path.is_dir()
    assert not (tmp_path / "layers" / unused.build_digest).exists()
    # A session held it all along: still kept once it is released and the retention has not passed.
    clock.now += 3600
    assert await store.sweep(in_use=set()) == []
