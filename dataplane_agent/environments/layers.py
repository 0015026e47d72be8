"""The layer store: each build digest built once on this host, shared, and swept when long unused.

`LayerStore.ensure` is what a session's start and a BuildLayer command call: it returns the ready
layer, building it first when there is none, with one build per digest at a time (later callers
wait for it and share it). A build either completes — and only then does the builder make the
layer usable (a rename, an image's tag) — or fails with the step's own error and leaves nothing a
session could use; a failure is not remembered as a layer, so the next start builds again. Every
use is recorded (the agent's state), so `sweep` removes only layers that no held session uses and
that nothing used for the retention period."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import structlog

from astrabox.environments.v1 import environment_pb2 as env_pb
from dataplane_agent.environments.packages import PackageError, Packages
from dataplane_agent.environments.steps import LayerBuildError
from dataplane_agent.keyed_locks import KeyedLocks

log = structlog.get_logger(__name__)

DIGEST = re.compile(r"[0-9a-f]{16,64}")
DEFAULT_RETENTION = 7 * 86400.0

# (phase, message, percent): a step of a build, for progress reports.
Progress = Callable[[str, str, int], Awaitable[None]]


async def no_progress(phase: str, message: str, percent: int) -> None:
    """Progress nobody watches."""


@dataclass(frozen=True, slots=True)
class Layer:
    """A built layer: a directory (local driver) or an image (docker driver)."""

    build_digest: str
    path: Path | None = None
    image: str = ""


@dataclass(frozen=True, slots=True)
class BuildRequest:
    """What a layer is built from: the checked packages and the setup script."""

    build_digest: str
    packages: Packages
    setup_script: str = ""
    # The environment's network policy, for the setup script only (the control plane puts it into
    # the build digest when there is a setup script); the install steps never have network.
    network: env_pb.NetworkPolicy = field(default_factory=env_pb.NetworkPolicy)

    @classmethod
    def from_spec(cls, build_digest: str, spec: env_pb.EnvironmentSpec) -> BuildRequest:
        if not DIGEST.fullmatch(build_digest):
            raise LayerBuildError("check", f"build digest {build_digest[:80]!r} is not a hex SHA-256")
        try:
            packages = Packages.from_proto(spec.packages)
        except PackageError as error:
            raise LayerBuildError("check", str(error)) from None
        network = env_pb.NetworkPolicy()
        if spec.setup_script:
            network.CopyFrom(spec.network)
        return cls(build_digest=build_digest, packages=packages, setup_script=spec.setup_script, network=network)

    @property
    def empty(self) -> bool:
        """Nothing to build: the driver's base is the layer."""
        return not self.packages and not self.setup_script


class BuildNetwork(Protocol):
    """The egress proxy as a build's setup script sees it (routes/egress/builds.py): the only way out
    a build has, under its environment's own policy, with no credential."""

    @property
    def socket(self) -> Path: ...

    def open(self, owner: str, network: env_pb.NetworkPolicy) -> Mapping[str, str]:
        """Lets `owner` out under `network`; the environment its programs need for that (empty: the
        policy lets nothing out)."""

    def close(self, owner: str) -> None: ...


class LayerBuilder(Protocol):
    """Makes and removes one driver's layers."""

    async def existing(self, build_digest: str) -> Layer | None:
        """The usable layer of `build_digest`, or None."""

    async def build(self, request: BuildRequest, progress: Progress) -> Layer:
        """Build the layer; usable only once this returns (LayerBuildError: nothing usable is left)."""

    async def built(self) -> list[str]:
        """The digests of every usable layer."""

    async def remove(self, build_digest: str) -> None:
        """Remove the layer (never one in use: the store makes sure)."""

    async def clean(self) -> None:
        """Remove what builds that did not finish left (run at start, before any build)."""


class LayerUses(Protocol):
    """Where the last use of each layer is recorded (the agent's state)."""

    async def layer_used(self, build_digest: str, at: float) -> None: ...

    async def layer_uses(self) -> dict[str, float]: ...

    async def forget_layer(self, build_digest: str) -> None: ...


@dataclass
class LayerStore:
    """Layers of one driver on this host."""

    builder: LayerBuilder
    uses: LayerUses
    retention: float = DEFAULT_RETENTION
    clock: Callable[[], float] = time.time
    # Builds started by this process, for tests and the bench (a cache hit starts none).
    builds: int = 0
    _locks: KeyedLocks = field(default_factory=KeyedLocks)

    async def start(self) -> None:
        await self.builder.clean()

    async def ensure(self, request: BuildRequest, progress: Progress = no_progress) -> Layer:
        """The ready layer of `request`, built now if there is none (LayerBuildError if it fails)."""
        digest = request.build_digest
        async with self._locks.hold(digest):
            layer = await self.builder.existing(digest)
            if layer is None:
                self.builds += 1
                began = time.monotonic()
                log.info("layer_build_started", build_digest=digest)
                try:
                    layer = await self.builder.build(request, progress)
                except LayerBuildError as error:
                    log.warning("layer_build_failed", build_digest=digest, phase=error.phase)
                    raise
                log.info("layer_built", build_digest=digest, seconds=round(time.monotonic() - began, 1))
            await self.uses.layer_used(digest, self.clock())
            return layer

    async def sweep_every(self, interval: float, in_use: Callable[[], Awaitable[Collection[str]]]) -> None:
        """Sweep every `interval` seconds until cancelled; a failed sweep is logged and retried."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sweep(await in_use())
            except Exception as exc:  # the next round tries again
                log.warning("layer_sweep_failed", error=f"{type(exc).__name__}: {exc}")

    async def sweep(self, in_use: Collection[str]) -> list[str]:
        """Remove the layers that no held session uses (`in_use`) and nothing used for the
        retention period; the digests removed. A layer whose build or use is under way is kept."""
        now = self.clock()
        uses = await self.uses.layer_uses()
        removed = []
        for digest in await self.builder.built():
            if digest in in_use:
                await self.uses.layer_used(digest, now)
                continue
            last = uses.get(digest)
            if last is None:  # built before uses were recorded: its retention starts now
                await self.uses.layer_used(digest, now)
                continue
            if now - last < self.retention or self._locks.busy(digest):
                continue
            async with self._locks.hold(digest):
                # A start that took it meanwhile recorded its use under this lock: keep it.
                if now - (await self.uses.layer_uses()).get(digest, now) < self.retention:
                    continue
                try:
                    await self.builder.remove(digest)
                except Exception as exc:  # e.g. Docker keeps an image a retained container uses
                    log.warning("layer_not_removed", build_digest=digest, error=f"{type(exc).__name__}: {exc}")
                    continue
                await self.uses.forget_layer(digest)
            removed.append(digest)
            log.info("layer_removed", build_digest=digest, unused_days=round((now - last) / 86400, 1))
        return removed
