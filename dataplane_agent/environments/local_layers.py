"""The local driver's layers: prefix directories `<root>/<build_digest>/`, mounted read-only.

A build fetches on the host (`downloads`), then installs inside a sandbox of the local driver itself
— no network, the sandbox's own user, its limits — whose workspace is the build's only writable
place: Debian packages extracted with `dpkg-deb -x` (their maintainer scripts never run), wheels
installed with `pip install --no-index --target`, then the setup script. The result is copied into
`<root>/.staging/` and renamed to `<root>/<build_digest>` only when every step succeeded.

The setup script alone may reach the network, through the agent's egress proxy under the
environment's own network policy (`BuildNetwork`; a policy of NONE, or no proxy: no way out), with
no credential: a layer is shared by every environment with its build digest."""

from __future__ import annotations

import asyncio
import os
import secrets
import shlex
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path

from dataplane_agent.environments.downloads import download
from dataplane_agent.environments.layers import DIGEST, BuildNetwork, BuildRequest, Layer, Progress
from dataplane_agent.environments.steps import STEP_TIMEOUT, LayerBuildError, run_step
from dataplane_agent.sandboxes.base import AGENT_LABEL, LAYER_BUILD_LABEL, Sandbox, SandboxDriver, SandboxSpec
from dataplane_agent.sandboxes.layer_mount import layer_env

_STAGING = ".staging"


def _install_script(request: BuildRequest) -> str:
    """What runs inside the build sandbox, in its workspace (downloads/ read, layer/ written)."""
    lines = ["set -e", "cd /workspace", "mkdir -p layer/usr layer/python layer/node"]
    if request.packages.apt:
        lines.append('for deb in downloads/apt/*.deb; do [ -e "$deb" ] || continue; dpkg-deb -x "$deb" layer; done')
    if request.packages.pip:
        lines.append(
            "python3 -m pip install --no-index --find-links downloads/pip --target layer/python --no-input"
            " --disable-pip-version-check --no-cache-dir -- " + shlex.join(request.packages.pip)
        )
    if request.packages.npm:
        lines.append("cp -R downloads/node/. layer/node/")
    return "\n".join(lines) + "\n"


class LocalLayers:
    """Prefix layers under `root`, installed in sandboxes of `driver`; setup scripts go out through
    `network` (None: never); each step of a build (a download, the install, the setup script) within
    `step_timeout` seconds."""

    def __init__(
        self,
        root: Path,
        driver: SandboxDriver,
        agent_id: str,
        network: BuildNetwork | None = None,
        step_timeout: float = STEP_TIMEOUT,
    ) -> None:
        self._root = Path(root)
        self._step_timeout = step_timeout
        self._driver = driver
        self._agent_id = agent_id
        self._network = network

    def path(self, build_digest: str) -> Path:
        return self._root / build_digest

    async def existing(self, build_digest: str) -> Layer | None:
        path = self.path(build_digest)
        return Layer(build_digest, path=path) if path.is_dir() else None

    async def built(self) -> list[str]:
        if not self._root.is_dir():
            return []
        return sorted(entry.name for entry in self._root.iterdir() if DIGEST.fullmatch(entry.name) and entry.is_dir())

    async def remove(self, build_digest: str) -> None:
        path = self.path(build_digest)
        if not path.exists():
            return
        # Renamed into staging first: a removal cut short leaves debris, never a partial layer.
        doomed = self._staging() / f"removed-{build_digest}-{secrets.token_hex(4)}"
        os.rename(path, doomed)
        await asyncio.to_thread(shutil.rmtree, doomed, True)

    async def clean(self) -> None:
        await asyncio.to_thread(shutil.rmtree, self._root / _STAGING, True)

    def _staging(self) -> Path:
        staging = self._root / _STAGING
        staging.mkdir(parents=True, exist_ok=True)
        self._root.chmod(0o755)  # the layers are read by sandbox users; what is inside is not secret
        return staging

    async def build(self, request: BuildRequest, progress: Progress) -> Layer:
        work = self._staging() / f"{request.build_digest}-{secrets.token_hex(4)}"
        work.mkdir(mode=0o755)
        try:
            downloads = work / "downloads"
            downloads.mkdir()
            await download(request.packages, downloads, progress, step_timeout=self._step_timeout)
            await progress("install", "installing in a sandbox without network", 60)
            built = await self._install(request, downloads, work)
            await progress("commit", "making the layer usable", 95)
            await asyncio.to_thread(_publish_readable, built)
            target = self.path(request.build_digest)
            try:
                os.rename(built, target)
            except OSError as error:
                raise LayerBuildError("commit", f"cannot put the layer in place: {error.strerror}") from error
            return Layer(request.build_digest, path=target)
        finally:
            await asyncio.to_thread(shutil.rmtree, work, True)

    async def _install(self, request: BuildRequest, downloads: Path, work: Path) -> Path:
        """Run the install steps and the setup script in a sandbox; the layer's directory in `work`."""
        owner = f"layer-{request.build_digest[:20]}-{secrets.token_hex(3)}"
        network = self._network if request.setup_script and request.network.mode else None
        spec = SandboxSpec(
            session_id=owner,
            agent_id=self._agent_id,
            labels={AGENT_LABEL: self._agent_id, LAYER_BUILD_LABEL: request.build_digest},
            egress_socket=network.socket if network is not None else None,
        )
        sandbox = await self._driver.create(spec)
        try:
            await asyncio.to_thread(shutil.copytree, downloads, sandbox.workspace / "downloads")
            # The proxy's socket is there, but without the build's token nothing gets through it.
            await self._run(sandbox, "install", _install_script(request), {})
            if request.setup_script:
                # As the sandbox's user; it may add to the layer at $ASTRABOX_LAYER.
                env = layer_env("/usr/local/bin:/usr/bin:/bin", "/workspace/layer")
                proxy = network.open(owner, request.network) if network is not None else {}
                env = {**env, **proxy, "ASTRABOX_LAYER": "/workspace/layer"}
                await self._run(sandbox, "setup", request.setup_script, env)
            built = work / "layer"
            await asyncio.to_thread(
                shutil.copytree, sandbox.workspace / "layer", built, symlinks=True, ignore=_not_plain
            )
            return built
        finally:
            try:
                await self._driver.destroy(sandbox)
            finally:
                if network is not None:
                    network.close(owner)

    async def _run(self, sandbox: Sandbox, phase: str, script: str, env: Mapping[str, str]) -> None:
        launcher = await self._driver.launcher(sandbox, ["/bin/sh", "-c", script], env)
        await run_step(phase, [str(launcher)], timeout=self._step_timeout)


def _not_plain(directory: str, names: list[str]) -> list[str]:
    """What a build wrote that is neither a file, a directory nor a link (a FIFO would hang the
    copy, a socket cannot be copied): left out."""
    kept = []
    for name in names:
        mode = os.lstat(os.path.join(directory, name)).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            kept.append(name)
    return kept


def _publish_readable(directory: Path) -> None:
    """Every sandbox user reads the layer; none writes it."""
    for top, dirs, files in os.walk(directory):
        for name in dirs:
            os.chmod(os.path.join(top, name), 0o755, follow_symlinks=False)
        for name in files:
            path = os.path.join(top, name)
            if not os.path.islink(path):
                mode = os.lstat(path).st_mode
                os.chmod(path, 0o755 if mode & 0o111 else 0o644)
    os.chmod(directory, 0o755)
