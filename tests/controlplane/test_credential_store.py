"""The credential store on a real control plane (gRPC over a socket, real PostgreSQL): secrets put,
replaced, listed and deleted; stored encrypted under the operator's key and bound to their name;
given by ResolveCredentials to the agent a session is placed on, and to no one else; and never in a
log line or an error."""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from structlog.testing import capture_logs

from astrabox.agents.v1 import agent_pb2 as agent_pb
from astrabox.credentialstore.v1 import credential_service_pb2 as pb
from astrabox.credentialstore.v1 import credential_service_pb2_grpc as pb_grpc
from astrabox.environments.v1 import environment_pb2 as env_pb
from astrabox.runner.v1 import runner_service_pb2 as runner_pb
from astrabox.runner.v1 import runner_service_pb2_grpc as runner_grpc
from controlplane import store
from controlplane.credential_store.resolve import AGENT_CREDENTIAL_METADATA, AGENT_ID_METADATA
from controlplane.identity import keys
from controlplane.kernel import CreateSession
from controlplane.server import RunningControlPlane, serve
from controlplane.settings import ControlPlaneSettings, SettingsError
from controlplane.status import error_info
from dataplane_agent.credentials import ControlPlaneLink, CredentialUnavailable, ResolvedCredentials, binding
from tests.support import auth

SECRET = "ghp_s3cr3t-token-for-the-git-host"
KEY_A = base64.b64encode(b"A" * 32).decode()
KEY_B = base64.b64encode(b"B" * 32).decode()
AGENT = "agent-1"
AGENT_CREDENTIAL = "c" * 43


Serve = Callable[..., AbstractAsyncContextManager[RunningControlPlane]]


@pytest_asyncio.fixture
async def control_plane(database_url: str, bootstrap_key_file: str) -> AsyncIterator[Serve]:
    def run(credential_key: str = KEY_A, **more: object) -> AbstractAsyncContextManager[RunningControlPlane]:
        settings = ControlPlaneSettings(
            database_url=database_url,
            listen="127.0.0.1:0",
            lease_ttl=timedelta(minutes=10),
            bootstrap_key_file=bootstrap_key_file,
            credential_key=credential_key,
            **more,
        )
        return serve(settings)

    yield run


def refusal(error: grpc.aio.AioRpcError) -> tuple[grpc.StatusCode, str]:
    info = error_info(error)
    return error.code(), info.reason if info else ""


async def put(address: str, name: str, secret: str, description: str = "") -> pb.PutCredentialResponse:
    async with auth.channel(address) as channel:
        return await pb_grpc.CredentialServiceStub(channel).PutCredential(
            pb.PutCredentialRequest(name=name, secret=secret, description=description)
        )


async def test_put_replace_list_delete(control_plane: Serve) -> None:
    async with control_plane() as running, auth.channel(running.address) as channel:
        stub = pb_grpc.CredentialServiceStub(channel)
        made = await stub.PutCredential(pb.PutCredentialRequest(name="git", secret=SECRET, description="the git host"))
        assert made.created and made.credential.version == 1 and made.credential.description == "the git host"
        replaced = await stub.PutCredential(pb.PutCredentialRequest(name="git", secret=SECRET + "2"))
        assert not replaced.created and replaced.credential.version == 2
        await stub.PutCredential(pb.PutCredentialRequest(name="api.internal", secret="k" * 16 * 1024))
        listed = await stub.ListCredentials(pb.ListCredentialsRequest())
        assert [(c.name, c.version) for c in listed.credentials] == [("api.internal", 1), ("git", 2)]
        assert SECRET not in str(listed)
        first = await stub.ListCredentials(pb.ListCredentialsRequest(page_size=1))
        second = await stub.ListCredentials(pb.ListCredentialsRequest(page_size=1, page_token=first.next_page_token))
        assert [c.name for c in (*first.credentials, *second.credentials)] == ["api.internal", "git"]
        await stub.DeleteCredential(pb.DeleteCredentialRequest(name="git"))
        assert [c.name for c in (await stub.ListCredentials(pb.ListCredentialsRequest())).credentials] == [
            "api.internal"
        ]
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await stub.DeleteCredential(pb.DeleteCredentialRequest(name="git"))
        assert refusal(missing.value) == (grpc.StatusCode.NOT_FOUND, "CREDENTIAL_NOT_FOUND")


async def test_the_table_holds_no_secret(control_plane: Serve) -> None:
    async with control_plane() as running:
        await put(running.address, "git", SECRET)
        row = await running.pool.fetchrow("SELECT * FROM credential_store WHERE name = 'git'")
    stored = b"".join(bytes(v) if isinstance(v, bytes | memoryview) else str(v).encode() for v in row.values())
    assert SECRET.encode() not in stored
    assert base64.b64encode(SECRET.encode()) not in stored
    assert len(bytes(row["nonce"])) == 12 and len(bytes(row["ciphertext"])) == len(SECRET) + 16


@pytest.mark.parametrize(
    ("name", "secret", "description"),
    [
        ("..", SECRET, ""),
        ("a/b", SECRET, ""),
        ("n" * 65, SECRET, ""),
        ("", SECRET, ""),
        ("git", "", ""),
        ("git", SECRET + "\n", ""),
        ("git", SECRET + "\x00", ""),
        ("git", SECRET * 1000, ""),
        ("git", SECRET, "d" * 257),
    ],
)
async def test_bad_requests_are_refused_without_the_secret(control_plane: Serve, name, secret, description) -> None:
    async with control_plane() as running:
        with capture_logs() as logs, pytest.raises(grpc.aio.AioRpcError) as refused:
            await put(running.address, name, secret, description)
        assert refusal(refused.value)[0] == grpc.StatusCode.INVALID_ARGUMENT
        assert SECRET not in (refused.value.details() or "") and "s3cr3t" not in str(error_info(refused.value))
        assert "s3cr3t" not in repr(logs)
        assert await running.pool.fetchval("SELECT count(*) FROM credential_store") == 0


async def test_no_key_answers_credentials_unavailable(control_plane: Serve) -> None:
    async with control_plane(credential_key="") as running, auth.channel(running.address) as channel:
        stub = pb_grpc.CredentialServiceStub(channel)
        for call in (
            stub.PutCredential(pb.PutCredentialRequest(name="git", secret=SECRET)),
            stub.ListCredentials(pb.ListCredentialsRequest()),
            stub.DeleteCredential(pb.DeleteCredentialRequest(name="git")),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call
            assert refusal(refused.value) == (grpc.StatusCode.FAILED_PRECONDITION, "CREDENTIALS_UNAVAILABLE")
            assert "--credential-key-file" in (refused.value.details() or "")


# ---- ResolveCredentials ------------------------------------------------------------------------------


def spec_binding(*names: str, port: int = 8443) -> bytes:
    """An environment binding each of `names` to git.test and *.api.test on `port`, and (as stored
    before bindings had a port) to old.test:9000."""
    spec = env_pb.EnvironmentSpec(
        credentials=[
            env_pb.CredentialBinding(
                credential=name,
                hosts=["git.test", "*.api.test", "old.test:9000"],
                scheme=env_pb.CREDENTIAL_SCHEME_BEARER,
                port=port,
            )
            for name in names
        ]
    )
    return spec.SerializeToString(deterministic=True)


@pytest_asyncio.fixture
async def placed(plane) -> str:
    """A session placed on AGENT (enrolled with AGENT_CREDENTIAL), its environment binding `git` and `absent`."""
    await plane.connect_agent(AGENT)
    await store.agent_credentials.enrol(plane.pool, AGENT, keys.digest(AGENT_CREDENTIAL), admitted_by="test")
    await store.agent_credentials.enrol(plane.pool, "agent-2", keys.digest("d" * 43), admitted_by="test")
    session = await plane.kernel.create_session(CreateSession(request_id="s1", project_id=plane.project_id))
    await plane.pool.execute(
        "UPDATE sessions SET environment_spec = $2 WHERE session_id = $1",
        uuid.UUID(session.session_id),
        spec_binding("git", "absent"),
    )
    assert (
        await plane.pool.fetchval("SELECT agent_id FROM sessions WHERE session_id = $1", uuid.UUID(session.session_id))
        == AGENT
    )
    return session.session_id


async def resolve(
    address: str, session_id: str, agent_id: str = AGENT, credential: str = AGENT_CREDENTIAL
) -> runner_pb.ResolveCredentialsResponse:
    async with grpc.aio.insecure_channel(address) as channel:
        return await runner_grpc.RunnerServiceStub(channel).ResolveCredentials(
            runner_pb.ResolveCredentialsRequest(session_id=session_id),
            metadata=((AGENT_ID_METADATA, agent_id), (AGENT_CREDENTIAL_METADATA, credential)),
        )


async def test_the_placed_agent_gets_the_bound_secrets(control_plane: Serve, placed: str) -> None:
    async with control_plane() as running:
        await put(running.address, "git", SECRET)
        await put(running.address, "unbound", "not-for-this-session")
        with capture_logs() as logs:
            answer = await resolve(running.address, placed)
    assert [(c.name, list(c.hosts), c.port, c.allow_plain_http, c.scheme, c.secret) for c in answer.credentials] == [
        ("git", ["git.test:8443", "*.api.test:8443"], 8443, False, env_pb.CREDENTIAL_SCHEME_BEARER, SECRET)
    ]
    assert any(entry.get("missing") == ["absent"] for entry in logs)
    assert SECRET not in repr(logs)


async def test_another_agent_is_permission_denied(control_plane: Serve, placed: str) -> None:
    async with control_plane() as running:
        await put(running.address, "git", SECRET)
        for session_id in (placed, str(uuid.uuid4())):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await resolve(running.address, session_id, agent_id="agent-2", credential="d" * 43)
            assert refusal(refused.value) == (grpc.StatusCode.PERMISSION_DENIED, "SESSION_NOT_ON_AGENT")
            assert SECRET not in str(refused.value)


@pytest.mark.parametrize(
    ("agent_id", "credential"), [(AGENT, "x" * 43), (AGENT, ""), ("", ""), ("never-enrolled", "c" * 43)]
)
async def test_a_bad_agent_credential_is_unauthenticated(
    control_plane: Serve, placed: str, agent_id, credential
) -> None:
    async with control_plane() as running:
        await put(running.address, "git", SECRET)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await resolve(running.address, placed, agent_id=agent_id, credential=credential)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert (
            await running.pool.fetchval("SELECT count(*) FROM agent_credentials WHERE agent_id = 'never-enrolled'") == 0
        )


async def test_a_session_without_environment_gets_none(control_plane: Serve, placed: str, plane) -> None:
    await plane.pool.execute("UPDATE sessions SET environment_spec = NULL")
    async with control_plane(credential_key="") as running:  # not even a key is needed
        assert list((await resolve(running.address, placed)).credentials) == []


async def test_a_row_moved_to_another_name_does_not_decrypt(control_plane: Serve, placed: str, plane) -> None:
    async with control_plane() as running:
        await put(running.address, "elsewhere", SECRET)
        await plane.pool.execute("UPDATE credential_store SET name = 'git' WHERE name = 'elsewhere'")
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await resolve(running.address, placed)
    assert refusal(refused.value) == (grpc.StatusCode.FAILED_PRECONDITION, "CREDENTIAL_CORRUPT")
    assert SECRET not in str(refused.value)


async def test_a_row_under_another_key_names_the_key_and_rotation_reads_it(control_plane: Serve, placed: str) -> None:
    async with control_plane(credential_key=KEY_A) as running:
        await put(running.address, "git", SECRET)
    async with control_plane(credential_key=KEY_B) as running:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await resolve(running.address, placed)
        assert refusal(refused.value) == (grpc.StatusCode.FAILED_PRECONDITION, "CREDENTIAL_KEY_MISMATCH")
        assert "--credential-previous-key-file" in (refused.value.details() or "")
    async with control_plane(credential_key=KEY_B, credential_previous_key=KEY_A) as running:
        assert [c.secret for c in (await resolve(running.address, placed)).credentials] == [SECRET]
        await put(running.address, "git", SECRET)  # sealed again under KEY_B
    async with control_plane(credential_key=KEY_B) as running:
        assert [c.secret for c in (await resolve(running.address, placed)).credentials] == [SECRET]


def test_a_key_file_others_can_read_is_refused(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(KEY_A + "\n")
    os.chmod(key_file, 0o644)
    args = ["--database-url-file", str(tmp_path / "db"), "--credential-key-file", str(key_file)]
    (tmp_path / "db").write_text("postgresql://x/y")
    with pytest.raises(SettingsError, match="may be read by others"):
        ControlPlaneSettings.from_args(args, environ={})
    os.chmod(key_file, 0o600)
    settings = ControlPlaneSettings.from_args(args, environ={})
    assert settings.credential_key == KEY_A
    assert KEY_A not in repr(settings)


async def test_a_key_that_is_no_key_stops_the_start(control_plane: Serve) -> None:
    with pytest.raises(SettingsError, match="32 random bytes"):
        async with control_plane(credential_key=base64.b64encode(b"short").decode()):
            pass


# ---- the agent's side: dataplane_agent.credentials ----------------------------------------------------


async def test_the_agent_source_gets_bindings_and_keeps_them_for_its_ttl(control_plane: Serve, placed: str) -> None:
    now = [0.0]
    async with control_plane() as running:
        await put(running.address, "git", SECRET)
        source = ResolvedCredentials(
            ControlPlaneLink(running.address, AGENT, AGENT_CREDENTIAL), ttl=60, clock=lambda: now[0]
        )
        try:
            (found,) = await source.bindings(placed)
            assert found.name == "git" and found.port == 8443
            assert found.matches("git.test", 8443, tls=True) and found.matches("x.api.test", 8443, tls=True)
            assert not found.matches("git.test", 8443, tls=False)  # never in plain HTTP
            assert not found.matches("x.api.test", 443, tls=True) and not found.matches("old.test", 9000, tls=True)
            assert found.header_line() == ("Authorization", f"Bearer {SECRET}")
            assert SECRET not in repr(found)
            async with auth.channel(running.address) as channel:
                await pb_grpc.CredentialServiceStub(channel).DeleteCredential(pb.DeleteCredentialRequest(name="git"))
            assert [b.name for b in await source.bindings(placed)] == ["git"]  # within the TTL: no call
            now[0] += 61
            assert list(await source.bindings(placed)) == []
        finally:
            await source.close()


def agent_naming(**servers: str) -> bytes:
    """A session's agent with an HTTP MCP server per `servers` (name: the credential it names, "" for
    none) and a stdio one."""
    spec = agent_pb.AgentSpec(
        mcp_servers=[
            agent_pb.McpServer(name=name, http=agent_pb.HttpMcpServer(url=f"https://{name}.test/mcp", credential=cred))
            for name, cred in servers.items()
        ]
    )
    spec.mcp_servers.add(name="docs", stdio=agent_pb.StdioMcpServer(command="docs-mcp"))
    return spec.SerializeToString(deterministic=True)


async def test_an_mcp_servers_credential_comes_from_the_store_and_a_rotated_one_at_the_next_use(
    control_plane: Serve, placed: str, plane
) -> None:
    # Without an environment: an agent's MCP servers need none.
    config = agent_naming(tickets="tickets.token", wiki="tickets.token", unknown="absent", open="")
    await plane.pool.execute("UPDATE sessions SET environment_spec = NULL, config = $1", config)
    now = [0.0]
    async with control_plane() as running:
        await put(running.address, "tickets.token", SECRET)
        with capture_logs() as logs:
            answer = await resolve(running.address, placed)
        source = ResolvedCredentials(
            ControlPlaneLink(running.address, AGENT, AGENT_CREDENTIAL), ttl=60, clock=lambda: now[0]
        )
        try:
            first = await source.mcp_secret(placed, "tickets", "tickets.token")
            await put(running.address, "tickets.token", SECRET + "-rotated")
            rotated = await source.mcp_secret(placed, "tickets", "tickets.token")  # within the TTL: asked again
            with pytest.raises(CredentialUnavailable) as missing:
                await source.mcp_secret(placed, "unknown", "absent")
            assert list(await source.bindings(placed)) == []
        finally:
            await source.close()

    assert list(answer.credentials) == []
    assert sorted((m.server, m.name, m.secret) for m in answer.mcp_credentials) == [
        ("tickets", "tickets.token", SECRET),
        ("wiki", "tickets.token", SECRET),
    ]
    assert (first, rotated) == (SECRET, SECRET + "-rotated")
    assert "the project holds no credential 'absent'" in str(missing.value)
    assert "astrabox credentials put absent" in str(missing.value)
    assert any(entry.get("missing") == ["absent"] for entry in logs)
    assert SECRET not in repr(logs)


async def test_the_agent_source_refused_says_why_without_a_secret(control_plane: Serve, placed: str) -> None:
    async with control_plane() as running:
        await put(running.address, "git", SECRET)
        for link in (
            ControlPlaneLink(running.address, AGENT, "wrong" * 9),
            ControlPlaneLink(running.address, "agent-2", "d" * 43),
        ):
            source = ResolvedCredentials(link)
            try:
                with pytest.raises(CredentialUnavailable) as refused:
                    await source.bindings(placed)
            finally:
                await source.close()
            assert SECRET not in str(refused.value)
            assert "UNAUTHENTICATED" in str(refused.value) or "PERMISSION_DENIED" in str(refused.value)


async def test_a_binding_stored_before_ports_existed_means_https_on_443(
    control_plane: Serve, placed: str, plane
) -> None:
    old = env_pb.EnvironmentSpec(credentials=[env_pb.CredentialBinding(credential="git", hosts=["git.test"])])
    await plane.pool.execute("UPDATE sessions SET environment_spec = $1", old.SerializeToString())
    async with control_plane() as running:
        await put(running.address, "git", SECRET)
        (answer,) = (await resolve(running.address, placed)).credentials
    found = binding(answer)

    assert (list(answer.hosts), answer.port, answer.allow_plain_http) == (["git.test:443"], 443, False)
    assert found.matches("git.test", 443, tls=True)
    assert not found.matches("git.test", 443, tls=False) and not found.matches("git.test", 80, tls=False)
    assert not found.matches("git.test", 8443, tls=True)


def test_a_binding_written_without_a_scheme_is_sent_as_bearer() -> None:
    """An environment file's binding without `scheme:` (the README's default) carries UNSPECIFIED,
    which the proto says is BEARER: the proxy adds it so rather than refusing the host."""
    resolved = runner_pb.ResolvedCredential(name="api-token", hosts=["localhost:8080"], secret=SECRET)

    found = binding(resolved)

    assert found.header_line() == ("Authorization", f"Bearer {SECRET}")
