"""The caller's OpenTelemetry trace, carried to the control plane with every call.

When a span is current in the calling program (its own OpenTelemetry SDK set up, or any span made
current with `opentelemetry.trace.use_span`), each call of `AstraBoxClient` sends its context as
W3C `traceparent` (and `tracestate`) metadata, through OpenTelemetry's configured propagator; the
control plane's span for the call, and everything it asks an agent to do for it (the turn a
message opens, the journal commits of that turn's outputs), join the caller's trace. Without a
current span nothing is sent. Only `opentelemetry-api` is needed: the SDK is the caller's choice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from opentelemetry import propagate

__all__ = ["trace_interceptors", "trace_metadata"]


def trace_metadata() -> tuple[tuple[str, str], ...]:
    """The current trace context as gRPC metadata pairs; () when no span is current."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return tuple(carrier.items())


def _with_trace(details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
    pairs = trace_metadata()
    if not pairs:
        return details
    names = {name for name, _ in pairs}
    metadata = [(k, v) for k, v in (details.metadata or ()) if k not in names]
    return grpc.aio.ClientCallDetails(
        details.method,
        details.timeout,
        grpc.aio.Metadata(*metadata, *pairs),
        details.credentials,
        details.wait_for_ready,
    )


def trace_interceptors() -> list[Any]:
    """The channel interceptors that add the current span's trace context to every call's metadata,
    one per call shape (grpc.aio files an interceptor under the first shape it implements only)."""
    return [_UnaryUnary(), _UnaryStream(), _StreamUnary(), _StreamStream()]


class _UnaryUnary(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc, unused-ignore]
    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], client_call_details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await continuation(_with_trace(client_call_details), request)


class _UnaryStream(grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[misc, unused-ignore]
    async def intercept_unary_stream(
        self, continuation: Callable[..., Any], client_call_details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await continuation(_with_trace(client_call_details), request)


class _StreamUnary(grpc.aio.StreamUnaryClientInterceptor):  # type: ignore[misc, unused-ignore]
    async def intercept_stream_unary(
        self, continuation: Callable[..., Any], client_call_details: grpc.aio.ClientCallDetails, request_iterator: Any
    ) -> Any:
        return await continuation(_with_trace(client_call_details), request_iterator)


class _StreamStream(grpc.aio.StreamStreamClientInterceptor):  # type: ignore[misc, unused-ignore]
    async def intercept_stream_stream(
        self, continuation: Callable[..., Any], client_call_details: grpc.aio.ClientCallDetails, request_iterator: Any
    ) -> Any:
        return await continuation(_with_trace(client_call_details), request_iterator)
