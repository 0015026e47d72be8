"""The egress proxy for a layer build's setup script: the environment's own network policy, no more.

A build is no session: it is registered under an owner id of its own (`layer-build-<random>`), with
no credential bindings and no refusal reports (EgressProxy.register_build), and forgotten when its
sandbox is gone, so its token stops working with it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from astrabox.environments.v1 import environment_pb2 as env_pb
from dataplane_agent.routes.egress.policy import EgressPolicy
from dataplane_agent.routes.egress.proxy import EgressProxy


class BuildEgress:
    """What a driver's layers (`LocalLayers`, `DockerLayers`) use to give a setup script the network its
    environment allows."""

    def __init__(self, proxy: EgressProxy) -> None:
        self._proxy = proxy

    @property
    def socket(self) -> Path:
        return self._proxy.socket

    def open(self, owner: str, network: env_pb.NetworkPolicy) -> Mapping[str, str]:
        """Registers the build `owner` under `network`; the setup script's proxy environment (empty
        for a policy that allows nothing: the script then has no way out)."""
        spec = env_pb.EnvironmentSpec(network=network)
        self._proxy.register_build(owner, EgressPolicy.from_proto(spec, None, self._proxy.registries))
        return self._proxy.env(owner)

    def close(self, owner: str) -> None:
        self._proxy.forget(owner)
