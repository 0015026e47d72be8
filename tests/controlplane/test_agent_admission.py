"""Agents with their own credentials: an agent_id is bound to the credential it enrolled with, an
impersonator holding the enrollment token is refused, and a revoked agent's stream closes."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from datetime import timedelta

import grpc
import pytest
import pytest_asyncio

from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane.server import RunningControlPlane, serve
from controlplane.settings import ControlPlaneSettings, SettingsError
from controlplane.status import error_info
from serverkit import versions

TOKEN = "enrol-" + "x" * 26


@pytest_asyncio.fixture
async def running(database_url: str, bootstrap_key_file: str) -> AsyncIterator[RunningControlPlane]:
    settings = ControlPlaneSettings(
        database_url=database_url,
        listen="127.0.0.1:0",
        bootstrap_key_file=bootstrap_key_file,
        enrollment_token=TOKEN,
        heartbeat_interval=timedelta(milliseconds=200),
    )
    async with serve(settings) as control_plane:
        yield control_plane


class AgentStream:
    """A Connect stream as an agent holds it: Hello, then heartbeats until told to stop."""

    def __init__(
        self, address: str, agent_id: str, credential: str, token: str = TOKEN, agent_version: str = versions.VERSION
    ) -> None:
        self._channel = grpc.aio.insecure_channel(address)
        self._outgoing: asyncio.Queue[runner_pb2.ConnectRequest | None] = asyncio.Queue()
        hello = runner_pb2.Hello(
            agent_id=agent_id,
            agent_credential=credential,
            enrollment_token=token,
            instance_id=secrets.token_hex(4),
            capacity=1,
            agent_version=agent_version,
        )
        self._outgoing.put_nowait(runner_pb2.ConnectRequest(hello=hello))
        self.call = self._channel.stream_stream(
            "/astrabox.runner.v1.RunnerService/Connect",
            request_serializer=runner_pb2.ConnectRequest.SerializeToString,
            response_deserializer=runner_pb2.ConnectResponse.FromString,
        )(self._requests())

    async def _requests(self) -> AsyncIterator[runner_pb2.ConnectRequest]:
        while (request := await self._outgoing.get()) is not None:
            yield request

    async def first(self) -> runner_pb2.ConnectResponse | tuple[grpc.StatusCode, str, str]:
        """The Welcome, or (code, reason, details) of the refusal."""
        try:
            async with asyncio.timeout(30):
                return await self.call.read()
        except grpc.aio.AioRpcError as error:
            info = error_info(error)
            return error.code(), info.reason if info else "", error.details() or ""

    async def heartbeat_until_closed(self) -> grpc.StatusCode:
        """Heartbeat every 0.1 s; the code the stream ends with."""

        async def beat() -> None:
            while True:
                self._outgoing.put_nowait(runner_pb2.ConnectRequest(heartbeat=runner_pb2.Heartbeat()))
                await asyncio.sleep(0.1)

        beating = asyncio.create_task(beat())
        try:
            async with asyncio.timeout(30):
                while (await self.call.read()) is not grpc.aio.EOF:
                    pass
            return grpc.StatusCode.OK
        except grpc.aio.AioRpcError as error:
            return error.code()
        finally:
            beating.cancel()

    async def close(self) -> None:
        self._outgoing.put_nowait(None)
        self.call.cancel()
        await self._channel.close()


async def hello(address: str, agent_id: str, credential: str, token: str = TOKEN):
    stream = AgentStream(address, agent_id, credential, token)
    try:
        return await stream.first()
    finally:
        await stream.close()


async def test_an_agent_id_is_bound_to_the_credential_it_enrolled_with(running: RunningControlPlane) -> None:
    mine = secrets.token_urlsafe(32)
    assert (await hello(running.address, "host-1", mine)).WhichOneof("message") == "welcome"
    generation = await running.pool.fetchval("SELECT generation FROM agents WHERE agent_id = 'host-1'")
    # The enrollment token does not let another credential take the id.
    refused = await hello(running.address, "host-1", secrets.token_urlsafe(32))
    assert refused[:2] == (grpc.StatusCode.PERMISSION_DENIED, "AGENT_ID_BOUND")
    assert await running.pool.fetchval("SELECT generation FROM agents WHERE agent_id = 'host-1'") == generation
    # Its own credential admits it, with or without the token.
    assert (await hello(running.address, "host-1", mine, token="")).WhichOneof("message") == "welcome"
    # A first Hello needs the token, and every Hello a credential.
    assert (await hello(running.address, "host-2", secrets.token_urlsafe(32), token="guess"))[:2] == (
        grpc.StatusCode.UNAUTHENTICATED,
        "ENROLLMENT_TOKEN_INVALID",
    )
    assert (await hello(running.address, "host-3", ""))[:2] == (
        grpc.StatusCode.UNAUTHENTICATED,
        "AGENT_CREDENTIAL_MISSING",
    )
    assert await running.pool.fetchval("SELECT count(*) FROM agent_credentials") == 1
    stored = await running.pool.fetchval("SELECT secret_sha256 FROM agent_credentials")
    assert mine.encode() not in bytes(stored)


async def test_a_revoked_agents_stream_closes_and_it_cannot_come_back(running: RunningControlPlane) -> None:
    credential = secrets.token_urlsafe(32)
    stream = AgentStream(running.address, "host-r", credential)
    try:
        assert (await stream.first()).WhichOneof("message") == "welcome"
        closing = asyncio.create_task(stream.heartbeat_until_closed())
        async with AstraBoxClient.connect(running.address) as admin:
            [listed] = await admin.admin.list_agents()
            assert listed.agent_id == "host-r" and not listed.HasField("revoke_time")
            revoked = await admin.admin.revoke_agent("host-r")
            assert revoked.HasField("revoke_time")
            with pytest.raises(AstraBoxError) as unknown:
                await admin.admin.revoke_agent("never-enrolled")
            assert unknown.value.reason == "AGENT_NOT_FOUND"
        await closing  # the stream ended (at its next heartbeat)
    finally:
        await stream.close()
    assert await running.pool.fetchval("SELECT lease_expires_at <= now() FROM agents WHERE agent_id = 'host-r'")
    assert (await hello(running.address, "host-r", credential))[:2] == (
        grpc.StatusCode.UNAUTHENTICATED,
        "AGENT_REVOKED",
    )


async def test_an_empty_enrollment_token_is_refused_off_loopback(database_url: str) -> None:
    with pytest.raises(SettingsError, match="empty enrollment token"):
        async with serve(ControlPlaneSettings(database_url=database_url, listen="0.0.0.0:0")):
            pass
