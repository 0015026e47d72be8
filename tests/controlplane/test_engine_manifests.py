"""Engines as agents declare them: sessions are validated against the manifests in the agents'
Hello, and the control plane has no engine vocabulary of its own."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from datetime import timedelta

import grpc
import pytest

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane.agents import AgentHello
from controlplane.convert import session_to_proto
from controlplane.engines import EngineManifest
from controlplane.errors import InvalidArgument, NoAgentAvailable
from controlplane.kernel import CreateSession
from controlplane.server import serve
from controlplane.settings import ControlPlaneSettings
from serverkit import versions
from tests.controlplane.conftest import CLAUDE_CODE
from tests.support import admission

OTHER = EngineManifest(
    kind="other",
    permission_modes=("ask", "auto"),
    default_permission_mode="ask",
    supports_interactions=False,
    supports_background_tasks=True,
    supports_server_info=False,
)


def hello(agent_id: str, *engines: EngineManifest, capacity: int = 4) -> AgentHello:
    return AgentHello(agent_id, "i1", ["local"], list(engines), capacity, {})


async def test_a_session_takes_its_default_mode_and_capabilities_from_the_declared_manifest(plane):
    await plane.agents.register(hello("agent-o", OTHER))
    created = await plane.kernel.create_session(
        CreateSession(request_id="other-1", project_id=plane.project_id, engine="other")
    )
    assert created.permission_mode == "ask"
    shown = session_to_proto(await plane.kernel.get_session(created.session_id))
    assert shown.capabilities.engine == "other"
    assert list(shown.capabilities.permission_modes) == ["ask", "auto"]
    assert not shown.capabilities.supports_interactions and shown.capabilities.supports_background_tasks

    with pytest.raises(InvalidArgument) as refused:  # Claude Code's mode, not this engine's
        await plane.conversation.set_permission_mode(created.session_id, "plan", "mode-1")
    assert refused.value.reason == "PERMISSION_MODE_INVALID" and "ask, auto" in refused.value.message
    await plane.conversation.set_permission_mode(created.session_id, "auto", "mode-2")
    assert (await plane.kernel.get_session(created.session_id)).permission_mode == "auto"


async def test_claude_codes_modes_are_the_ones_its_agent_declares(plane):
    await plane.connect_agent()
    created = await plane.kernel.create_session(CreateSession(request_id="claude-1", project_id=plane.project_id))
    assert (created.engine, created.permission_mode) == ("claude_code", "bypassPermissions")
    shown = session_to_proto(await plane.kernel.get_session(created.session_id))
    assert tuple(shown.capabilities.permission_modes) == CLAUDE_CODE.permission_modes
    assert "plan" in CLAUDE_CODE.permission_modes


async def test_an_engine_no_agent_declared_is_unknown_while_agents_run_others(plane):
    await plane.connect_agent()
    with pytest.raises(InvalidArgument) as refused:
        await plane.kernel.create_session(
            CreateSession(request_id="other-2", project_id=plane.project_id, engine="other")
        )
    assert refused.value.metadata == {"field": "engine"}
    assert "connected agents run: claude_code" in refused.value.message


async def test_without_an_agent_that_declared_it_a_session_cannot_be_created(plane):
    with pytest.raises(NoAgentAvailable) as refused:  # no agent ever connected
        await plane.kernel.create_session(CreateSession(request_id="none-1", project_id=plane.project_id))
    assert "start one with `astrabox agent`" in refused.value.message


async def test_after_the_declaring_agent_lapsed_a_retried_create_still_returns_its_session(plane):
    await plane.connect_agent()
    created = await plane.kernel.create_session(CreateSession(request_id="lapse-1", project_id=plane.project_id))
    await plane.pool.execute("UPDATE agents SET lease_expires_at = now() - interval '1 s'")

    again = await plane.kernel.create_session(CreateSession(request_id="lapse-1", project_id=plane.project_id))
    assert again.session_id == created.session_id
    with pytest.raises(NoAgentAvailable):
        await plane.kernel.create_session(CreateSession(request_id="lapse-2", project_id=plane.project_id))


async def test_a_session_is_validated_against_what_its_own_agent_declared(plane):
    narrow = dataclasses.replace(CLAUDE_CODE, permission_modes=("default", "plan"), default_permission_mode="default")
    await plane.agents.register(hello("agent-narrow", narrow, capacity=100))
    await plane.agents.register(hello("agent-wide", CLAUDE_CODE, capacity=1))  # connected last
    created = await plane.kernel.create_session(
        CreateSession(request_id="own-1", project_id=plane.project_id, permission_mode="plan")
    )
    assert created.agent_id == "agent-narrow"  # the most free capacity
    assert list(session_to_proto(created).capabilities.permission_modes) == ["default", "plan"]
    with pytest.raises(InvalidArgument) as refused:
        await plane.conversation.set_permission_mode(created.session_id, "bypassPermissions", "own-mode")
    assert refused.value.reason == "PERMISSION_MODE_INVALID"


# ---- through the relay endpoint -----------------------------------------------------------------


def manifest_proto(manifest: EngineManifest) -> runner_pb2.EngineManifest:
    return runner_pb2.EngineManifest(kind=manifest.kind, **manifest.to_json())


async def connect(address: str, message: runner_pb2.Hello) -> runner_pb2.ConnectResponse | grpc.aio.AioRpcError:
    """Say Hello; the control plane's first answer, or the error it ended the stream with."""
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.stream_stream(
            "/astrabox.runner.v1.RunnerService/Connect",
            request_serializer=runner_pb2.ConnectRequest.SerializeToString,
            response_deserializer=runner_pb2.ConnectResponse.FromString,
        )(iter([runner_pb2.ConnectRequest(hello=message)]))
        try:
            async with asyncio.timeout(30):
                return await call.read()
        except grpc.aio.AioRpcError as error:
            return error
        finally:
            call.cancel()


@pytest.fixture
def settings(database_url: str, bootstrap_key_file: str) -> ControlPlaneSettings:
    return ControlPlaneSettings(
        database_url=database_url,
        listen="127.0.0.1:0",
        lease_ttl=timedelta(minutes=1),
        bootstrap_key_file=bootstrap_key_file,
        **admission.AUTOMATIC,
    )


@pytest.mark.parametrize(
    ("manifests", "says"),
    [
        ([runner_pb2.EngineManifest(permission_modes=["a"])], "has no kind"),
        ([runner_pb2.EngineManifest(kind="x")], "declares no permission mode"),
        (
            [runner_pb2.EngineManifest(kind="x", permission_modes=["a"], default_permission_mode="b")],
            "is not one of its modes",
        ),
        ([runner_pb2.EngineManifest(kind="x", permission_modes=["a"])] * 2, "declared more than once"),
    ],
)
async def test_a_hello_with_a_manifest_requests_cannot_be_validated_against_is_refused(
    settings, plane, manifests, says
):
    async with serve(settings) as running:
        answer = await connect(
            running.address,
            runner_pb2.Hello(
                agent_id="bad-manifest",
                agent_credential=secrets.token_urlsafe(32),
                enrollment_token=admission.TOKEN,
                instance_id="i1",
                agent_version=versions.VERSION,
                engines=["x"],
                engine_manifests=manifests,
            ),
        )
    assert isinstance(answer, grpc.aio.AioRpcError), answer
    assert answer.code() is grpc.StatusCode.INVALID_ARGUMENT and says in answer.details()
    assert await plane.pool.fetchval("SELECT count(*) FROM agents WHERE agent_id = 'bad-manifest'") == 0


async def test_the_manifests_of_a_hello_are_what_its_sessions_are_validated_against(settings, plane):
    async with serve(settings) as running:
        answer = await connect(
            running.address,
            runner_pb2.Hello(
                agent_id="agent-h",
                agent_credential=secrets.token_urlsafe(32),
                enrollment_token=admission.TOKEN,
                instance_id="i1",
                agent_version=versions.VERSION,
                engines=["other", "claude_code"],
                capacity=2,
                engine_manifests=[manifest_proto(OTHER)],
            ),
        )
        assert isinstance(answer, runner_pb2.ConnectResponse) and answer.WhichOneof("message") == "welcome"
        assert await plane.agents.engine_manifest("other", "agent-h") == OTHER
        assert await plane.agents.pick_for("other", plane.project_id) == "agent-h"
        # Named without a manifest: not offered.
        assert await plane.agents.pick_for("claude_code", plane.project_id) is None
        with pytest.raises(InvalidArgument):
            await plane.kernel.create_session(
                CreateSession(request_id="h-1", project_id=plane.project_id, engine="claude_code")
            )


async def test_the_built_in_tools_an_agent_declares_are_shown_on_its_sessions(plane):
    await plane.connect_agent()
    created = await plane.kernel.create_session(CreateSession(request_id="tools-1", project_id=plane.project_id))
    shown = session_to_proto(await plane.kernel.get_session(created.session_id))
    assert tuple(shown.capabilities.tools) == CLAUDE_CODE.tools and "Bash" in shown.capabilities.tools


async def test_a_manifest_stored_before_manifests_listed_tools_reads_with_none(plane):
    await plane.connect_agent()
    await plane.pool.execute(
        "UPDATE agents SET engine_manifests = jsonb_build_object('claude_code',"
        " (engine_manifests -> 'claude_code') - 'tools')"
    )
    manifest = await plane.agents.engine_manifest("claude_code")
    assert manifest.tools == () and manifest.permission_modes == CLAUDE_CODE.permission_modes
