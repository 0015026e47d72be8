"""Sessions in an environment: CreateSession pins one version of a project's environment, the
session shows and journals it, and every StartRuntime the control plane issues for the session
carries that version's spec — also after the environment got a new version, when the session is
placed again on another agent."""

from __future__ import annotations

import grpc
import pytest_asyncio

from astrabox.environments.v1 import environment_pb2 as epb
from controlplane.environments.definitions import EnvironmentDefinitions
from controlplane.forwarding import read_cluster_secret
from controlplane.journal import EventKind
from controlplane.page_tokens import PageTokens
from tests.controlplane.test_conversation import api as api
from tests.controlplane.test_conversation import commands, ok, refused, session_of
from tests.controlplane.test_sessions_from_agents import starts


def env(pip: str) -> epb.EnvironmentSpec:
    return epb.EnvironmentSpec(
        packages=epb.Packages(pip=[pip]),
        variables={"MODE": "ci"},
        network=epb.NetworkPolicy(mode=epb.NETWORK_MODE_LIMITED, allowed_hosts=["pypi.org"]),
    )


@pytest_asyncio.fixture
async def environments(plane) -> EnvironmentDefinitions:
    await plane.connect_agent()
    return EnvironmentDefinitions(plane.pool, PageTokens.from_cluster_secret(await read_cluster_secret(plane.pool)))


async def test_a_session_pins_its_environments_version_shows_journals_and_starts_with_it(api, plane, environments):
    made, first = await environments.create(plane.project_id, "e1", "py", env("requests==2.32.3"))
    session = (await ok(api, "CreateSession", request_id="s1", environment="py")).session
    pinned = session.environment
    assert (pinned.environment_id, pinned.name, pinned.version) == (made.environment_id, "py", 1)
    assert pinned.build_digest == first.build_digest
    [start] = starts(await commands(plane, session.session_id))
    assert start.environment.spec == env("requests==2.32.3")
    assert (start.environment.environment_id, start.environment.version) == (made.environment_id, 1)
    assert start.environment.build_digest == first.build_digest
    [created] = [e for e in await plane.journal.read(session.session_id, 0, 10) if e.kind is EventKind.SESSION_CREATED]
    assert created.payload["environment"]["version"] == 1
    listed = (await ok(api, "ListSessionEvents", session_id=session.session_id)).events[0]
    assert listed.session_created.environment == pinned
    assert (await ok(api, "ListSessions")).sessions[0].environment == pinned


async def test_a_session_placed_again_after_a_new_version_keeps_its_pinned_one(api, plane, environments):
    await environments.create(plane.project_id, "e1", "py", env("requests==2.32.3"))
    sid = (await ok(api, "CreateSession", request_id="s1", environment="py")).session.session_id
    await plane.runtime_started(sid)
    newer = await environments.update(plane.project_id, "py", env("requests==2.31.0"))
    assert newer.version.version == 2
    # Its agent is lost; the next message places the session on another agent.
    await plane.pool.execute("UPDATE agents SET lease_expires_at = now() - interval '1 s'")
    await plane.sweeper.sweep()
    await plane.connect_agent("agent-2")
    await ok(api, "SendMessage", session_id=sid, client_message_id="m", text="hello")
    first, second = starts(await commands(plane, sid))
    assert second.environment == first.environment
    assert (second.environment.version, list(second.environment.spec.packages.pip)) == (1, ["requests==2.32.3"])
    assert (await session_of(api, sid)).environment.version == 1
    # A new session gets the newest, or the version it names.
    new = (await ok(api, "CreateSession", request_id="s2", environment="py")).session
    old = (await ok(api, "CreateSession", request_id="s3", environment="py", environment_version=1)).session
    assert (new.environment.version, old.environment.version) == (2, 1)


async def test_a_retry_must_name_the_same_environment(api, plane, environments):
    await environments.create(plane.project_id, "e1", "py", env("requests"))
    await environments.create(plane.project_id, "e2", "node", epb.EnvironmentSpec())
    made = (await ok(api, "CreateSession", request_id="s1", environment="py")).session
    await environments.update(plane.project_id, "py", env("requests==1"))
    again = (await ok(api, "CreateSession", request_id="s1", environment="py")).session
    assert (again.session_id, again.environment.version) == (made.session_id, 1)
    for fields in ({"environment": "node"}, {"environment": "py", "environment_version": 2}, {}):
        code, reason, _ = await refused(api, "CreateSession", request_id="s1", **fields)
        assert (code, reason) == (grpc.StatusCode.ALREADY_EXISTS, "REQUEST_ID_REUSED"), fields
    # Sessions without an environment run in the built-in one, as before.
    plain = (await ok(api, "CreateSession", request_id="s2")).session
    assert not plain.HasField("environment")
    [start] = starts(await commands(plane, plain.session_id))
    assert not start.HasField("environment")


async def test_an_unknown_or_archived_environment_starts_nothing(api, plane, environments):
    await environments.create(plane.project_id, "e1", "py", env("requests"))
    code, reason, details = await refused(api, "CreateSession", request_id="s1", environment="nobody")
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "ENVIRONMENT_NOT_FOUND") and "nobody" in details
    code, reason, _ = await refused(api, "CreateSession", request_id="s2", environment="py", environment_version=5)
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "ENVIRONMENT_VERSION_NOT_FOUND")
    code, reason, _ = await refused(api, "CreateSession", request_id="s3", environment_version=1)
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    await environments.archive(plane.project_id, "py")
    code, reason, _ = await refused(api, "CreateSession", request_id="s4", environment="py")
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "ENVIRONMENT_ARCHIVED")
    assert await plane.pool.fetchval("SELECT count(*) FROM sessions") == 0
