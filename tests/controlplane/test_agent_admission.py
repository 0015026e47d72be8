"""Agents with their own credentials, admitted before they get work: an agent_id is bound to the
credential it enrolled with, an impersonator holding the enrollment token is refused, an agent
with the enrollment token alone waits until an operator admits it or it presents a join token
(single-use, expiring), and a revoked agent's stream closes."""

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
from dataplane_agent.relay.credential import fingerprint as credential_fingerprint
from serverkit import versions

TOKEN = "enrol-" + "x" * 26


@pytest_asyncio.fixture
async def running(database_url: str, bootstrap_key_file: str) -> AsyncIterator[RunningControlPlane]:
    """A control plane that admits agents by hand (the default)."""
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
        self,
        address: str,
        agent_id: str,
        credential: str,
        token: str = TOKEN,
        agent_version: str = versions.VERSION,
        join_token: str = "",
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
            join_token=join_token,
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


async def hello(address: str, agent_id: str, credential: str, token: str = TOKEN, join_token: str = ""):
    stream = AgentStream(address, agent_id, credential, token, join_token=join_token)
    try:
        return await stream.first()
    finally:
        await stream.close()


PENDING = (grpc.StatusCode.PERMISSION_DENIED, "AGENT_PENDING_ADMISSION")


async def admitted(running: RunningControlPlane, agent_id: str, credential: str) -> None:
    """Enrol the agent with the enrollment token, then admit it as an operator would."""
    assert (await hello(running.address, agent_id, credential))[:2] == PENDING
    async with AstraBoxClient.connect(running.address) as admin:
        await admin.admin.admit_agent(agent_id)


async def test_an_agent_id_is_bound_to_the_credential_it_enrolled_with(running: RunningControlPlane) -> None:
    mine = secrets.token_urlsafe(32)
    await admitted(running, "host-1", mine)
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
    await admitted(running, "host-r", credential)
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


async def test_the_enrollment_token_alone_gets_no_lease_until_an_operator_admits_the_agent(
    running: RunningControlPlane,
) -> None:
    credential = secrets.token_urlsafe(32)
    for _ in range(2):  # it keeps asking; each time it is refused, holding no lease
        refused = await hello(running.address, "host-p", credential)
        assert refused[:2] == PENDING
        assert "astrabox hosts admit host-p" in refused[2]
    assert await running.pool.fetchval("SELECT count(*) FROM agents WHERE agent_id = 'host-p'") == 0
    async with AstraBoxClient.connect(running.address) as admin:
        [pending] = await admin.admin.list_agents()
        # The operator sees the fingerprint the agent logs, and where it asked from.
        assert pending.fingerprint == credential_fingerprint(credential)
        assert not pending.HasField("admit_time") and pending.last_peer.startswith("ipv4:127.0.0.1")
        admitted_agent = await admin.admin.admit_agent("host-p")
        assert admitted_agent.HasField("admit_time") and admitted_agent.admitted_by.startswith("key:")
        with pytest.raises(AstraBoxError) as unknown:
            await admin.admin.admit_agent("never-enrolled")
        assert unknown.value.reason == "AGENT_NOT_FOUND"
        [record] = [
            r for r in (await admin.admin.list_audit_records()).records if r.method == "AdmitAgent" and r.code == "OK"
        ]
        assert record.details["agent_id"] == "host-p"
    assert (await hello(running.address, "host-p", credential)).WhichOneof("message") == "welcome"
    # Admission binds the credential, not the id: another one is still refused.
    assert (await hello(running.address, "host-p", secrets.token_urlsafe(32)))[:2] == (
        grpc.StatusCode.PERMISSION_DENIED,
        "AGENT_ID_BOUND",
    )


async def test_a_join_token_admits_one_new_agent_once_before_it_expires(running: RunningControlPlane) -> None:
    async with AstraBoxClient.connect(running.address) as admin:
        project = await admin.admin.create_project("joined")
        made = await admin.admin.create_join_token(timedelta(minutes=5), project_id=project.project_id)
        expiring = await admin.admin.create_join_token()
        with pytest.raises(AstraBoxError) as too_long:
            await admin.admin.create_join_token(timedelta(days=30))
        assert too_long.value.reason == "INVALID_ARGUMENT"
    assert made.token.startswith(f"abxj_{made.join_token.token_id}_")
    stored = await running.pool.fetchrow(
        "SELECT * FROM agent_join_tokens WHERE token_id = $1", made.join_token.token_id
    )
    assert made.token.encode() not in b"".join(str(v).encode() for v in stored.values())
    # No enrollment token needed: the join token admits the agent and dedicates it to its project.
    credential = secrets.token_urlsafe(32)
    welcome = await hello(running.address, "host-j", credential, token="", join_token=made.token)
    assert welcome.WhichOneof("message") == "welcome"
    assert await running.pool.fetchval("SELECT project_id::text FROM agents WHERE agent_id = 'host-j'") == (
        project.project_id
    )
    # Ignored once the agent is admitted; never a second agent's.
    assert (await hello(running.address, "host-j", credential, join_token=made.token)).WhichOneof(
        "message"
    ) == "welcome"
    for token in (made.token, made.token[:-1] + "A", "abxj_x", "garbage\x00" * 100):
        refused = await hello(running.address, "host-k", secrets.token_urlsafe(32), join_token=token)
        assert refused[:2] == (grpc.StatusCode.UNAUTHENTICATED, "JOIN_TOKEN_INVALID")
    # An expired token admits no one, even with the enrollment token: that agent stays pending.
    await running.pool.execute(
        "UPDATE agent_join_tokens SET expires_at = now() - interval '1 second' WHERE token_id = $1",
        expiring.join_token.token_id,
    )
    refused = await hello(running.address, "host-e", secrets.token_urlsafe(32), join_token=expiring.token)
    assert refused[:2] == (grpc.StatusCode.UNAUTHENTICATED, "JOIN_TOKEN_INVALID")
    # A pending agent restarted with a join token is admitted by it.
    pending = secrets.token_urlsafe(32)
    assert (await hello(running.address, "host-q", pending))[:2] == PENDING
    async with AstraBoxClient.connect(running.address) as admin:
        fresh = await admin.admin.create_join_token()
    assert (await hello(running.address, "host-q", pending, join_token=fresh.token)).WhichOneof("message") == "welcome"
    assert (
        await running.pool.fetchval("SELECT admitted_by FROM agent_credentials WHERE agent_id = 'host-q'")
        == f"join:{fresh.join_token.token_id}"
    )
    assert (
        await running.pool.fetchval("SELECT count(*) FROM agent_credentials WHERE agent_id IN ('host-k', 'host-e')")
        == 0
    )


async def test_automatic_admission_needs_an_enrollment_token(database_url: str) -> None:
    with pytest.raises(SettingsError, match="automatic with no enrollment token"):
        async with serve(ControlPlaneSettings(database_url=database_url, agent_admission="automatic")):
            pass
