"""Tenancy: each project sees and touches only its own sessions. Generated from the service
descriptor: every RPC that names a session, called by another project with a valid key, answers
exactly as for an id that does not exist, and changes nothing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import grpc
import pytest
import pytest_asyncio
from google.protobuf.descriptor import MethodDescriptor

from astrabox.admin.v1 import admin_service_pb2
from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as pb
from controlplane.server import RunningControlPlane, serve
from controlplane.settings import ControlPlaneSettings
from controlplane.status import error_info
from tests.controlplane.test_authorization import counts

SERVICE = pb.DESCRIPTOR.services_by_name["SessionKernelService"]
NAMING_A_SESSION = [m for m in SERVICE.methods if "session_id" in m.input_type.fields_by_name]


@pytest_asyncio.fixture
async def running(plane, database_url: str, bootstrap_key_file: str) -> AsyncIterator[RunningControlPlane]:
    """A control plane on the `plane`'s database, with an agent on record (not attached)."""
    await plane.connect_agent(capacity=100)
    settings = ControlPlaneSettings(
        database_url=database_url,
        listen="127.0.0.1:0",
        bootstrap_key_file=bootstrap_key_file,
        lease_ttl=timedelta(minutes=10),
        idle_stop_after=timedelta(0),
    )
    async with serve(settings) as control_plane:
        yield control_plane


async def two_projects(address: str) -> tuple[str, str]:
    """Developer keys of the project `default` and of a new project `other`."""
    async with AstraBoxClient.connect(address) as operator:
        other = await operator.admin.create_project("other")
        mine = await operator.admin.create_api_key("mine", role="developer")
        theirs = await operator.admin.create_api_key("theirs", role="developer", project_id=other.project_id)
    return mine.secret, theirs.secret


async def answer(channel: grpc.aio.Channel, method: MethodDescriptor, session_id: str, key: str) -> tuple:
    """(code, reason, details) of `method` called with a request naming only `session_id`."""
    request = getattr(pb, method.input_type.name)(session_id=session_id).SerializeToString()
    path = f"/{SERVICE.full_name}/{method.name}"
    metadata = (("authorization", f"Bearer {key}"),)
    try:
        async with asyncio.timeout(30):
            if method.client_streaming:
                await channel.stream_unary(path)(iter([request]), metadata=metadata)
            elif method.server_streaming:
                async for _ in channel.unary_stream(path)(request, metadata=metadata):
                    break
            else:
                await channel.unary_unary(path)(request, metadata=metadata)
    except grpc.aio.AioRpcError as error:
        info = error_info(error)
        return error.code(), info.reason if info else "", error.details() or ""
    return grpc.StatusCode.OK, "", ""


async def test_another_projects_session_answers_like_one_that_does_not_exist(plane, running) -> None:
    mine, theirs = await two_projects(running.address)
    async with AstraBoxClient.connect(running.address, api_key=mine) as client:
        session = await client.create_session(request_id="mine-1")
    await plane.runtime_started(session.session_id)
    ours = session.session_id
    before = await counts(running.pool)
    problems = []
    async with grpc.aio.insecure_channel(running.address) as channel:
        for method in NAMING_A_SESSION:
            unknown = str(uuid.uuid4())
            as_unknown = await answer(channel, method, unknown, theirs)
            as_foreign = await answer(channel, method, ours, theirs)
            expected = (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")
            if as_foreign[:2] != expected or as_unknown[:2] != expected:
                problems.append(f"{method.name}: foreign {as_foreign[:2]}, unknown {as_unknown[:2]}")
            if as_foreign[2].replace(ours, "ID") != as_unknown[2].replace(unknown, "ID"):
                problems.append(f"{method.name}: {as_foreign[2]!r} tells apart from {as_unknown[2]!r}")
        assert problems == [], "\n".join(problems)
        assert await counts(running.pool) == before
        # The owner still reaches it (deleting it last: the methods after would not find it).
        for method in sorted(NAMING_A_SESSION, key=lambda m: m.name == "DeleteSession"):
            own = await answer(channel, method, ours, mine)
            if own[1] == "SESSION_NOT_FOUND":
                problems.append(f"{method.name}: its own project is refused: {own}")
    assert problems == [], "\n".join(problems)
    async with AstraBoxClient.connect(running.address, api_key=theirs) as other:
        assert [s.session_id for s in (await other.list_sessions()).sessions] == []


async def test_each_project_lists_only_its_own_and_request_ids_are_per_project(plane, running) -> None:
    mine, theirs = await two_projects(running.address)
    async with (
        AstraBoxClient.connect(running.address, api_key=mine) as a,
        AstraBoxClient.connect(running.address, api_key=theirs) as b,
    ):
        # The same idempotency key, at the same time, in both projects: two sessions.
        first_a, first_b = await asyncio.gather(
            a.create_session(request_id="same", labels={"p": "a"}),
            b.create_session(request_id="same", labels={"p": "b"}),
        )
        assert first_a.session_id != first_b.session_id
        assert (await a.create_session(request_id="same", labels={"p": "a"})).session_id == first_a.session_id
        more_b = [await b.create_session(labels={"p": "b"}) for _ in range(3)]
        listed_a = [s.session_id async for s in a.iter_sessions(page_size=1)]
        listed_b = [s.session_id async for s in b.iter_sessions(page_size=1)]
        assert listed_a == [first_a.session_id]
        assert sorted(listed_b) == sorted([first_b.session_id, *(s.session_id for s in more_b)])
        assert (await b.get_session(first_b.session_id)).labels["p"] == "b"
        # The journal says who: events a call caused carry its key; what the agent reports, none.
        await plane.runtime_started(first_a.session_id)
        events = [e async for e in a.iter_events(first_a.session_id)]
        by_kind = {e.WhichOneof("payload"): e.actor for e in events}
        assert by_kind["session_created"] == f"key:{mine.split('_')[1]}"
        assert by_kind["runtime_ready"] == ""


async def test_a_projects_sessions_go_to_its_own_agents_first_and_never_to_anothers(plane, running) -> None:
    mine, theirs = await two_projects(running.address)
    await plane.connect_agent("dedicated", capacity=1)
    await plane.connect_agent("shared", capacity=1)
    async with AstraBoxClient.connect(running.address) as operator:
        [other] = [p for p in await operator.admin.list_projects() if p.name == "other"]
        await operator.admin.dedicate_agent("dedicated", other.project_id)
        await operator.admin.dedicate_agent("agent-1", other.project_id)  # the fixture's agent too
    async with (
        AstraBoxClient.connect(running.address, api_key=mine) as a,
        AstraBoxClient.connect(running.address, api_key=theirs) as b,
    ):
        first_b = await b.create_session()
        assert first_b.agent_id in ("dedicated", "agent-1") and first_b.project_id == other.project_id
        # The default project only has the shared pool: one place, then it is full (the dedicated ones,
        # free, are neither used nor counted).
        assert (await a.create_session()).agent_id == "shared"
        with pytest.raises(AstraBoxError) as full:
            await a.create_session()
        assert full.value.reason == "CAPACITY_EXHAUSTED"
        assert full.value.metadata == {"agents": "1", "capacity": "1", "live": "1"}


ADMIN = admin_service_pb2.DESCRIPTOR.services_by_name["AdminService"]


async def test_another_projects_admin_reaches_nothing_of_this_project(running) -> None:
    """Every AdminService RPC, called by another project's admin naming this project, its key or its
    agent: refused as not found (or as operator-only), nothing revealed, nothing changed."""
    async with AstraBoxClient.connect(running.address) as operator:
        ours = (await operator.admin.whoami()).project
        our_key = (await operator.admin.create_api_key("ours", role="viewer")).key
        other = await operator.admin.create_project("other")
        their_admin = (await operator.admin.create_api_key("theirs", role="admin", project_id=other.project_id)).secret
    names = {"project_id": ours.project_id, "key_id": our_key.key_id, "agent_id": "agent-1", "name": "sneaky"}
    before = await counts(running.pool)
    problems = []
    async with grpc.aio.insecure_channel(running.address) as channel:
        for method in ADMIN.methods:
            fields = {f: v for f, v in names.items() if f in method.input_type.fields_by_name}
            if "role" in method.input_type.fields_by_name:
                fields["role"] = admin_service_pb2.ROLE_ADMIN
            request = getattr(admin_service_pb2, method.input_type.name)(**fields).SerializeToString()
            try:
                response = await channel.unary_unary(f"/{ADMIN.full_name}/{method.name}")(
                    request, metadata=(("authorization", f"Bearer {their_admin}"),), timeout=30
                )
                outcome = ("OK", "")
            except grpc.aio.AioRpcError as error:
                info = error_info(error)
                outcome = (error.code().name, info.reason if info else "")
                response = (error.details() or "").encode()
            allowed = {
                ("NOT_FOUND", "PROJECT_NOT_FOUND"),
                ("NOT_FOUND", "KEY_NOT_FOUND"),
                ("PERMISSION_DENIED", "ROLE_INSUFFICIENT"),
            }
            if method.name in ("WhoAmI", "ListProjects", "ListApiKeys", "ListAuditRecords") and not fields:
                allowed.add(("OK", ""))  # its own project's, below
            if outcome not in allowed:
                problems.append(f"{method.name}: {outcome}")
            named_it = "key_id" in fields  # a refusal may echo what the caller sent
            if (our_key.key_id.encode() in response and not named_it) or b"ours" in response:
                problems.append(f"{method.name}: reveals this project's key")
    assert problems == []
    assert await counts(running.pool) == before
