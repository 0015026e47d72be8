"""Environment layers on the docker driver: a derived image per build digest, built in a container without
network from packages the host fetched (the real apt and pip), used by the environment's sandboxes; built
once, never tagged when a step failed, and removed by the sweep once unused; a setup script reaching a
loopback test server through the agent's egress proxy where its environment's policy allows it. They
skip only when no Docker daemon answers."""

from __future__ import annotations

import asyncio
import secrets
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiodocker
import pytest

from astrabox.environments.v1 import environment_pb2 as env_pb
from dataplane_agent.engines.claude_code import BUNDLED_CLI
from dataplane_agent.engines.mcp_destinations import parse_networks
from dataplane_agent.environments.docker_layers import DIGEST_LABEL, DockerLayers, image_tag
from dataplane_agent.environments.layers import BuildRequest, LayerStore
from dataplane_agent.environments.steps import LayerBuildError
from dataplane_agent.routes.egress.bindings import NoBindings
from dataplane_agent.routes.egress.builds import BuildEgress
from dataplane_agent.routes.egress.proxy import EgressProxy
from dataplane_agent.sandboxes.base import AGENT_LABEL, SESSION_LABEL, SandboxLimits, SandboxSpec
from dataplane_agent.sandboxes.docker import DockerSandboxDriver
from dataplane_agent.settings import DEFAULT_IMAGE
from dataplane_agent.state import AgentState
from dataplane_agent.state_database import Database
from tests.support.containers import Containers


def _request(
    *,
    apt: tuple[str, ...] = (),
    pip: tuple[str, ...] = (),
    setup: str = "",
    network: env_pb.NetworkPolicy | None = None,
) -> BuildRequest:
    spec = env_pb.EnvironmentSpec(packages=env_pb.Packages(apt=apt, pip=pip), setup_script=setup, network=network)
    return BuildRequest.from_spec(secrets.token_hex(32), spec)  # a digest of its own: never an earlier run's image


async def _image_labels(tag: str) -> dict[str, str] | None:
    async with aiodocker.Docker() as docker:
        try:
            return dict((await docker.images.inspect(tag))["Config"].get("Labels") or {})
        except aiodocker.DockerError:
            return None


@pytest.fixture
async def store(tmp_path: Path, containers: Containers) -> AsyncIterator[LayerStore]:
    db = await Database.open(tmp_path / "agent.db")
    layers = LayerStore(DockerLayers(tmp_path / "layers", DEFAULT_IMAGE), AgentState(db), retention=60.0)
    await layers.start()
    made: list[str] = []
    original = layers.ensure

    async def ensure(request: BuildRequest, *args: object) -> object:
        made.append(image_tag(request.build_digest))
        return await original(request)

    layers.ensure = ensure  # type: ignore[method-assign,assignment]
    yield layers
    async with aiodocker.Docker() as docker:
        for tag in made:
            try:
                await docker.images.delete(tag, force=True)
            except aiodocker.DockerError:
                pass
    await db.close()


async def test_apt_and_pip_packages_are_usable_in_a_sandbox_of_the_derived_image(
    store: LayerStore, containers: Containers, sandbox_root: Path
) -> None:
    request = _request(apt=("tree", "python3-minimal"), pip=("six",))
    layer = await store.ensure(request)
    assert layer.image == image_tag(request.build_digest) and store.builds == 1
    assert (await _image_labels(layer.image) or {}).get(DIGEST_LABEL) == request.build_digest

    driver = DockerSandboxDriver(
        sandbox_root, installation=containers.installation, agent_id="agent-1", programs=[BUNDLED_CLI]
    )
    labels = {SESSION_LABEL: "s1", AGENT_LABEL: "agent-1"}
    sandbox = await driver.create(
        SandboxSpec(session_id="s1", agent_id="agent-1", labels=labels, image=layer.image, variables={"SHIP": "Argo"})
    )
    launcher = await driver.launcher(sandbox, ["/bin/sh", "-c"], {})
    script = "tree --version && python3 -c 'import six; print(six.__name__)' && echo ship=$SHIP && id -u"
    result = await asyncio.to_thread(
        subprocess.run, [str(launcher), script], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("tree v") and lines[1:3] == ["six", "ship=Argo"]
    assert lines[3] != "0"  # the sandbox's user, not the build's root

    plain = await driver.create(
        SandboxSpec(session_id="s2", agent_id="agent-1", labels={**labels, SESSION_LABEL: "s2"})
    )
    launcher = await driver.launcher(plain, ["/bin/sh", "-c"], {})
    missing = await asyncio.to_thread(
        subprocess.run, [str(launcher), "tree --version"], capture_output=True, timeout=60
    )
    assert missing.returncode == 127

    assert await store.ensure(request) == layer and store.builds == 1


async def test_a_failed_install_tags_no_image_and_says_what_apt_said(store: LayerStore) -> None:
    request = _request(apt=("astrabox-no-such-package-zz",))
    with pytest.raises(LayerBuildError, match="Unable to locate package astrabox-no-such-package-zz"):
        await store.ensure(request)
    assert await _image_labels(image_tag(request.build_digest)) is None


async def test_a_failing_setup_script_tags_no_image(store: LayerStore) -> None:
    request = _request(setup="echo 'the lighthouse is dark' >&2; exit 4")
    with pytest.raises(LayerBuildError, match="the lighthouse is dark") as failed:
        await store.ensure(request)
    assert failed.value.phase == "setup"
    assert await _image_labels(image_tag(request.build_digest)) is None


async def test_the_sweep_removes_an_unused_image_and_keeps_a_used_one(store: LayerStore) -> None:
    used = await store.ensure(_request(setup='echo used > "$ASTRABOX_LAYER/mark"'))
    unused = await store.ensure(_request(setup='echo unused > "$ASTRABOX_LAYER/mark"'))
    store.clock = lambda: 10**12  # far past the retention
    removed = await store.sweep(in_use={used.build_digest})
    assert unused.build_digest in removed and used.build_digest not in removed
    assert await _image_labels(unused.image) is None
    assert await _image_labels(used.image) is not None


async def test_an_environments_limits_replace_the_drivers_for_its_container(
    containers: Containers, sandbox_root: Path
) -> None:
    driver = DockerSandboxDriver(sandbox_root, installation=containers.installation, agent_id="agent-1")
    labels = {SESSION_LABEL: "s1", AGENT_LABEL: "agent-1"}
    limits = SandboxLimits(cpus=0.25, memory_mb=300, pids=99)
    tight = await driver.create(SandboxSpec(session_id="s1", agent_id="agent-1", labels=labels, limits=limits))
    roomy = await driver.create(
        SandboxSpec(session_id="s2", agent_id="agent-1", labels={**labels, SESSION_LABEL: "s2"})
    )
    async with aiodocker.Docker() as docker:
        tight_host = (await docker.containers.container(tight.sandbox_id).show())["HostConfig"]
        roomy_host = (await docker.containers.container(roomy.sandbox_id).show())["HostConfig"]
    assert (tight_host["PidsLimit"], tight_host["Memory"], tight_host["NanoCpus"]) == (
        99,
        300 * 1024 * 1024,
        250_000_000,
    )
    assert roomy_host["PidsLimit"] == 512 and roomy_host["Memory"] == 2048 * 1024 * 1024


# Perl's HTTP::Tiny (in the image) honours http_proxy, with the proxy's credentials in its URL.
_FETCH = (
    'perl -MHTTP::Tiny -e \'$r = HTTP::Tiny->new->get($ARGV[0]); $r->{success} or die "$r->{status} $r->{content}\\n";'
    ' print $r->{content}\' http://localhost:{port}/tool.txt > "$ASTRABOX_LAYER/tool.txt"\n'
)


async def test_a_setup_script_reaches_what_its_network_policy_allows_through_the_egress_proxy(
    containers: Containers, tmp_path: Path
) -> None:
    async def origin_serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 28\r\nconnection: close\r\n\r\nfetched by the setup script\n")
        await writer.drain()
        writer.close()

    origin = await asyncio.start_server(origin_serve, "127.0.0.1", 0)
    port = origin.sockets[0].getsockname()[1]
    db = await Database.open(tmp_path / "agent.db")
    made: list[str] = []
    try:
        # The agent may connect to loopback for sandboxes (the test server stands for the internet).
        async with EgressProxy(
            tmp_path / "routes", NoBindings(), allowed_networks=parse_networks("127.0.0.0/8")
        ) as proxy:
            builder = DockerLayers(tmp_path / "layers", DEFAULT_IMAGE, network=BuildEgress(proxy))
            store = LayerStore(builder, AgentState(db))
            script = _FETCH.replace("{port}", str(port))

            def limited(allowed: str) -> env_pb.NetworkPolicy:
                return env_pb.NetworkPolicy(mode=env_pb.NETWORK_MODE_LIMITED, allowed_hosts=[allowed])

            allowed = _request(setup=script, network=limited(f"localhost:{port}"))
            made.append(image_tag(allowed.build_digest))
            layer = await store.ensure(allowed)
            fetched = await asyncio.to_thread(
                subprocess.run,
                ["docker", "run", "--rm", "--network", "none", layer.image, "cat", "/opt/astrabox/env/tool.txt"],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert fetched.stdout == "fetched by the setup script\n", fetched.stderr

            # The same script under a policy that does not name the host: the proxy refuses it.
            refused = _request(setup=script, network=limited("example.com"))
            made.append(image_tag(refused.build_digest))
            with pytest.raises(LayerBuildError, match="403") as failed:
                await store.ensure(refused)
            assert failed.value.phase == "setup"
            assert f"localhost:{port} is refused: not in this environment's allowed_hosts" in str(failed.value)
            assert await _image_labels(image_tag(refused.build_digest)) is None
    finally:
        origin.close()
        await db.close()
        async with aiodocker.Docker() as docker:
            for tag in made:
                try:
                    await docker.images.delete(tag, force=True)
                except aiodocker.DockerError:
                    pass
