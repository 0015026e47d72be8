"""The control plane's /metrics: RPCs by method and final code, sessions by state, turns started and
settled (once committed), over real HTTP from a real control plane on a real database."""

from __future__ import annotations

import asyncio
import secrets
import urllib.request
from collections.abc import AsyncIterator
from datetime import timedelta

import grpc
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from controlplane import store
from controlplane.conversation import Conversation, SendMessage
from controlplane.kernel import CreateSession
from controlplane.metrics import ControlPlaneMetrics
from controlplane.server import RunningControlPlane, serve
from controlplane.session import SessionState
from controlplane.settings import ControlPlaneSettings
from controlplane.turns import TurnOutcome, Turns
from serverkit.metrics_http import MetricsListenError
from serverkit.metrics_http import serve as serve_metrics

KERNEL = "astrabox.sessionkernel.v1.SessionKernelService"


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition, by name and labels."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float:
    return samples(text).get((name, frozenset(labels.items())), 0.0)


def sessions_by_state(text: str) -> dict[str, float]:
    return {dict(labels)["state"]: v for (name, labels), v in samples(text).items() if name == "astrabox_sessions"}


async def scrape(address: str) -> str:
    """GET /metrics from another thread: the scrape's collectors hop onto this test's loop."""

    def get() -> str:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
            body: bytes = response.read()
        return body.decode()

    return await asyncio.to_thread(get)


@pytest_asyncio.fixture
async def running(plane, database_url: str, bootstrap_key_file: str) -> AsyncIterator[RunningControlPlane]:
    """A control plane serving /metrics, on the `plane`'s database with an agent on record (not attached)."""
    await plane.connect_agent(capacity=100)
    settings = ControlPlaneSettings(
        database_url=database_url,
        listen="127.0.0.1:0",
        metrics_listen="127.0.0.1:0",
        bootstrap_key_file=bootstrap_key_file,
        lease_ttl=timedelta(minutes=10),
    )
    async with serve(settings) as control_plane:
        yield control_plane


async def test_rpcs_are_counted_by_method_and_final_code_and_sessions_by_state(plane, running) -> None:
    assert running.metrics_address
    before = await scrape(running.metrics_address)
    async with AstraBoxClient.connect(running.address) as client:
        with pytest.raises(AstraBoxError) as missing:
            await client.get_session("00000000-0000-4000-8000-000000000000")
        assert missing.value.code is grpc.StatusCode.NOT_FOUND
        session = await client.create_session()
        await client.get_session(session.session_id)
    async with plane.pool.acquire() as conn:  # as an engine's report of a background task records it
        await store.background_tasks.insert(conn, session.session_id, "task-1", "a build", 1)
    after = await scrape(running.metrics_address)

    get = {"service": KERNEL, "method": "GetSession"}
    assert value(before, "astrabox_rpc_requests_total", **get, code="NOT_FOUND") == 0
    assert value(after, "astrabox_rpc_requests_total", **get, code="NOT_FOUND") == 1
    assert value(after, "astrabox_rpc_requests_total", **get, code="OK") == 1
    assert value(after, "astrabox_rpc_requests_total", service=KERNEL, method="CreateSession", code="OK") == 1
    assert value(after, "astrabox_rpc_duration_seconds_count", **get) == 2
    # Every state is there, and the new session is counted (its agent is not attached: CREATING) once
    # the count cached by the first scrape (none) has expired.
    assert sessions_by_state(before) == {state.value: 0 for state in SessionState}
    async with asyncio.timeout(30):
        while sessions_by_state(after)["creating"] != 1 or value(after, "astrabox_background_tasks_open") != 1:
            await asyncio.sleep(0.5)
            after = await scrape(running.metrics_address)
    assert sum(sessions_by_state(after).values()) == 1
    assert value(before, "astrabox_background_tasks_open") == 0
    # No label anywhere carries the session's id.
    assert all(session.session_id not in v for (_, labels) in samples(after) for _, v in labels)


async def test_an_unauthenticated_call_is_counted_with_its_code(running) -> None:
    async with AstraBoxClient.connect(running.address, api_key="not-a-key") as client:
        with pytest.raises(AstraBoxError) as refused:
            await client.list_sessions()
    text = await scrape(running.metrics_address)
    assert (
        value(text, "astrabox_rpc_requests_total", service=KERNEL, method="ListSessions", code=refused.value.code.name)
        == 1
    )
    assert refused.value.code is grpc.StatusCode.UNAUTHENTICATED


async def test_turns_are_counted_when_dispatched_and_when_their_settlement_commits(plane) -> None:
    metrics = ControlPlaneMetrics()
    turns = Turns(plane.agents, metrics)
    conversation = Conversation(plane.journal, plane.agents, turns, timedelta(seconds=10))
    await plane.connect_agent()
    session = await plane.kernel.create_session(
        CreateSession(request_id=secrets.token_hex(4), project_id=plane.project_id)
    )
    await plane.runtime_started(session.session_id)
    accepted = await conversation.send_message(SendMessage(session.session_id, "m1", "hi"))
    assert metrics.registry.get_sample_value("astrabox_turns_started_total") == 1

    class RolledBack(Exception):
        pass

    with pytest.raises(RolledBack):  # a settlement that does not commit is not counted
        async with plane.journal.transaction() as tx:
            assert await turns.settle(tx, session.session_id, accepted.turn_id, TurnOutcome.COMPLETED)
            raise RolledBack
    assert metrics.registry.get_sample_value("astrabox_turns_ended_total", {"outcome": "completed"}) is None

    async with plane.journal.transaction() as tx:
        assert await turns.settle(tx, session.session_id, accepted.turn_id, TurnOutcome.COMPLETED)
    assert metrics.registry.get_sample_value("astrabox_turns_ended_total", {"outcome": "completed"}) == 1
    assert metrics.registry.get_sample_value("astrabox_turn_duration_seconds_count", {"outcome": "completed"}) == 1


def test_a_metrics_address_that_is_not_host_port_is_refused_with_what_to_give() -> None:
    with pytest.raises(MetricsListenError, match="HOST:PORT"):
        serve_metrics("9464", ControlPlaneMetrics().registry)


async def test_a_stream_is_counted_when_it_ends_with_its_final_code(running) -> None:
    async with AstraBoxClient.connect(running.address) as client:
        session = await client.create_session()
        async for _event in client.watch(session.session_id):
            break  # the client goes away: the stream ends CANCELLED
    watch = {"service": KERNEL, "method": "WatchSessionEvents"}
    async with asyncio.timeout(30):
        while (
            value(
                text := await scrape(running.metrics_address), "astrabox_rpc_requests_total", **watch, code="CANCELLED"
            )
            != 1
        ):
            await asyncio.sleep(0.2)
    assert value(text, "astrabox_rpc_duration_seconds_count", **watch) == 1


async def test_a_stalled_start_and_a_leaked_sandbox_show_for_the_alerts_and_the_database_is_up(plane, running) -> None:
    """What deploy/prometheus/alerts.yml watches: how long a session has sat in a live state without a
    change (a stuck start), released sessions' sandboxes never destroyed, and the database's health."""
    assert running.metrics_address
    async with AstraBoxClient.connect(running.address) as client:
        stuck = await client.create_session()  # its agent is not attached: it stays CREATING
        released = await client.create_session()
    # As if the start had hung for an hour, and the other session's sandbox had been given up on.
    await plane.pool.execute(
        "UPDATE sessions SET updated_at = now() - interval '1 hour' WHERE session_id = $1", stuck.session_id
    )
    await plane.pool.execute(
        "UPDATE sessions SET state = 'archived', sandbox_id = 'sandbox-1', destroy_abandoned_at = now()"
        " WHERE session_id = $1",
        released.session_id,
    )
    async with asyncio.timeout(30):  # the first scrape's cached counts expire
        while value(text := await scrape(running.metrics_address), "astrabox_sessions", state="archived") != 1:
            await asyncio.sleep(0.5)
    assert value(text, "astrabox_sessions_stalled_seconds", state="creating") >= 3600
    assert value(text, "astrabox_sessions_stalled_seconds", state="running") == 0
    stalled_states = {dict(ls)["state"] for (n, ls) in samples(text) if n == "astrabox_sessions_stalled_seconds"}
    assert "archived" not in stalled_states and "creating" in stalled_states  # settled states never stall
    assert value(text, "astrabox_released_sandboxes", destruction="abandoned") == 1
    assert value(text, "astrabox_released_sandboxes", destruction="pending") == 0
    assert value(text, "astrabox_database_up") == 1
