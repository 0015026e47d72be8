"""serverkit.tracing: one TracerProvider per process, trace ids in log lines, traceparents carried
and joined, and a span per RPC in the caller's trace (a real gRPC server, the client SDK's
interceptor on the calling side)."""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
import pytest_asyncio
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from astrabox.trace_context import trace_interceptors
from serverkit import logs, tracing

HEALTH_CHECK = "grpc.health.v1.Health/Check"


@pytest.fixture
def exported() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = tracing.configure("astrabox-test", exporter=exporter)
    yield provider, exporter
    exporter.shutdown()


def finished(provider: TracerProvider, exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    provider.force_flush()
    return [s for s in exporter.get_finished_spans() if s.name == name]


def hex_trace(span: Any) -> str:
    return format(span.get_span_context().trace_id, "032x")


def test_the_process_has_one_provider_and_it_is_the_global_one(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    assert tracing.configure("another-name") is provider
    with tracing.tracer().start_as_current_span("work"):
        pass
    [span] = finished(provider, exporter, "work")
    assert span.resource.attributes["service.name"] == provider.resource.attributes["service.name"]


def test_a_log_line_inside_a_span_carries_its_trace_and_span_ids(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    saved = structlog.get_config()
    out = io.StringIO()
    try:
        logs.configure("json", stream=out)
        log = structlog.get_logger("test")
        log.info("outside")
        with tracing.tracer().start_as_current_span("inside") as span:
            log.info("within")
    finally:
        structlog.configure(**saved)
    outside, within = (json.loads(line) for line in out.getvalue().splitlines())
    assert "trace_id" not in outside
    assert within["trace_id"] == hex_trace(span)
    assert within["span_id"] == format(span.get_span_context().span_id, "016x")


def test_a_traceparent_names_its_span_and_anything_else_names_none(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    assert tracing.traceparent() == ""
    with tracing.tracer().start_as_current_span("issuer") as issuer:
        text = tracing.traceparent()
    assert text.startswith(f"00-{hex_trace(issuer)}-{issuer.get_span_context().span_id:016x}-")
    with tracing.tracer().start_as_current_span("child", context=tracing.context_of(text)) as child:
        pass
    assert hex_trace(child) == hex_trace(issuer)
    for junk in ("", "00-not-a-trace", "x" * 60):
        assert tracing.context_of(junk) is None
    assert len(tracing.links([text, text, "junk", ""])) == 1
    # Parsed traceparents are kept for the next batch: never one too long to be one (an agent's).
    padded = text + "-" + "0" * 10_000
    kept = tracing._span_context_of.cache_info().currsize
    assert tracing.links([padded]) == [] and tracing._span_context_of.cache_info().currsize == kept


def test_joining_is_the_child_of_the_first_trace_linked_to_each_and_never_of_the_current_span(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    with tracing.tracer().start_as_current_span("turn a") as a:
        first = tracing.traceparent()
    with tracing.tracer().start_as_current_span("turn b") as b:
        second = tracing.traceparent()
    with tracing.tracer().start_as_current_span("a whole stream") as stream:
        with tracing.joining("commit", [first, second, first], {"astrabox.outputs": 3}):
            pass
        with tracing.joining("untraced commit", ["", ""], {}):
            pass
    [commit] = finished(provider, exporter, "commit")
    assert commit.parent is not None and commit.parent.span_id == a.get_span_context().span_id
    assert [link.context.span_id for link in commit.links] == [
        a.get_span_context().span_id,
        b.get_span_context().span_id,
    ]
    [untraced] = finished(provider, exporter, "untraced commit")
    assert untraced.parent is None
    assert format(untraced.context.trace_id, "032x") != hex_trace(stream)


def test_a_finished_span_keeps_the_times_it_was_measured_with(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    began = time.monotonic() - 2.0
    with tracing.tracer().start_as_current_span("startup") as startup:
        tracing.finished_span("startup sandbox_created", began, 0.5, {"astrabox.driver": "local"})
    [phase] = finished(provider, exporter, "startup sandbox_created")
    assert phase.parent is not None and phase.parent.span_id == startup.get_span_context().span_id
    assert phase.end_time is not None and phase.start_time is not None
    assert phase.end_time - phase.start_time == 500_000_000
    assert time.time_ns() - phase.start_time >= 2_000_000_000


@pytest_asyncio.fixture
async def health_server() -> AsyncIterator[tuple[str, health.aio.HealthServicer]]:
    server = grpc.aio.server(interceptors=[tracing.RpcTracing()])
    servicer = health.aio.HealthServicer()
    await servicer.set("serving", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}", servicer
    finally:
        await server.stop(None)


async def test_each_rpc_is_a_server_span_in_the_callers_trace_with_its_status(
    exported: tuple[TracerProvider, InMemorySpanExporter], health_server: tuple[str, Any]
) -> None:
    provider, exporter = exported
    address, _ = health_server
    async with grpc.aio.insecure_channel(address, interceptors=trace_interceptors()) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        with tracing.tracer().start_as_current_span("caller") as caller:
            await stub.Check(health_pb2.HealthCheckRequest(service="serving"))
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Check(health_pb2.HealthCheckRequest(service="nothing-such"))
        # Without a current span the call is a trace of its own.
        await stub.Check(health_pb2.HealthCheckRequest(service="serving"))
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND

    spans = finished(provider, exporter, HEALTH_CHECK)
    ours, alone = spans[:2], spans[2]
    for span in ours:
        assert span.kind == trace.SpanKind.SERVER
        assert span.parent is not None and span.parent.span_id == caller.get_span_context().span_id
        assert format(span.context.trace_id, "032x") == hex_trace(caller)
    assert [s.status.status_code for s in ours] == [trace.StatusCode.UNSET, trace.StatusCode.ERROR]
    assert ours[1].attributes is not None and ours[1].attributes["rpc.grpc.status_code"] == 5
    assert alone.parent is None and format(alone.context.trace_id, "032x") != hex_trace(caller)


async def test_a_streaming_rpc_is_one_span_in_the_callers_trace(
    exported: tuple[TracerProvider, InMemorySpanExporter], health_server: tuple[str, Any]
) -> None:
    provider, exporter = exported
    address, _ = health_server
    async with grpc.aio.insecure_channel(address, interceptors=trace_interceptors()) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        with tracing.tracer().start_as_current_span("watcher") as watcher:
            watch = stub.Watch(health_pb2.HealthCheckRequest(service="serving"))
            assert (await anext(aiter(watch))).status == health_pb2.HealthCheckResponse.SERVING
            watch.cancel()
    provider.force_flush()

    async def ended() -> list[ReadableSpan]:
        return finished(provider, exporter, "grpc.health.v1.Health/Watch")

    async with asyncio.timeout(10):  # the server sees the cancellation after the client does
        while not (spans := await ended()):
            await asyncio.sleep(0.05)
    [span] = spans
    assert span.parent is not None and span.parent.span_id == watcher.get_span_context().span_id
