"""A lease and heartbeat set in the config file are what the control plane grants an agent: the
file's values reach the running process, not just its settings object."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane.server import serve
from controlplane.settings import ControlPlaneSettings
from dataplane_agent.engines.claude_code import MANIFEST as AGENT_CLAUDE_CODE
from dataplane_agent.relay.client import engine_manifest_proto
from serverkit import versions
from tests.support import admission


async def welcome(address: str) -> runner_pb2.Welcome:
    """The Welcome an agent gets on connecting to `address`."""
    hello = runner_pb2.Hello(
        agent_id="agent-configured",
        agent_credential=secrets.token_urlsafe(24),
        enrollment_token=admission.TOKEN,
        instance_id="test",
        drivers=["local"],
        engines=["claude_code"],
        engine_manifests=[engine_manifest_proto(AGENT_CLAUDE_CODE)],
        capacity=1,
        agent_version=versions.VERSION,
    )
    stop = asyncio.Event()

    async def requests() -> AsyncIterator[runner_pb2.ConnectRequest]:
        yield runner_pb2.ConnectRequest(hello=hello)
        await stop.wait()

    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.stream_stream(
            "/astrabox.runner.v1.RunnerService/Connect",
            request_serializer=runner_pb2.ConnectRequest.SerializeToString,
            response_deserializer=runner_pb2.ConnectResponse.FromString,
        )(requests())
        try:
            async with asyncio.timeout(30):
                while (message := await call.read()).WhichOneof("message") != "welcome":
                    pass
            return message.welcome
        finally:
            stop.set()
            call.cancel()


async def test_the_lease_and_heartbeat_in_the_config_file_are_what_an_agent_is_granted(
    database_url: str, bootstrap_key_file: str, tmp_path: Path
) -> None:
    config = tmp_path / "controlplane.toml"
    config.write_text("lease_ttl = 3600\nheartbeat_interval = 7.5\n")
    environ = {
        "ASTRABOX_DATABASE_URL": database_url,
        "ASTRABOX_BOOTSTRAP_KEY_FILE": bootstrap_key_file,
        **admission.CONTROLPLANE_ENV,
    }
    settings = ControlPlaneSettings.from_args(["--config", str(config), "--listen", "127.0.0.1:0"], environ)

    async with serve(settings) as running:
        granted = await welcome(running.address)

    assert granted.heartbeat_interval_ms == 7500
    # An hour's lease, not the default 15 seconds: it lapses more than 50 minutes from now.
    assert granted.lease.expire_time.ToSeconds() > time.time() + 50 * 60
