"""Every RPC of every client-facing service, called with each kind of bad credential, is refused
with the documented code before its handler runs, and changes nothing. Generated from the service
descriptors: a new RPC without an authorization rule fails here."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import grpc
import pytest
import pytest_asyncio
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor

from astrabox.admin.v1 import admin_service_pb2
from astrabox.agents.v1 import agent_service_pb2
from astrabox.client import AstraBoxClient
from astrabox.credentialstore.v1 import credential_service_pb2
from astrabox.environments.v1 import environment_service_pb2
from astrabox.errors import AstraBoxError
from astrabox.memory.v1 import memory_service_pb2
from astrabox.schedules.v1 import schedule_service_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2
from astrabox.webhooks.v1 import webhook_service_pb2
from controlplane.identity import keys
from controlplane.identity.rules import RULES
from controlplane.server import RunningControlPlane, serve
from controlplane.settings import ControlPlaneSettings
from controlplane.status import error_info

SERVICES: list[ServiceDescriptor] = [
    session_kernel_service_pb2.DESCRIPTOR.services_by_name["SessionKernelService"],
    admin_service_pb2.DESCRIPTOR.services_by_name["AdminService"],
    agent_service_pb2.DESCRIPTOR.services_by_name["AgentService"],
    credential_service_pb2.DESCRIPTOR.services_by_name["CredentialService"],
    environment_service_pb2.DESCRIPTOR.services_by_name["EnvironmentService"],
    webhook_service_pb2.DESCRIPTOR.services_by_name["WebhookService"],
    schedule_service_pb2.DESCRIPTOR.services_by_name["ScheduleService"],
    memory_service_pb2.DESCRIPTOR.services_by_name["MemoryService"],
]
METHODS = [(service, method) for service in SERVICES for method in service.methods]


def path(service: ServiceDescriptor, method: MethodDescriptor) -> str:
    return f"/{service.full_name}/{method.name}"


def test_every_rpc_has_an_authorization_rule() -> None:
    missing = [path(s, m) for s, m in METHODS if path(s, m) not in RULES]
    assert missing == [], "give them a rule in controlplane.identity.rules.RULES"
    assert set(RULES) == {path(s, m) for s, m in METHODS}, "RULES names an RPC that does not exist"


async def call(channel: grpc.aio.Channel, service: ServiceDescriptor, method: MethodDescriptor, key: str | None):
    """Call `method` with an empty request and `key` (None: no credential); its status code and ErrorInfo reason."""
    metadata = () if key is None else (("authorization", key),)
    request = b""  # an empty message of any type
    rpc = path(service, method)
    try:
        async with asyncio.timeout(30):
            if method.client_streaming and method.server_streaming:
                async for _ in channel.stream_stream(rpc)(iter([request]), metadata=metadata):
                    pass
            elif method.client_streaming:
                await channel.stream_unary(rpc)(iter([request]), metadata=metadata)
            elif method.server_streaming:
                async for _ in channel.unary_stream(rpc)(request, metadata=metadata, timeout=1):
                    pass
            else:
                await channel.unary_unary(rpc)(request, metadata=metadata)
    except grpc.aio.AioRpcError as error:
        info = error_info(error)
        return error.code(), info.reason if info else "", error.details() or ""
    return grpc.StatusCode.OK, "", ""


@pytest_asyncio.fixture
async def plane(database_url: str, bootstrap_key_file: str) -> AsyncIterator[RunningControlPlane]:
    settings = ControlPlaneSettings(
        database_url=database_url,
        listen="127.0.0.1:0",
        bootstrap_key_file=bootstrap_key_file,
        credentials_ttl=timedelta(0),  # every call checks the database: revocation and expiry at once
    )
    async with serve(settings) as running:
        yield running


async def counts(pool: asyncpg.Pool) -> tuple[int, ...]:
    return tuple(
        [
            await pool.fetchval(f"SELECT count(*) FROM {table}")
            for table in ("sessions", "events", "projects", "api_keys", "turns", "agent_commands")
        ]
    )


async def test_each_bad_credential_is_refused_by_every_rpc_and_changes_nothing(plane: RunningControlPlane) -> None:
    async with AstraBoxClient.connect(plane.address) as admin:
        viewer = (await admin.admin.create_api_key("viewer", role="viewer")).secret
        revoked = await admin.admin.create_api_key("revoked", role="admin")
        await admin.admin.revoke_api_key(revoked.key.key_id)
        expired = await admin.admin.create_api_key("expired", role="admin")
        await plane.pool.execute(
            "UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE key_id = $1", expired.key.key_id
        )
        unknown = keys.new_key().secret
        wrong_secret = revoked.secret[:-4] + ("AAAA" if not revoked.secret.endswith("AAAA") else "BBBB")
    cases = {
        "no credential": (None, grpc.StatusCode.UNAUTHENTICATED, "CREDENTIALS_MISSING"),
        "not bearer": (f"Basic {viewer}", grpc.StatusCode.UNAUTHENTICATED, "CREDENTIALS_INVALID"),
        "malformed": ("Bearer abx_not-a-key", grpc.StatusCode.UNAUTHENTICATED, "CREDENTIALS_INVALID"),
        "empty bearer": ("Bearer ", grpc.StatusCode.UNAUTHENTICATED, "CREDENTIALS_INVALID"),
        # Longer than any credential (gRPC itself refuses metadata beyond 16 KiB).
        "huge": ("Bearer " + "a" * 5000, grpc.StatusCode.UNAUTHENTICATED, "CREDENTIALS_INVALID"),
        "unknown key": (f"Bearer {unknown}", grpc.StatusCode.UNAUTHENTICATED, "CREDENTIALS_INVALID"),
        "wrong secret": (f"Bearer {wrong_secret}", grpc.StatusCode.UNAUTHENTICATED, "CREDENTIALS_INVALID"),
        "revoked key": (f"Bearer {revoked.secret}", grpc.StatusCode.UNAUTHENTICATED, "CREDENTIALS_REVOKED"),
        "expired key": (f"Bearer {expired.secret}", grpc.StatusCode.UNAUTHENTICATED, "CREDENTIALS_EXPIRED"),
    }
    before = await counts(plane.pool)
    problems = []
    async with grpc.aio.insecure_channel(plane.address) as channel:
        for case, (key, code, reason) in cases.items():
            for service, method in METHODS:
                got = await call(channel, service, method, key)
                if got[:2] != (code, reason):
                    problems.append(f"{method.name} with {case}: {got}")
                for secret in (viewer, revoked.secret, expired.secret, unknown, wrong_secret):
                    if secret in got[2] or secret.split("_", 2)[2] in got[2]:
                        problems.append(f"{method.name} with {case}: the message quotes a secret")
            # The viewer may read, nothing else.
        for service, method in METHODS:
            code, reason, _ = await call(channel, service, method, f"Bearer {viewer}")
            needs_more = RULES[path(service, method)].role > 1
            refused = (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, "ROLE_INSUFFICIENT")
            if needs_more != refused or code == grpc.StatusCode.UNAUTHENTICATED:
                problems.append(f"{method.name} with a viewer key: {code} {reason}")
    assert problems == []
    assert await counts(plane.pool) == before


async def test_a_developer_drives_sessions_but_manages_no_keys(plane: RunningControlPlane) -> None:
    async with AstraBoxClient.connect(plane.address) as admin:
        developer = (await admin.admin.create_api_key("dev", role="developer")).secret
    async with AstraBoxClient.connect(plane.address, api_key=developer) as client:
        me = await client.admin.whoami()
        assert (me.project.name, me.role) == ("default", admin_service_pb2.ROLE_DEVELOPER)
        # Past authorization: the control plane has no agent to place it on.
        with pytest.raises(Exception) as placed:
            await client.create_session(labels={"who": "dev"})
        assert placed.value.reason == "NO_AGENT_AVAILABLE"
        assert (await client.list_sessions()).sessions == []
        with pytest.raises(Exception) as refused:
            await client.admin.create_api_key("escalate", role="admin")
        assert refused.value.code == grpc.StatusCode.PERMISSION_DENIED
        assert refused.value.reason == "ROLE_INSUFFICIENT"
        assert "admin" in refused.value.message


async def test_admins_manage_their_own_project_only(plane: RunningControlPlane) -> None:
    async with AstraBoxClient.connect(plane.address) as operator:
        team = await operator.admin.create_project("team-a")
        other = await operator.admin.create_project("team-b")
        team_admin = await operator.admin.create_api_key("a-admin", role="admin", project_id=team.project_id)
        b_key = await operator.admin.create_api_key("b-dev", role="developer", project_id=other.project_id)
        with pytest.raises(Exception) as exists:
            await operator.admin.create_project("team-a")
        assert exists.value.reason == "PROJECT_EXISTS"
        with pytest.raises(Exception) as bad_name:
            await operator.admin.create_project("Team A!")
        assert bad_name.value.reason == "INVALID_ARGUMENT"
    async with AstraBoxClient.connect(plane.address, api_key=team_admin.secret) as client:
        assert [p.name for p in await client.admin.list_projects()] == ["team-a"]
        created = await client.admin.create_api_key("a-viewer", role="viewer")
        assert created.key.project_id == team.project_id
        assert {k.key_id for k in await client.admin.list_api_keys()} == {team_admin.key.key_id, created.key.key_id}
        # Another project answers as one that does not exist; its keys cannot be revoked from here.
        for attempt in (
            client.admin.list_api_keys(other.project_id),
            client.admin.create_api_key("sneak", role="admin", project_id=other.project_id),
        ):
            with pytest.raises(Exception) as hidden:
                await attempt
            assert (hidden.value.code, hidden.value.reason) == (grpc.StatusCode.NOT_FOUND, "PROJECT_NOT_FOUND")
        with pytest.raises(Exception) as hidden:
            await client.admin.revoke_api_key(b_key.key.key_id)
        assert (hidden.value.code, hidden.value.reason) == (grpc.StatusCode.NOT_FOUND, "KEY_NOT_FOUND")
        with pytest.raises(Exception) as operator_only:
            await client.admin.create_project("team-c")
        assert operator_only.value.reason == "ROLE_INSUFFICIENT"
    async with AstraBoxClient.connect(plane.address, api_key=b_key.secret) as b:
        assert (await b.admin.whoami()).project.name == "team-b"  # untouched


async def test_a_key_records_its_last_use_and_listings_never_hold_secrets(plane: RunningControlPlane) -> None:
    async with AstraBoxClient.connect(plane.address) as admin:
        created = await admin.admin.create_api_key("ci", role="viewer")
        assert not created.key.HasField("last_use_time")
        async with AstraBoxClient.connect(plane.address, api_key=created.secret) as ci:
            await ci.admin.whoami()
        [listed] = [k for k in await admin.admin.list_api_keys() if k.key_id == created.key.key_id]
        assert listed.HasField("last_use_time") and listed.created_by.startswith("key:")
        assert created.secret.split("_", 2)[2] not in str(await admin.admin.list_api_keys())
    stored = await plane.pool.fetchrow("SELECT * FROM api_keys WHERE key_id = $1", created.key.key_id)
    assert created.secret.split("_", 2)[2].encode() not in b"".join(
        v if isinstance(v, bytes) else str(v).encode() for v in stored.values()
    )


async def test_a_revoked_key_stops_working_on_another_replica(database_url: str, bootstrap_key_file: str) -> None:
    """Each replica trusts a verified key for `credentials_ttl` (2 s by default): revoked on one, it
    is refused by the other once that passes."""

    def settings() -> ControlPlaneSettings:
        return ControlPlaneSettings(
            database_url=database_url, listen="127.0.0.1:0", bootstrap_key_file=bootstrap_key_file
        )

    async with serve(settings()) as a, serve(settings()) as b, AstraBoxClient.connect(a.address) as admin:
        key = await admin.admin.create_api_key("leaver", role="viewer")
        async with AstraBoxClient.connect(b.address, api_key=key.secret) as on_b:
            await on_b.admin.whoami()  # cached on b now
            await admin.admin.revoke_api_key(key.key.key_id)
            async with asyncio.timeout(30):
                while True:
                    try:
                        await on_b.admin.whoami()
                    except Exception as error:
                        assert error.reason == "CREDENTIALS_REVOKED"  # type: ignore[attr-defined]
                        break
                    await asyncio.sleep(0.1)


async def test_every_mutating_call_is_audited_with_its_caller_and_outcome_and_never_a_secret(
    plane: RunningControlPlane,
) -> None:
    missing_session = "00000000-0000-4000-8000-000000000001"
    async with AstraBoxClient.connect(plane.address) as admin:
        me = await admin.admin.whoami()
        created = await admin.admin.create_api_key("dev", role="developer")
        async with AstraBoxClient.connect(plane.address, api_key=created.secret) as developer:
            with pytest.raises(AstraBoxError):
                await developer.create_session(request_id="audited-1")  # no agent: UNAVAILABLE, still audited
            with pytest.raises(AstraBoxError):
                await developer.send_message(missing_session, "secret plans", client_message_id="m1")
            await developer.list_sessions()  # a read: not audited
        await admin.admin.revoke_api_key(created.key.key_id)
        records = list((await admin.admin.list_audit_records()).records)
        by_method = {r.method: r for r in records}
        assert [r.method for r in records] == ["RevokeApiKey", "SendMessage", "CreateSession", "CreateApiKey"]
        assert by_method["CreateApiKey"].actor == f"key:{me.key_id}" and by_method["CreateApiKey"].code == "OK"
        assert by_method["CreateApiKey"].details["name"] == "dev"
        assert by_method["CreateSession"].actor == f"key:{created.key.key_id}"
        assert (by_method["CreateSession"].code, by_method["CreateSession"].details["request_id"]) == (
            "UNAVAILABLE",
            "audited-1",
        )
        assert (by_method["SendMessage"].code, by_method["SendMessage"].session_id) == ("NOT_FOUND", missing_session)
        assert by_method["RevokeApiKey"].details["key_id"] == created.key.key_id
        text = str(records)
        assert "secret plans" not in text and created.secret.split("_", 2)[2] not in text
        # Paged, and only for admins.
        first = await admin.admin.list_audit_records(page_size=3)
        rest = await admin.admin.list_audit_records(page_size=3, page_token=first.next_page_token)
        assert [r.method for r in [*first.records, *rest.records]] == [r.method for r in records]
        viewer = (await admin.admin.create_api_key("v", role="viewer")).secret
    async with AstraBoxClient.connect(plane.address, api_key=viewer) as reader:
        with pytest.raises(AstraBoxError) as refused:
            await reader.admin.list_audit_records()
        assert refused.value.reason == "ROLE_INSUFFICIENT"
