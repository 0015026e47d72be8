"""A session started with a git repository: CreateSession checks the source (http(s) only, no user
information, a ref that cannot be an option, a directory inside the workspace), shows and journals
it, carries it on the session's first StartRuntime, and a retry must ask for the same one."""

from __future__ import annotations

import grpc
import pytest

from astrabox.environments.v1 import environment_pb2 as epb
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as pb
from controlplane.journal import EventKind
from tests.controlplane.test_conversation import api as api
from tests.controlplane.test_conversation import commands, ok, refused, session_of
from tests.controlplane.test_sessions_from_agents import starts

REPO = "http://127.0.0.1:8417/project.git"


async def test_a_session_carries_its_git_source_to_its_first_start(api, plane):
    await plane.connect_agent()
    source = epb.GitSource(url=REPO, ref="v1.0", directory="./src//app/")
    session = (await ok(api, "CreateSession", request_id="s1", git_source=source)).session
    expected = epb.GitSource(url=REPO, ref="v1.0", directory="src/app")
    assert session.git_source == expected
    assert (await session_of(api, session.session_id)).git_source == expected
    [start] = starts(await commands(plane, session.session_id))
    assert start.git_source == expected
    [created] = [e for e in await plane.journal.read(session.session_id, 0, 10) if e.kind is EventKind.SESSION_CREATED]
    assert created.payload["git_source"] == {"url": REPO, "ref": "v1.0", "directory": "src/app"}
    listed = (await ok(api, "ListSessionEvents", session_id=session.session_id)).events[0]
    assert listed.session_created.git_source == expected


async def test_a_session_without_one_has_none(api, plane):
    await plane.connect_agent()
    session = (await ok(api, "CreateSession", request_id="s1")).session
    assert not session.HasField("git_source")
    [start] = starts(await commands(plane, session.session_id))
    assert not start.HasField("git_source")


async def test_a_retry_must_ask_for_the_same_repository(api, plane):
    await plane.connect_agent()
    first = (await ok(api, "CreateSession", request_id="s1", git_source=epb.GitSource(url=REPO))).session
    again = (await ok(api, "CreateSession", request_id="s1", git_source=epb.GitSource(url=REPO))).session
    assert again.session_id == first.session_id
    other = epb.GitSource(url=REPO, ref="main")
    code, reason, _ = await refused(api, "CreateSession", request_id="s1", git_source=other)
    assert (code, reason) == (grpc.StatusCode.ALREADY_EXISTS, "REQUEST_ID_REUSED")
    code, reason, _ = await refused(api, "CreateSession", request_id="s1")
    assert (code, reason) == (grpc.StatusCode.ALREADY_EXISTS, "REQUEST_ID_REUSED")


@pytest.mark.parametrize(
    ("source", "field", "says"),
    [
        (epb.GitSource(url="http://user:hunter2@127.0.0.1/r.git"), "git_source.url", "user information"),
        (epb.GitSource(url="https://token@example.com/r.git"), "git_source.url", "user information"),
        (epb.GitSource(url="ext::sh -c touch% /tmp/pwned"), "git_source.url", "spaces"),
        (epb.GitSource(url="ext::sh%20-c%20id"), "git_source.url", "http:// or https://"),
        (epb.GitSource(url="file:///etc/passwd"), "git_source.url", "http:// or https://"),
        (epb.GitSource(url="ssh://git@example.com/r.git"), "git_source.url", "http:// or https://"),
        (epb.GitSource(url="--upload-pack=touch /tmp/x"), "git_source.url", "spaces"),
        (epb.GitSource(url="http:///r.git"), "git_source.url", "no valid host"),
        (epb.GitSource(), "git_source.url", "required"),
        (epb.GitSource(url=REPO, ref="--upload-pack=x"), "git_source.ref", "'-'"),
        (epb.GitSource(url=REPO, ref="-b"), "git_source.ref", "'-'"),
        (epb.GitSource(url=REPO, ref="main..other"), "git_source.ref", "'..'"),
        (epb.GitSource(url=REPO, ref="a b"), "git_source.ref", "spaces"),
        (epb.GitSource(url=REPO, ref="HEAD@{1}"), "git_source.ref", "'@{'"),
        (epb.GitSource(url=REPO, directory="../outside"), "git_source.directory", "'..'"),
        (epb.GitSource(url=REPO, directory="a/../../b"), "git_source.directory", "'..'"),
        (epb.GitSource(url=REPO, directory="/etc"), "git_source.directory", "absolute"),
    ],
)
async def test_a_source_the_agent_must_not_clone_is_refused(api, plane, source, field, says):
    await plane.connect_agent()
    _, code, details, info = await api.unary(
        "CreateSession", pb.CreateSessionRequest(request_id="s1", git_source=source)
    )
    assert (code, info.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_GIT_SOURCE"), details
    assert info.metadata["field"] == field and says in details
    assert "hunter2" not in details and "token@" not in details
    assert await plane.pool.fetchval("SELECT count(*) FROM sessions") == 0


async def test_a_session_placed_again_on_another_agent_gets_its_repository_again(api, plane):
    await plane.connect_agent()
    source = epb.GitSource(url=REPO, ref="v1.0")
    sid = (await ok(api, "CreateSession", request_id="s1", git_source=source)).session.session_id
    await plane.runtime_started(sid)
    # Its agent is lost; the next message places the session on another agent, in a new sandbox.
    await plane.pool.execute("UPDATE agents SET lease_expires_at = now() - interval '1 s'")
    await plane.sweeper.sweep()
    await plane.connect_agent("agent-2")
    await ok(api, "SendMessage", session_id=sid, client_message_id="m", text="hello")
    first, second = starts(await commands(plane, sid))
    assert first.git_source == second.git_source == source
