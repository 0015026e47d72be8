"""The docker driver's layers: derived images `astrabox/env:<build_digest[:20]>`, one per digest.

A build fetches on the host (`downloads`; apt resolves against the base image's package database,
extracted once, not the host's), then runs a build container from the base image with no network,
the downloads mounted read-only: as root inside it, `apt-get install` of the local .deb files only
(their maintainer scripts run there, in the container, never on the host), the wheels copied into
/opt/astrabox/env/python (unpacked on the host as data: the image's minimal Python has no pip, and
no wheel's code runs to unpack it), the npm prefix into /opt/astrabox/env/node, then the setup
script as the sandbox's user (uid 1000). Only `docker commit` of a container whose every step
succeeded makes the tag, labelled astrabox.build_digest; a build container a crash left behind is
removed at the next start.

The setup script alone may reach the network, as on the local driver: through the agent's egress
proxy under the environment's own network policy (`BuildNetwork`), with no credential. The build
container then has the proxy's socket at /run/astrabox/egress.sock (and the agent's trust bundle,
where it has one), relayed to 127.0.0.1:41801 inside as a session's sandbox has it, and the proxy
variables; it keeps no network of its own. The install steps run with those variables unset (apt
installs only the downloaded files); a package's maintainer script, run as root in the container,
could still read them: it would then go out as the setup script may, under the same policy.
The build container runs under the agent's sandbox runtime (runc, or runsc: gVisor)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shlex
import shutil
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiodocker

from dataplane_agent.environments.downloads import download
from dataplane_agent.environments.layers import DIGEST, BuildNetwork, BuildRequest, Layer, Progress
from dataplane_agent.environments.steps import STEP_TIMEOUT, LayerBuildError, tail
from dataplane_agent.sandboxes.base import (
    EGRESS_CA_INNER,
    EGRESS_CA_NAME,
    EGRESS_SOCKET_INNER,
    LAYER_BUILD_LABEL,
    SandboxError,
    model_relay,
)
from dataplane_agent.sandboxes.docker_engine import DockerEngine
from dataplane_agent.sandboxes.layer_mount import INNER_LAYER, layer_env

REPOSITORY = "astrabox/env"
DIGEST_LABEL = "astrabox.build_digest"


def image_tag(build_digest: str) -> str:
    return f"{REPOSITORY}:{build_digest[:20]}"


def _install_script(request: BuildRequest, proxy: Mapping[str, str]) -> str:
    """The build container's program: the install steps as root (without the proxy's variables), then
    the setup script as the sandbox's user, through the egress relay when `proxy` lets it out."""
    lines = ["set -e", f"mkdir -p {INNER_LAYER}"]
    if proxy:
        lines.append("(")
        lines.append("unset " + " ".join(sorted(proxy)))
    if request.packages.apt:
        lines.append(
            "if ls /downloads/apt/*.deb >/dev/null 2>&1; then apt-get install --yes --quiet"
            " --no-install-recommends /downloads/apt/*.deb; fi"
        )
    if request.packages.pip:
        lines.append(f"cp -R /downloads/python {INNER_LAYER}/python")
    if request.packages.npm:
        lines.append(f"cp -R /downloads/node {INNER_LAYER}/node")
    lines.append(f"chmod -R a+rX,go-w {INNER_LAYER}")
    if proxy:
        lines.append(")")
    if request.setup_script:
        # Last, as the sandbox's user, who may add to the layer; the relay to the proxy first.
        setup = ["/bin/sh", "-c"]
        program = shlex.join(model_relay(setup, model=False, egress=True) if proxy else setup)
        lines.append(f"chown -R 1000:1000 {INNER_LAYER}")
        lines.append("echo ASTRABOX-SETUP >&2")
        lines.append(f'exec setpriv --reuid=1000 --regid=1000 --clear-groups -- {program} "$ASTRABOX_SETUP"')
    return "\n".join(lines) + "\n"


class DockerLayers:
    """Derived images of `base_image`, their downloads staged under `root`; each download, and the
    build container, within `build_timeout` seconds; setup scripts go out through `network` (None:
    never)."""

    def __init__(
        self,
        root: Path,
        base_image: str,
        timeout: float = 60.0,
        build_timeout: float = STEP_TIMEOUT,
        network: BuildNetwork | None = None,
        runtime: str = "runc",
    ) -> None:
        self._root = Path(root)
        # The sandboxes' OCI runtime (sandboxes.isolation): maintainer and setup scripts are run as
        # a session's programs are, under gVisor on an agent whose sandboxes are.
        self._runtime = runtime
        self._build_timeout = build_timeout
        self._base = base_image
        self._engine = DockerEngine(timeout)
        self._network = network

    async def existing(self, build_digest: str) -> Layer | None:
        async with self._engine.client("inspect an environment image") as docker:
            try:
                found = await docker.images.inspect(image_tag(build_digest))
            except aiodocker.DockerError as error:
                if error.status == 404:
                    return None
                raise
        labels = (found.get("Config") or {}).get("Labels") or {}
        return Layer(build_digest, image=image_tag(build_digest)) if labels.get(DIGEST_LABEL) == build_digest else None

    async def built(self) -> list[str]:
        async with self._engine.client("list environment images") as docker:
            images = await docker.images.list(filters={"label": [DIGEST_LABEL]})
        digests = {str((image.get("Labels") or {}).get(DIGEST_LABEL, "")) for image in images}
        return sorted(digest for digest in digests if DIGEST.fullmatch(digest))

    async def remove(self, build_digest: str) -> None:
        async with self._engine.client("remove an environment image") as docker:
            try:
                # Not forced: Docker refuses to remove an image a container (a session's) still uses.
                await docker.images.delete(image_tag(build_digest))
            except aiodocker.DockerError as error:
                if error.status != 404:
                    raise SandboxError(f"environment image {image_tag(build_digest)}: {error.message}") from None

    async def clean(self) -> None:
        await asyncio.to_thread(shutil.rmtree, self._root / ".staging", True)
        async with self._engine.client("remove unfinished environment builds") as docker:
            for container in await docker.containers.list(all=True, filters={"label": [LAYER_BUILD_LABEL]}):
                with contextlib.suppress(aiodocker.DockerError):
                    await container.delete(force=True)

    async def build(self, request: BuildRequest, progress: Progress) -> Layer:
        work = self._root / ".staging" / f"{request.build_digest}-{secrets.token_hex(4)}"
        downloads = work / "downloads"
        downloads.mkdir(parents=True)
        try:
            status = await self._base_status(work)
            await download(request.packages, downloads, progress, dpkg_status=status, step_timeout=self._build_timeout)
            if request.packages.pip:
                await asyncio.to_thread(_unpack_wheels, downloads / "pip", downloads / "python")
            await asyncio.to_thread(_readable, downloads)
            await progress("install", "installing in a build container without network", 60)
            return await self._install(request, downloads, progress)
        finally:
            await asyncio.to_thread(shutil.rmtree, work, True)

    async def _base_status(self, work: Path) -> Path:
        """The base image's dpkg database (its `status` file), for apt to resolve against."""
        async with self._engine.client("read the base image's package database") as docker:
            container = await docker.containers.create(
                {"Image": self._base, "Cmd": ["true"], "Labels": {LAYER_BUILD_LABEL: "status"}}
            )
            try:
                archive = await container.get_archive("/var/lib/dpkg/status")
            finally:
                await container.delete(force=True)
        member = archive.extractfile("status")
        if member is None:
            raise LayerBuildError("apt", f"the image {self._base} has no /var/lib/dpkg/status")
        path = work / "dpkg-status"
        path.write_bytes(member.read())
        return path

    async def _install(self, request: BuildRequest, downloads: Path, progress: Progress) -> Layer:
        owner = f"layer-{request.build_digest[:20]}-{secrets.token_hex(3)}"
        network = self._network if request.setup_script and request.network.mode else None
        proxy = network.open(owner, request.network) if network is not None else {}
        # A policy that lets nothing out gives no variables: then no socket either.
        socket = network.socket if network is not None and proxy else None
        try:
            return await self._run(request, downloads, progress, socket, proxy)
        finally:
            if network is not None:
                network.close(owner)

    async def _run(
        self,
        request: BuildRequest,
        downloads: Path,
        progress: Progress,
        egress_socket: Path | None,
        proxy: Mapping[str, str],
    ) -> Layer:
        tag = image_tag(request.build_digest)
        mounts = [{"Type": "bind", "Source": str(downloads), "Target": "/downloads", "ReadOnly": True}]
        if egress_socket is not None:
            mounts.append(
                {"Type": "bind", "Source": str(egress_socket), "Target": EGRESS_SOCKET_INNER, "ReadOnly": True}
            )
            bundle = egress_socket.parent / EGRESS_CA_NAME
            if bundle.is_file():  # the agent's trust bundle, which the proxy variables may name
                mounts.append({"Type": "bind", "Source": str(bundle), "Target": EGRESS_CA_INNER, "ReadOnly": True})
        config: dict[str, Any] = {
            "Image": self._base,
            "User": "0:0",
            "Cmd": ["/bin/sh", "-c", _install_script(request, proxy)],
            "Env": [
                "DEBIAN_FRONTEND=noninteractive",
                f"ASTRABOX_SETUP={request.setup_script}",
                f"ASTRABOX_LAYER={INNER_LAYER}",
                *(f"{name}={value}" for name, value in sorted(proxy.items())),
            ],
            "Labels": {LAYER_BUILD_LABEL: request.build_digest},
            "HostConfig": {
                "NetworkMode": "none",
                "Mounts": mounts,
                "LogConfig": {"Type": "json-file"},
                "Runtime": self._runtime,
            },
        }
        async with DockerEngine(self._build_timeout).client("build an environment image") as docker:
            container = await docker.containers.create(config)
            try:
                await container.start()
                exit_status = (await container.wait()).get("StatusCode", 1)
                if exit_status != 0:
                    logs = "".join(await container.log(stdout=True, stderr=True))
                    before, marker, after = logs.partition("ASTRABOX-SETUP\n")
                    phase, output = ("setup", after) if marker else ("install", before)
                    raise LayerBuildError(phase, tail(output.encode()) or f"the build exited with status {exit_status}")
                await progress("commit", f"committing {tag}", 95)
                env = [f"{name}={value}" for name, value in layer_env("/usr/local/bin:/usr/bin:/bin").items()]
                await container.commit(
                    repository=REPOSITORY,
                    tag=request.build_digest[:20],
                    message=f"astrabox environment layer {request.build_digest}",
                    config={
                        "Labels": {DIGEST_LABEL: request.build_digest},
                        "Env": env,
                        "User": "1000:1000",
                        "Cmd": ["sleep", "infinity"],
                    },
                )
            finally:
                with contextlib.suppress(aiodocker.DockerError):
                    await container.delete(force=True)
        return Layer(request.build_digest, image=tag)


def _unpack_wheels(wheels: Path, target: Path) -> None:
    """Wheels are zip files: unpacked as data (zipfile keeps every name inside `target`)."""
    target.mkdir(parents=True, exist_ok=True)
    for wheel in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(target)


def _readable(directory: Path) -> None:
    for path in [directory, *directory.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
        elif path.is_file() and not path.is_symlink():
            path.chmod(0o644 | (path.stat().st_mode & 0o111))
