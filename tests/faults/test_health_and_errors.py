"""What an operator's probes and a caller see of a control plane whose PostgreSQL goes away.

The gRPC health (every service, and the overall "") is NOT_SERVING while PostgreSQL is stopped and
SERVING again once it is back, each change logged once; calls meanwhile answer UNAVAILABLE with
DATABASE_UNAVAILABLE and nothing of where the database is. A failure nobody foresaw answers INTERNAL
with only the reference under which the log holds its stack.

The control plane runs in this process (`serve`) on a PostgreSQL of the test's own
(`RestartablePostgres`), so the shared test database is untouched. (A watcher across restarts, and
the client's retries within their deadline: tests/faults/test_database_restarts.py.)
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import grpc
import pytest
import pytest_asyncio
import structlog
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as pb
from astrabox.sessionkernel.v1 import session_kernel_service_pb2_grpc as pb_grpc
from controlplane.server import SERVICE_NAMES, RunningControlPlane, serve
from controlplane.settings import ControlPlaneSettings
from controlplane.status import error_info
from tests.support.restartable_postgres import RestartablePostgres

UNKNOWN_SESSION = "8c3e2a38-7f8b-4f7e-9d7b-9a0b6e0f0e0e"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest_asyncio.fixture
async def postgres() -> AsyncIterator[RestartablePostgres]:
    cluster = RestartablePostgres()
    try:
        await cluster.start()
        yield cluster
    finally:
        await cluster.close()


@pytest_asyncio.fixture
async def control_plane(postgres: RestartablePostgres, bootstrap_key_file: str) -> AsyncIterator[RunningControlPlane]:
    settings = ControlPlaneSettings(
        database_url=postgres.dsn,
        listen="127.0.0.1:0",
        bootstrap_key_file=bootstrap_key_file,
        credentials_ttl=timedelta(hours=1),  # a verified key lets calls reach their handlers
        health_probe_interval=timedelta(milliseconds=200),
        health_probe_timeout=timedelta(seconds=1),
    )
    async with serve(settings) as running:
        yield running


async def statuses(channel: grpc.aio.Channel) -> dict[str, int]:
    stub = health_pb2_grpc.HealthStub(channel)
    return {
        name: (await stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)).status
        for name in ("", *SERVICE_NAMES)
    }


async def until_every_service_is(channel: grpc.aio.Channel, status: int) -> None:
    async with asyncio.timeout(30):
        while set((await statuses(channel)).values()) != {status}:
            await asyncio.sleep(0.1)


async def test_health_is_not_serving_while_postgresql_is_down_and_calls_say_why_without_its_address(
    postgres: RestartablePostgres, control_plane: RunningControlPlane, api_key: str
) -> None:
    bearer = (("authorization", f"Bearer {api_key}"),)
    async with grpc.aio.insecure_channel(control_plane.address) as channel:
        kernel = pb_grpc.SessionKernelServiceStub(channel)
        assert set((await statuses(channel)).values()) == {SERVING}
        with pytest.raises(grpc.aio.AioRpcError) as before:  # the key verified, and cached, while it can be
            await kernel.GetSession(pb.GetSessionRequest(session_id=UNKNOWN_SESSION), metadata=bearer)
        assert before.value.code() == grpc.StatusCode.NOT_FOUND

        with capture_logs() as logs:
            await postgres.stop("immediate")
            try:
                await until_every_service_is(channel, NOT_SERVING)
                refusals: list[grpc.aio.AioRpcError] = []
                for call in (
                    lambda: kernel.GetSession(pb.GetSessionRequest(session_id=UNKNOWN_SESSION), metadata=bearer),
                    lambda: kernel.ListSessions(pb.ListSessionsRequest(), metadata=bearer),
                ):
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        await call()
                    refusals.append(refused.value)
                await asyncio.sleep(1)  # probes go on failing: still one line for the change
            finally:
                await postgres.start()
            await until_every_service_is(channel, SERVING)

    where = (str(postgres.port), "127.0.0.1", str(postgres.data_dir), ".s.PGSQL", "SELECT", "Traceback")
    for error in refusals:
        info = error_info(error)
        assert info is not None and (error.code(), info.reason) == (grpc.StatusCode.UNAVAILABLE, "DATABASE_UNAVAILABLE")
        told = " ".join(
            [str(error.details()), *info.metadata.values(), *(str(v) for _, v in error.trailing_metadata() or ())]
        )
        assert [part for part in where if part in told] == []
    changes = [entry for entry in logs if entry["event"] in ("database_unreachable", "database_reachable")]
    assert [entry["event"] for entry in changes] == ["database_unreachable", "database_reachable"]
    assert [part for part in where[:4] if part in repr(changes)] == []


async def test_the_database_up_metric_follows_postgresql_down_and_back(
    postgres: RestartablePostgres, bootstrap_key_file: str
) -> None:
    """`astrabox_database_up`, which the DatabaseDown alert watches, is the health monitor's answer."""
    settings = ControlPlaneSettings(
        database_url=postgres.dsn,
        listen="127.0.0.1:0",
        metrics_listen="127.0.0.1:0",
        bootstrap_key_file=bootstrap_key_file,
        health_probe_interval=timedelta(milliseconds=200),
        health_probe_timeout=timedelta(seconds=1),
    )

    def up(address: str) -> float | None:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
            text = response.read().decode()
        found = [
            s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == "astrabox_database_up"
        ]
        return found[0] if found else None

    async def until_up_is(address: str, wanted: float) -> None:
        async with asyncio.timeout(30):
            while await asyncio.to_thread(up, address) != wanted:
                await asyncio.sleep(0.1)

    async with serve(settings) as running:
        assert running.metrics_address
        assert await asyncio.to_thread(up, running.metrics_address) == 1
        await postgres.stop("immediate")
        try:
            await until_up_is(running.metrics_address, 0)
        finally:
            await postgres.start()
        await until_up_is(running.metrics_address, 1)


async def test_an_unforeseen_failure_answers_internal_with_only_the_reference_its_logged_stack_is_under(
    control_plane: RunningControlPlane, api_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "relation sessions at 10.0.0.7: password=hunter2"

    async def list_sessions_that_breaks(*args: Any) -> Any:
        raise RuntimeError(secret)

    monkeypatch.setattr(control_plane.kernel, "list_sessions", list_sessions_that_breaks)
    bearer = (("authorization", f"Bearer {api_key}"),)
    async with grpc.aio.insecure_channel(control_plane.address) as channel:
        kernel = pb_grpc.SessionKernelServiceStub(channel)
        with capture_logs() as logs, pytest.raises(grpc.aio.AioRpcError) as failed:
            await kernel.ListSessions(pb.ListSessionsRequest(), metadata=bearer)

    error = failed.value
    info = error_info(error)
    assert info is not None and (error.code(), info.reason) == (grpc.StatusCode.INTERNAL, "INTERNAL")
    ref = info.metadata["ref"]
    assert error.details() == f"internal error (ref {ref})" and dict(info.metadata) == {"ref": ref}
    assert "hunter2" not in str(error.trailing_metadata())
    [logged] = [entry for entry in logs if entry["event"] == "rpc_failed"]
    assert logged["ref"] == ref
    rendered = structlog.processors.format_exc_info(None, "error", dict(logged))["exception"]  # as written
    assert "Traceback" in rendered and "list_sessions_that_breaks" in rendered and secret in rendered
