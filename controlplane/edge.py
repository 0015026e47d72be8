"""What every SessionKernelService call passes through around its handler.

Before: the request bytes are decoded here rather than by gRPC (which answers
bytes that are no valid request with UNKNOWN and the parser's text), and every
request message is bounded by `controlplane.validation.request`; either
refusal is INVALID_ARGUMENT. Then the request is scoped (`scope`: the session
it names must be the caller's project's, `controlplane.identity.tenancy`; for
a stream, its first message). After: a domain error becomes its status
(`controlplane.status`), a fault of the database UNAVAILABLE (or ABORTED for a
conflict) with a reason, anything else INTERNAL with a reference to the log
entry that holds the details. So a caller never sees UNKNOWN, nor an
exception's text.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import Message

from controlplane import validation
from controlplane.errors import InvalidArgument
from controlplane.status import refusal, to_status
from controlplane.workspace import drain

MALFORMED_REQUEST = "MALFORMED_REQUEST"

# Admits a decoded, bounded request, or raises the KernelError its caller gets.
Scope = Callable[[Message], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class _Undecodable:
    """What a request's bytes decoded to when they are not a valid message of its type."""

    type_name: str


# grpc ships no type information, so the base class is Any: an error only where
# disallow_subclassing_any (strict) applies, hence unused-ignore.
class Edge(grpc.aio.ServerInterceptor):  # type: ignore[misc, unused-ignore]
    """Guards the methods of the services named; calls to other services pass untouched.

    `internal` services (the agents' and replicas' RunnerService) get the decoding and the error
    mapping only: their requests carry engine output, which is data, not bounded fields; and a
    refused agent stream is not drained (it does not end until the agent goes). So do
    `self_bounded` services, whose handlers bound their requests themselves (AgentService: an
    agent definition's fields have meanings of their own, `controlplane.agent_definitions.specs`)
    and which name no session to scope."""

    def __init__(
        self,
        *service_names: str,
        internal: tuple[str, ...] = (),
        self_bounded: tuple[str, ...] = (),
        scope: Scope | None = None,
    ) -> None:
        self._prefixes = tuple(f"/{name}/" for name in service_names)
        self._unbounded = tuple(f"/{name}/" for name in (*internal, *self_bounded))
        self._scope = scope

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None:
            return handler
        if method.startswith(self._prefixes):
            return guarded(handler, method, scope=self._scope)
        if method.startswith(self._unbounded):
            return guarded(handler, method, bounded=False)
        return handler


def guarded(
    handler: grpc.RpcMethodHandler, method: str, bounded: bool = True, scope: Scope | None = None
) -> grpc.RpcMethodHandler:
    """`handler` with tolerant decoding, requests bounded (unless not `bounded`) and every error
    mapped to a status."""
    decode = handler.request_deserializer
    type_name = method.rsplit("/", 1)[-1] + "Request"

    def deserialize(data: bytes) -> Message | _Undecodable:
        try:
            message: Message = decode(data)
        except Exception:  # DecodeError, or bad UTF-8 in a string field
            return _Undecodable(type_name)
        return message

    # A streaming handler either yields its responses or writes them with context.write and
    # returns; the latter is wrapped as the unary-response handler it then is.
    behavior: Callable[..., Awaitable[Any] | AsyncIterator[Any]]
    if handler.unary_unary:
        kind, behavior = "unary_unary", _unary_unary(handler.unary_unary, method, bounded, scope)
    elif handler.unary_stream:
        wrap = _unary_stream if inspect.isasyncgenfunction(handler.unary_stream) else _unary_unary
        kind, behavior = "unary_stream", wrap(handler.unary_stream, method, bounded, scope)
    elif handler.stream_unary:
        kind, behavior = "stream_unary", _stream_unary(handler.stream_unary, method, bounded, scope)
    else:
        wrap = _stream_stream if inspect.isasyncgenfunction(handler.stream_stream) else _stream_unary
        kind, behavior = "stream_stream", wrap(handler.stream_stream, method, bounded, scope)
    return handler._replace(request_deserializer=deserialize, **{kind: behavior})


def _checked(request: Message | _Undecodable, bounded: bool = True) -> Message:
    if isinstance(request, _Undecodable):
        raise InvalidArgument("", f"the request is not a valid {request.type_name} message", MALFORMED_REQUEST)
    if bounded:
        validation.request(request)
    return request


async def _admitted(request: Message | _Undecodable, bounded: bool, scope: Scope | None) -> Message:
    checked = _checked(request, bounded)
    if scope is not None:
        await scope(checked)
    return checked


class _CheckedStream:
    """A request stream whose messages are checked as they are read: a refused one raises
    InvalidArgument to the handler, and the stream stays readable (`controlplane.workspace.drain`
    reads the rest of a refused call before the refusal is sent)."""

    def __init__(self, requests: AsyncIterator[Any], bounded: bool, scope: Scope | None) -> None:
        self._requests = requests
        self._bounded = bounded
        self._scope = scope

    def __aiter__(self) -> _CheckedStream:
        return self

    async def __anext__(self) -> Message:
        message = _checked(await anext(self._requests), self._bounded)
        if self._scope is not None:
            scope, self._scope = self._scope, None  # the first message names the session
            await scope(message)
        return message


async def _refuse(context: grpc.aio.ServicerContext, error: Exception, method: str) -> None:
    if context.cancelled():  # the caller went away (its call's abort may have failed on that): nobody to tell
        return
    await context.abort_with_status(to_status(refusal(error, method=method)))


def _unary_unary(
    behavior: Callable[..., Awaitable[Any]], method: str, bounded: bool, scope: Scope | None
) -> Callable[..., Awaitable[Any]]:
    async def call(request: Message | _Undecodable, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await behavior(await _admitted(request, bounded, scope), context)
        except grpc.aio.AbortError:
            raise
        except Exception as error:
            await _refuse(context, error, method)

    return call


def _unary_stream(
    behavior: Callable[..., AsyncIterator[Any]], method: str, bounded: bool, scope: Scope | None
) -> Callable[..., AsyncIterator[Any]]:
    async def call(request: Message | _Undecodable, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        try:
            async for response in behavior(await _admitted(request, bounded, scope), context):
                yield response
        except grpc.aio.AbortError:
            raise
        except Exception as error:
            await _refuse(context, error, method)

    return call


def _stream_unary(
    behavior: Callable[..., Awaitable[Any]], method: str, bounded: bool, scope: Scope | None
) -> Callable[..., Awaitable[Any]]:
    async def call(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
        checked = _CheckedStream(requests, bounded, scope)
        try:
            return await behavior(checked, context)
        except grpc.aio.AbortError:
            raise
        except Exception as error:
            if bounded:
                await drain(requests)  # see `drain`: else the client may see its own write fail instead
            await _refuse(context, error, method)

    return call


def _stream_stream(
    behavior: Callable[..., AsyncIterator[Any]], method: str, bounded: bool, scope: Scope | None
) -> Callable[..., AsyncIterator[Any]]:
    async def call(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        checked = _CheckedStream(requests, bounded, scope)
        try:
            async for response in behavior(checked, context):
                yield response
        except grpc.aio.AbortError:
            raise
        except Exception as error:
            if bounded:
                await drain(requests)
            await _refuse(context, error, method)

    return call
