"""OpenTelemetry traces of one server process: its TracerProvider, the OTLP exporter when one is
configured, the trace id in every log line written inside a span, and the W3C `traceparent` text
that carries a trace across the Runner stream (commands to agents, outputs back).

`configure` installs one SDK TracerProvider per process (the all-in-one stack runs the control
plane and an agent in one process: the first call installs it, later ones return it). Spans are
recorded so their ids reach the logs and the agent, but nothing leaves the process unless an OTLP
endpoint is given (`--otlp-endpoint`, or the standard OTEL_EXPORTER_OTLP_ENDPOINT): off by
default, no exporter and no background thread. OpenTelemetry's standard OTEL_SDK_DISABLED=true
leaves its no-op API in place instead: no span is recorded and no trace id is logged. The exporter is an optional extra
(`pip install astrabox-server[otlp]`); asking for it without it installed is a `TracingError`.

`RpcTracing` is the gRPC server interceptor that opens one span per RPC, a child of the caller's
`traceparent` metadata when it sent one (the client SDK does).
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, MutableMapping
from contextlib import AbstractContextManager
from typing import Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = [
    "OTLP_ENDPOINT_ENV",
    "RpcTracing",
    "TracingError",
    "add_trace_ids",
    "configure",
    "context_of",
    "finished_span",
    "joining",
    "links",
    "traceparent",
    "tracer",
]

OTLP_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
SDK_DISABLED_ENV = "OTEL_SDK_DISABLED"
TRACER_NAME = "astrabox"
_W3C = TraceContextTextMapPropagator()
_lock = threading.Lock()
_provider: TracerProvider | None = None


class TracingError(RuntimeError):
    """Tracing cannot be set up as configured; the message says what to change."""


def configure(service_name: str, otlp_endpoint: str = "", exporter: SpanExporter | None = None) -> TracerProvider:
    """The process's TracerProvider, installed as OpenTelemetry's global one on the first call
    (named `service_name`), exporting to `otlp_endpoint` over OTLP/gRPC when it is not empty, and
    to `exporter` when one is given (tests, benchmarks). Later calls add their exporters to it."""
    global _provider
    with _lock:
        if _provider is None:
            _provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
            if os.environ.get(SDK_DISABLED_ENV, "").strip().lower() != "true":
                trace.set_tracer_provider(_provider)
        provider = _provider
    if otlp_endpoint:
        provider.add_span_processor(BatchSpanProcessor(_otlp_exporter(otlp_endpoint)))
    if exporter is not None:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _otlp_exporter(endpoint: str) -> SpanExporter:
    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise TracingError(
            f"an OTLP endpoint ({endpoint}) needs the OTLP exporter: pip install 'astrabox-server[otlp]' "
            "(opentelemetry-exporter-otlp-proto-grpc), or leave --otlp-endpoint empty"
        ) from None
    # Plaintext to a collector on loopback or the host's network; TLS endpoints say https://.
    return OTLPSpanExporter(endpoint=endpoint, insecure=not endpoint.startswith("https://"))


# Got once, as OpenTelemetry suggests: until `configure` installs the provider it is a proxy, which
# then hands spans to the provider's tracer (a provider makes a new tracer on each get_tracer).
_TRACER = trace.get_tracer(TRACER_NAME)


def tracer() -> trace.Tracer:
    """The tracer every AstraBox span comes from (a no-op one until `configure`)."""
    return _TRACER


def add_trace_ids(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: the current span's trace_id and span_id (hex, as OTLP backends show
    them) in the line, when it is written inside a span."""
    span_context = trace.get_current_span().get_span_context()
    if span_context.is_valid:
        event.setdefault("trace_id", format(span_context.trace_id, "032x"))
        event.setdefault("span_id", format(span_context.span_id, "016x"))
    return event


def traceparent(span: Span | None = None) -> str:
    """The W3C traceparent of `span` (default the current one); "" outside any span."""
    carrier: dict[str, str] = {}
    ctx = trace.set_span_in_context(span) if span is not None else None
    _W3C.inject(carrier, context=ctx)
    return carrier.get("traceparent", "")


def context_of(text: str) -> otel_context.Context | None:
    """The context whose parent is the span `text` (a traceparent) names; None when it names none,
    so a span started with it is a child of whatever is current instead."""
    if not text:
        return None
    ctx = _W3C.extract({"traceparent": text})
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


# The longest traceparent kept parsed: W3C's version 00 is 55 characters (later versions may add
# fields); a longer text an agent sends names no span and is not kept.
MAX_TRACEPARENT_CHARS = 256


@functools.lru_cache(maxsize=1024)
def _span_context_of(text: str) -> SpanContext | None:
    """The span `text` (a traceparent) names, None for none: parsed once for the many batches of a
    turn's outputs that carry it (bounded in number and size, and immutable, so shared safely)."""
    ctx = context_of(text)
    return trace.get_current_span(ctx).get_span_context() if ctx is not None else None


def links(texts: Iterable[str]) -> list[Link]:
    """A link to each distinct valid span among `texts` (traceparents), in their order."""
    seen: dict[str, Link] = {}
    for text in texts:
        if not text or len(text) > MAX_TRACEPARENT_CHARS or text in seen:
            continue
        if (span_context := _span_context_of(text)) is not None:
            seen[text] = Link(span_context)
    return list(seen.values())


def joining(name: str, texts: Iterable[str], attributes: dict[str, Any]) -> AbstractContextManager[Span]:
    """A span (current while the `with` lasts) that joins the traces `texts` (traceparents) name:
    the child of the first, linked to each; a new trace when they name none, never the child of
    what is current (an agent's whole stream, on the control plane)."""
    spans = links(texts)
    parent = trace.set_span_in_context(NonRecordingSpan(spans[0].context)) if spans else otel_context.Context()
    return tracer().start_as_current_span(name, context=parent, links=spans, attributes=attributes)


def finished_span(name: str, began_monotonic: float, seconds: float, attributes: dict[str, Any]) -> None:
    """A span, a child of the current one, for a step already timed with time.monotonic()
    (`began_monotonic`, lasting `seconds`): the startup phases are measured before they are traced."""
    offset_ns = time.time_ns() - time.monotonic_ns()
    start = int(began_monotonic * 1e9) + offset_ns
    span = tracer().start_span(name, start_time=start, attributes=attributes)
    span.end(end_time=start + int(seconds * 1e9))


class RpcTracing(grpc.aio.ServerInterceptor):  # type: ignore[misc, unused-ignore]
    """One SERVER span per RPC the server has a handler for (streams: their whole life), named
    `service/method`, a child of the caller's `traceparent` metadata; its status is the RPC's."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        name = handler_call_details.method.lstrip("/")
        metadata = handler_call_details.invocation_metadata or ()
        parent = next((str(v) for k, v in metadata if k == "traceparent"), "")
        for kind in ("unary_unary", "unary_stream", "stream_unary", "stream_stream"):
            behavior = getattr(handler, kind)
            if behavior is not None:
                wrap = _generator if inspect.isasyncgenfunction(behavior) else _call
                return handler._replace(**{kind: wrap(behavior, name, parent)})
        return handler


def _start(name: str, parent: str) -> Span:
    service, _, method = name.rpartition("/")
    attributes = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method}
    return tracer().start_span(name, context=context_of(parent), kind=SpanKind.SERVER, attributes=attributes)


def _end(span: Span, context: grpc.aio.ServicerContext, error: BaseException | None) -> None:
    code = context.code()
    number = code.value[0] if isinstance(code, grpc.StatusCode) else code
    if isinstance(number, int):
        span.set_attribute("rpc.grpc.status_code", number)
    if error is not None and not isinstance(error, GeneratorExit):
        span.set_status(Status(StatusCode.ERROR, type(error).__name__))
    elif isinstance(number, int) and number != 0:
        span.set_status(Status(StatusCode.ERROR))
    span.end()


def _call(behavior: Callable[..., Awaitable[Any]], name: str, parent: str) -> Callable[..., Awaitable[Any]]:
    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        span = _start(name, parent)
        with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            try:
                response = await behavior(request, context)
            except BaseException as error:
                _end(span, context, error)
                raise
        _end(span, context, None)
        return response

    return call


def _generator(
    behavior: Callable[..., AsyncIterator[Any]], name: str, parent: str
) -> Callable[..., AsyncIterator[Any]]:
    async def call(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        span = _start(name, parent)
        try:
            # The span is current while the handler runs, not while the caller consumes a response.
            responses = behavior(request, context)
            while True:
                with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                    try:
                        response = await anext(responses)
                    except StopAsyncIteration:
                        break
                yield response
        except BaseException as error:
            _end(span, context, error)
            raise
        _end(span, context, None)

    return call
