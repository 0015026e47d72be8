"""One trace shows a turn end to end: the client's span -> the control plane's SendMessage span ->
the turn's dispatch -> the agent's DeliverInput command -> its turn -> the control plane's relay
commits of that turn's outputs. A real stack (separate processes, the real CLI, the offline model)
exports over OTLP to a collector held in memory here; the client's own spans go to an in-memory
exporter. The trace's id is in the processes' log lines."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import grpc
import pytest
import pytest_asyncio
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from astrabox.client import AstraBoxClient
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

KERNEL = "astrabox.sessionkernel.v1.SessionKernelService"


@dataclass(frozen=True)
class Received:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    links: tuple[str, ...]


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP trace collector that keeps what it is sent."""

    def __init__(self) -> None:
        self.spans: list[Received] = []

    async def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: grpc.aio.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        for resource_spans in request.resource_spans:
            attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for s in scope.spans:
                    self.spans.append(
                        Received(
                            attributes.get("service.name", ""),
                            s.name,
                            s.trace_id.hex(),
                            s.span_id.hex(),
                            s.parent_span_id.hex(),
                            tuple(link.span_id.hex() for link in s.links),
                        )
                    )
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest_asyncio.fixture
async def collector() -> AsyncIterator[tuple[Collector, str]]:
    server = grpc.aio.server()
    kept = Collector()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(kept, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield kept, f"http://127.0.0.1:{port}"
    finally:
        await server.stop(None)


async def until(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not check():
                await asyncio.sleep(0.2)
    except TimeoutError:
        raise AssertionError(f"never seen: {what}") from None


async def test_one_trace_spans_client_controlplane_agent_and_relay_commit(
    stacks: Callable[..., Stack], collector: tuple[Collector, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    kept, endpoint = collector
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")  # the processes export every 200 ms, not 5 s
    stack = stacks(args=("--otlp-endpoint", endpoint), controlplane_args=("--otlp-endpoint", endpoint))
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    async with AstraBoxClient.connect(stack.address) as client:
        session = await client.create_session()
        await client.wait_for_state(session.session_id, ["READY"], timeout=120)
        with provider.get_tracer("test").start_as_current_span("the user's turn") as mine:
            accepted = await client.send_message(session.session_id, "run: echo traced")
        async with asyncio.timeout(180):
            async for event in client.watch(session.session_id):
                if event.turn_id == accepted.turn_id and event.WhichOneof("payload") in (
                    "turn_completed",
                    "turn_failed",
                ):
                    assert event.WhichOneof("payload") == "turn_completed"
                    break

    [client_span] = exporter.get_finished_spans()
    trace_id = format(mine.get_span_context().trace_id, "032x")
    in_trace = lambda: [s for s in kept.spans if s.trace_id == trace_id]  # noqa: E731
    by_name = lambda name: [s for s in in_trace() if s.name == name]  # noqa: E731
    await until(lambda: bool(by_name("turn")) and bool(by_name("relay commit")), "the agent's turn and a relay commit")

    [send] = by_name(f"{KERNEL}/SendMessage")
    assert (send.service, send.parent_id) == ("astrabox-controlplane", format(client_span.context.span_id, "016x"))
    [dispatch] = by_name("turn dispatch")
    assert dispatch.parent_id == send.span_id
    [delivered] = by_name("agent deliver_input")
    assert (delivered.service, delivered.parent_id) == ("astrabox-agent", dispatch.span_id)
    [turn] = by_name("turn")
    assert (turn.service, turn.parent_id) == ("astrabox-agent", delivered.span_id)
    commits = by_name("relay commit")
    assert all(c.service == "astrabox-controlplane" and c.parent_id == turn.span_id for c in commits), commits
    assert all(turn.span_id in c.links for c in commits)

    # The session's startup is its own trace: the StartRuntime command and its phases on the agent.
    [start] = [s for s in kept.spans if s.name == "agent start_runtime"]
    phases = {s.name for s in kept.spans if s.parent_id == start.span_id}
    assert {"startup sandbox_created", "startup engine_connected", "startup ready"} <= phases, phases

    # Lines logged inside the trace's spans carry its id: the agent's command applied, for one.
    lines = [
        json.loads(line) for line in (stack.log_dir / "agent.log").read_text().splitlines() if line.startswith("{")
    ]
    assert any(line.get("trace_id") == trace_id and line.get("event") == "command_applied" for line in lines)
