"""ListSessions' filters (controlplane.listing): by state, label selector and creation time, each and
together; strict selectors; stable paging whose token binds its filters; only the caller's project."""

from __future__ import annotations

import grpc
import pytest
import pytest_asyncio
from google.protobuf import timestamp_pb2

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as pb
from astrabox.sessionkernel.v1 import session_pb2
from controlplane.api import SessionKernelServicer
from controlplane.identity import store as identity_store
from controlplane.identity.callers import Caller, Role
from controlplane.quotas import Quotas
from controlplane.workspace import WorkspaceFiles, WorkspaceRouter
from tests.controlplane.test_conversation import ok, refused
from tests.support.grpc_testing_bridge import ServicerHarness

SERVICE = pb.DESCRIPTOR.services_by_name["SessionKernelService"]
READY, CREATING, ARCHIVED, FAILED = (
    session_pb2.SESSION_STATE_READY,
    session_pb2.SESSION_STATE_CREATING,
    session_pb2.SESSION_STATE_ARCHIVED,
    session_pb2.SESSION_STATE_FAILED,
)


def harness(plane, caller: Caller) -> ServicerHarness:
    workspace = WorkspaceFiles(plane.kernel, WorkspaceRouter(), Quotas(plane.pool))
    return ServicerHarness(SERVICE, SessionKernelServicer(plane.kernel, plane.conversation, workspace), caller)


@pytest_asyncio.fixture
async def api(plane) -> ServicerHarness:
    await plane.connect_agent(capacity=100)
    return harness(plane, plane.caller)


async def create(api, name: str, labels: dict[str, str] | None = None) -> session_pb2.Session:
    return (await ok(api, "CreateSession", request_id=name, labels=labels or {})).session


async def listed(api, **filters) -> list[str]:
    """The labels' `name` of every session the listing shows, page after page (two a page)."""
    names, token = [], ""
    while True:
        page = await ok(api, "ListSessions", page_size=2, page_token=token, **filters)
        names += [s.labels["name"] for s in page.sessions]
        if not (token := page.next_page_token):
            return names


@pytest_asyncio.fixture
async def fleet(api, plane) -> dict[str, session_pb2.Session]:
    """Sessions in several states with labels, oldest first:
    a (ready, team=red tier=gold), b (creating, team=blue), c (archived, team=red),
    d (failed, no team), e (ready, team=red), f (deleted, team=red)."""
    made = {}
    for name, labels in [
        ("a", {"team": "red", "tier": "gold"}),
        ("b", {"team": "blue"}),
        ("c", {"team": "red"}),
        ("d", {}),
        ("e", {"team": "red", "note": "a, b = c"}),
        ("f", {"team": "red"}),
    ]:
        made[name] = await create(api, name, {"name": name, **labels})
    for name in ("a", "c", "e", "f"):
        await plane.runtime_started(made[name].session_id)
    failed = runner_pb2.RuntimeStartFailed(reason="no image")
    await plane.report(made["d"].session_id, runtime_start_failed=failed)
    await ok(api, "ArchiveSession", session_id=made["c"].session_id)
    await ok(api, "DeleteSession", session_id=made["f"].session_id)
    return made


async def test_each_filter_and_their_combination(api, fleet) -> None:
    assert await listed(api) == ["e", "d", "c", "b", "a"]  # newest first, never the deleted one
    assert await listed(api, states=[READY]) == ["e", "a"]
    assert await listed(api, states=[ARCHIVED, FAILED, CREATING]) == ["d", "c", "b"]
    assert await listed(api, label_selector="team=red") == ["e", "c", "a"]
    assert await listed(api, label_selector="team!=red") == ["d", "b"]  # d has no team at all
    assert await listed(api, label_selector="tier") == ["a"]
    assert await listed(api, label_selector="!team") == ["d"]
    assert await listed(api, label_selector=" team=red , !tier") == ["e", "c"]
    assert await listed(api, label_selector="note=a") == []  # a whole value, not a prefix
    assert await listed(api, label_selector="name=a,name=b") == []  # all must hold
    since_b = fleet["b"].create_time
    assert await listed(api, created_after=since_b) == ["e", "d", "c", "b"]  # inclusive
    assert await listed(api, created_before=fleet["d"].create_time) == ["c", "b", "a"]  # exclusive
    assert await listed(api, created_after=since_b, created_before=fleet["e"].create_time) == ["d", "c", "b"]
    assert await listed(
        api, states=[READY, ARCHIVED], label_selector="team=red,!tier", created_after=fleet["b"].create_time
    ) == ["e", "c"]


@pytest.mark.parametrize(
    ("selector", "says"),
    [
        ("team=red,", "requirement 2 ('')"),
        ("team = red", "requirement 1 ('team = red')"),
        ("!team=red", "requirement 1"),
        ("te am", "[A-Za-z0-9._:/-]"),
        ("=red", "1-128 characters"),
        ("team=re\x07d", "control characters"),
        ("k" * 129, "at most 128 bytes"),
        ("team=" + "v" * 257, "at most 256 bytes"),
        (",".join(["a"] * 65), "at most 64 requirements"),
    ],
)
async def test_a_bad_selector_is_refused_saying_what_is_wrong(api, selector, says) -> None:
    code, reason, details = await refused(api, "ListSessions", label_selector=selector)
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "LABEL_SELECTOR_INVALID")
    assert says in details and len(details) < 400
    assert "requirements" in says or "write key=value, key!=value, key or !key" in details


async def test_bad_states_times_and_agents_are_refused(api, fleet) -> None:
    for states in ([session_pb2.SESSION_STATE_UNSPECIFIED], [READY, 99], [session_pb2.SESSION_STATE_DELETED]):
        code, reason, details = await refused(api, "ListSessions", states=states)
        assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT"), details
    code, _, details = await refused(
        api, "ListSessions", created_after=fleet["e"].create_time, created_before=fleet["a"].create_time
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "created_before" in details
    code, reason, details = await refused(api, "ListSessions", agent="reviewer")
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "AGENT_NOT_FOUND")
    assert "reviewer" in details
    code, reason, _ = await refused(api, "ListSessions", label_selector="x" * 4097)
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "FIELD_TOO_LONG")


async def test_pages_go_on_where_they_ended_whatever_is_created_between_them(api, plane) -> None:
    for i in range(5):
        await create(api, f"old-{i}", {"name": f"old-{i}", "batch": "one"})
    first = await ok(api, "ListSessions", page_size=2, label_selector="batch=one")
    seen = [s.labels["name"] for s in first.sessions]
    token = first.next_page_token
    for i in range(3):  # newer than every page: in none of the rest
        await create(api, f"new-{i}", {"name": f"new-{i}", "batch": "one"})
    while token:
        page = await ok(api, "ListSessions", page_size=2, page_token=token, label_selector="batch=one")
        seen += [s.labels["name"] for s in page.sessions]
        token = page.next_page_token
        if token:  # and one more between every two pages
            await create(api, f"late-{token[:6]}", {"name": "late", "batch": "one"})
    assert seen == ["old-4", "old-3", "old-2", "old-1", "old-0"]


async def test_a_page_token_serves_only_its_own_filters(api, fleet) -> None:
    first = await ok(api, "ListSessions", page_size=1, label_selector="team=red", states=[READY])
    token = first.next_page_token
    same = await ok(
        api, "ListSessions", page_size=1, page_token=token, label_selector=" team=red", states=[READY, READY]
    )
    assert [s.labels["name"] for s in same.sessions] == ["a"]  # the same filters, spelled otherwise
    for other in (
        {"label_selector": "team=blue", "states": [READY]},
        {"states": [READY]},
        {"label_selector": "team=red"},
        {"label_selector": "team=red", "states": [READY], "created_after": timestamp_pb2.Timestamp(seconds=1)},
    ):
        code, reason, details = await refused(api, "ListSessions", page_size=1, page_token=token, **other)
        assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "PAGE_TOKEN_FILTERS_CHANGED"), other
        assert "first page" in details


async def test_another_projects_sessions_never_appear(api, plane, fleet) -> None:
    other_project = await identity_store.insert_project(plane.pool, "other")
    other = harness(plane, Caller(other_project.project_id, "other", Role.ADMIN, "otherkey0000000a"))
    await create(other, "theirs", {"name": "theirs", "team": "red"})
    assert await listed(other) == ["theirs"]
    assert await listed(api, label_selector="team=red") == ["e", "c", "a"]
    assert await listed(api, label_selector="name=theirs") == []
    # Nor does a page token of one project's listing go on in another's.
    token = (await ok(api, "ListSessions", page_size=1)).next_page_token
    code, reason, _ = await refused(other, "ListSessions", page_size=1, page_token=token)
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "PAGE_TOKEN_INVALID")
