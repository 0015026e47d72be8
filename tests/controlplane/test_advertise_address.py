"""The address a control-plane replica gives the others to forward workspace requests to it."""

from __future__ import annotations

import dataclasses
import socket

from controlplane.server import serve
from controlplane.settings import ControlPlaneSettings


def settings(argv: list[str]) -> ControlPlaneSettings:
    return ControlPlaneSettings.from_args(["--database-url", "x", *argv])


async def test_a_replica_advertises_its_bound_address_or_its_hostname_on_a_wildcard(database_url):
    async with serve(ControlPlaneSettings(database_url=database_url, listen="127.0.0.1:0")) as loopback:
        assert loopback.advertise_address == loopback.address
    wildcard_settings = ControlPlaneSettings(database_url=database_url, listen="0.0.0.0:0", enrollment_token="t" * 32)
    async with serve(wildcard_settings) as wildcard:
        port = wildcard.address.rpartition(":")[2]
        assert wildcard.advertise_address == f"{socket.gethostname()}:{port}"


async def test_the_advertise_address_comes_from_the_flag_or_the_environment(database_url, monkeypatch):
    monkeypatch.setenv("ASTRABOX_ADVERTISE_ADDRESS", "cp-1.internal:7233")
    assert settings([]).advertise_address == "cp-1.internal:7233"
    assert settings(["--advertise-address", "10.0.0.5:7233"]).advertise_address == "10.0.0.5:7233"
    from_env = dataclasses.replace(settings(["--listen", "127.0.0.1:0"]), database_url=database_url)
    async with serve(from_env) as running:
        assert running.advertise_address == "cp-1.internal:7233"
