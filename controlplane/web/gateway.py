"""The web API: every client-facing RPC over the Connect protocol, for browsers and curl.

It is a gateway, not a second implementation: each HTTP request becomes one gRPC call on an
in-process channel to this control plane's own gRPC server (over a private unix socket,
`controlplane.web.serving`), so authentication, authorization, bounds, audit records, metrics
and errors are exactly those of gRPC. What this module owns is the HTTP side: the Connect wire
format (`controlplane.web.connect`), which origins a browser may call from
(`controlplane.web.origins`), body limits, and turning a gRPC status into Connect's error JSON.

RunnerService is not served here: agents and replicas speak gRPC.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import grpc
import structlog
from aiohttp import web
from google.protobuf import descriptor, message_factory
from google.protobuf.message import Message

from controlplane.web import connect
from controlplane.web.connect import ConnectError
from controlplane.web.origins import BROWSER_POLICY_HEADERS, Origins

log = structlog.get_logger(__name__)

# Request metadata passed on to the gRPC call; nothing else of the HTTP headers is.
FORWARDED_HEADERS = ("authorization", "traceparent", "tracestate")
# Headers on every answer: nothing cached, sniffed, framed or referred.
SECURITY_HEADERS = {"Cache-Control": "no-store", **BROWSER_POLICY_HEADERS}


@dataclass(frozen=True, slots=True)
class Route:
    """One RPC as the gateway calls it."""

    path: str  # "/astrabox.sessionkernel.v1.SessionKernelService/CreateSession"
    request_type: type[Message]
    response_type: type[Message]
    client_streaming: bool
    server_streaming: bool

    @property
    def streaming(self) -> bool:
        return self.client_streaming or self.server_streaming


def routes(services: Sequence[descriptor.ServiceDescriptor]) -> dict[str, Route]:
    """A route per method of `services`, keyed by its HTTP path."""
    table = {}
    for service in services:
        for method in service.methods:
            path = f"/{service.full_name}/{method.name}"
            table[path] = Route(
                path,
                message_factory.GetMessageClass(method.input_type),
                message_factory.GetMessageClass(method.output_type),
                method.client_streaming,
                method.server_streaming,
            )
    return table


class _Call(NamedTuple):
    """One HTTP request as the call it asks for."""

    request: web.Request
    route: Route
    codec: str
    timeout: float | None
    metadata: tuple[tuple[str, str], ...]
    cors: dict[str, str]


class Gateway:
    """The aiohttp handlers of the web API, calling `channel` (the control plane's own server)."""

    def __init__(
        self, channel: grpc.aio.Channel, table: dict[str, Route], origins: Origins, max_message_bytes: int
    ) -> None:
        self._channel = channel
        self._routes = table
        self._origins = origins
        self._limit = max_message_bytes

    def add_to(self, app: web.Application) -> None:
        app.router.add_route("OPTIONS", "/{service}/{method}", self.preflight)
        app.router.add_route("*", "/{service}/{method}", self.call)

    async def preflight(self, request: web.Request) -> web.StreamResponse:
        """A browser asking whether another origin may call: yes only for an allowed origin."""
        origin = request.headers.get("Origin")
        if origin is None or not self._origins.allows(origin):
            return _answer_error(
                ConnectError(
                    grpc.StatusCode.PERMISSION_DENIED,
                    self._origins.refusal(origin or ""),
                    "ORIGIN_NOT_ALLOWED",
                ),
                {},
            )
        return web.Response(status=204, headers={**SECURITY_HEADERS, **self._origins.preflight_headers(origin)})

    async def call(self, request: web.Request) -> web.StreamResponse:
        cors = {}
        try:
            origin = request.headers.get("Origin")
            if origin is not None:
                if not self._origins.allows(origin):
                    raise ConnectError(
                        grpc.StatusCode.PERMISSION_DENIED, self._origins.refusal(origin), "ORIGIN_NOT_ALLOWED"
                    )
                cors = self._origins.response_headers(origin)
            route = self._routes.get(request.path)
            if route is None:
                raise ConnectError(
                    grpc.StatusCode.UNIMPLEMENTED,
                    f"no such method: {connect.echo(request.path)}; the web API serves "
                    "POST /<package.Service>/<Method> for the client-facing services",
                    "METHOD_NOT_FOUND",
                    http_status=404,
                )
            if request.method != "POST":
                raise ConnectError(
                    grpc.StatusCode.UNIMPLEMENTED,
                    f"{request.method} is not served: call {route.path} with POST",
                    "METHOD_NOT_ALLOWED",
                    http_status=405,
                )
            codec = _codec(request, route)
            timeout = connect.timeout_seconds(request.headers.get("Connect-Timeout-Ms"))
            metadata = tuple((name, request.headers[name]) for name in FORWARDED_HEADERS if name in request.headers)
            asked = _Call(request, route, codec, timeout, metadata, cors)
            return await (self._streaming(asked) if route.streaming else self._unary(asked))
        except ConnectError as error:
            return _answer_error(error, cors)

    async def _unary(self, asked: _Call) -> web.StreamResponse:
        request, route, codec, timeout, metadata, cors = asked
        body = await _read_body(request, self._limit)
        message = connect.decode(codec, body, route.request_type)
        call = self._channel.unary_unary(
            route.path,
            request_serializer=_serialize,
            response_deserializer=route.response_type.FromString,
        )
        try:
            response = await call(message, timeout=timeout, metadata=metadata)
        except grpc.aio.AioRpcError as error:
            return web.json_response(
                _rpc_error_json(error),
                status=connect.HTTP_STATUS.get(error.code(), 500),
                headers={**SECURITY_HEADERS, **cors},
            )
        content_type = "application/json" if codec == connect.JSON else "application/proto"
        return web.Response(
            body=connect.encode(codec, response), content_type=content_type, headers={**SECURITY_HEADERS, **cors}
        )

    async def _streaming(self, asked: _Call) -> web.StreamResponse:
        request, route, codec, timeout, metadata, cors = asked
        body = _RequestBody(request, codec, route.request_type, self._limit)
        response = web.StreamResponse(
            status=200,
            headers={**SECURITY_HEADERS, **cors, "Content-Type": f"application/connect+{codec}"},
        )
        await response.prepare(request)
        error: dict[str, Any] | None = None
        call: Any = None
        try:
            if route.client_streaming and route.server_streaming:
                # Both ways (OpenTerminal): the body's messages go on as they arrive while the
                # answers stream back; what a browser can send in one body over HTTP/1.1 is
                # all it sends (half-duplex, as Connect has it without HTTP/2).
                both_ways = self._channel.stream_stream(
                    route.path, request_serializer=_serialize, response_deserializer=route.response_type.FromString
                )
                call = both_ways(body.messages(), timeout=timeout, metadata=metadata)
                async for message in call:
                    await response.write(connect.envelope(connect.encode(codec, message)))
            elif route.client_streaming:
                unary_response = self._channel.stream_unary(
                    route.path, request_serializer=_serialize, response_deserializer=route.response_type.FromString
                )
                call = unary_response(body.messages(), timeout=timeout, metadata=metadata)
                message = await call
                await response.write(connect.envelope(connect.encode(codec, message)))
            else:
                first = await body.single()
                server_stream = self._channel.unary_stream(
                    route.path, request_serializer=_serialize, response_deserializer=route.response_type.FromString
                )
                call = server_stream(first, timeout=timeout, metadata=metadata)
                async for message in call:
                    await response.write(connect.envelope(connect.encode(codec, message)))
        except ConnectError as refused:
            error = refused.error_json()
        except grpc.aio.AioRpcError as failed:
            refused_body = body.error  # what the gateway refused of the request stream, not grpc's CANCELLED
            error = refused_body.error_json() if refused_body is not None else _rpc_error_json(failed)
        except ConnectionResetError:
            return response  # the caller went away; the call is cancelled below
        finally:
            if call is not None:
                call.cancel()  # the browser went away, or the call is over (then this does nothing)
        await response.write(connect.end_of_stream(error))
        await response.write_eof()
        return response


def _rpc_error_json(error: grpc.aio.AioRpcError) -> dict[str, Any]:
    """A failed call's status as Connect's error JSON, its details (ErrorInfo …) included."""
    return connect.error_json(error.code(), error.details() or "", connect.status_details(error.trailing_metadata()))


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()


def _codec(request: web.Request, route: Route) -> str:
    """The codec the request's Content-Type names; 415 when it does not fit the method's kind."""
    content_type = request.content_type.lower()
    accepted = connect.STREAM_CONTENT_TYPES if route.streaming else connect.UNARY_CONTENT_TYPES
    codec = accepted.get(content_type)
    if codec is None:
        raise ConnectError(
            grpc.StatusCode.INVALID_ARGUMENT if content_type in _ALL_CONTENT_TYPES else grpc.StatusCode.UNIMPLEMENTED,
            f"{route.path} is {'a streaming' if route.streaming else 'a unary'} method: send Content-Type "
            f"{' or '.join(accepted)}, not {connect.echo(request.headers.get('Content-Type', ''))}",
            "CONTENT_TYPE_UNSUPPORTED",
            http_status=415,
        )
    encoding = request.headers.get("Connect-Content-Encoding" if route.streaming else "Content-Encoding", "identity")
    if encoding.lower() != "identity":
        raise ConnectError(
            grpc.StatusCode.UNIMPLEMENTED,
            f"compressed requests are not accepted: send them uncompressed, not {connect.echo(encoding)}",
            "COMPRESSION_UNSUPPORTED",
        )
    return codec


_ALL_CONTENT_TYPES = {*connect.UNARY_CONTENT_TYPES, *connect.STREAM_CONTENT_TYPES}


def _too_large(limit: int, length: int) -> ConnectError:
    return ConnectError(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"a request message of {length} bytes is over the limit of {limit} bytes",
        "REQUEST_TOO_LARGE",
        http_status=413,
    )


async def _read_body(request: web.Request, limit: int) -> bytes:
    """A unary request's body, refused (413) past `limit` without reading the rest."""
    if request.content_length is not None and request.content_length > limit:
        raise _too_large(limit, request.content_length)
    body = await request.content.read(limit + 1)
    while len(body) <= limit:
        more = await request.content.read(limit + 1 - len(body))
        if not more:
            break
        body += more
    if len(body) > limit:
        raise _too_large(limit, len(body))
    return body


class _RequestBody:
    """A streaming request's envelopes as messages. A malformed body fails the call; since grpc
    reports a request iterator's failure as CANCELLED, the refusal is kept here for the answer."""

    def __init__(self, request: web.Request, codec: str, message_type: type[Message], limit: int) -> None:
        self._content = request.content
        self._codec = codec
        self._type = message_type
        self._limit = limit
        self.error: ConnectError | None = None

    async def single(self) -> Message:
        """The one request message of a server-streaming call."""
        received = [message async for message in self.messages()]
        if len(received) != 1:
            raise ConnectError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"a server-streaming call takes exactly one request envelope, not {len(received)}",
                "MALFORMED_REQUEST",
            )
        return received[0]

    async def messages(self) -> AsyncIterator[Message]:
        try:
            while True:
                try:
                    header = await self._content.readexactly(connect.ENVELOPE_HEADER.size)
                except asyncio.IncompleteReadError as short:
                    if not short.partial:
                        return
                    raise _malformed("the body ends inside an envelope header") from None
                flags, length = connect.ENVELOPE_HEADER.unpack(header)
                if flags & connect.FLAG_COMPRESSED:
                    raise ConnectError(
                        grpc.StatusCode.UNIMPLEMENTED,
                        "compressed envelopes are not accepted: send them uncompressed",
                        "COMPRESSION_UNSUPPORTED",
                    )
                if flags != 0:
                    raise _malformed(f"a request envelope has flags {flags:#04x}; requests use 0")
                if length > self._limit:
                    raise _too_large(self._limit, length)
                try:
                    data = await self._content.readexactly(length)
                except asyncio.IncompleteReadError:
                    raise _malformed(f"the body ends inside an envelope of {length} bytes") from None
                yield connect.decode(self._codec, data, self._type)
        except ConnectError as error:
            self.error = error
            raise


def _malformed(what: str) -> ConnectError:
    return ConnectError(grpc.StatusCode.INVALID_ARGUMENT, f"malformed streaming body: {what}", "MALFORMED_REQUEST")


def _answer_error(error: ConnectError, cors: dict[str, str]) -> web.StreamResponse:
    return web.json_response(error.error_json(), status=error.status(), headers={**SECURITY_HEADERS, **cors})


@web.middleware
async def internal_errors(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
    """A bug in the gateway answers Connect's `internal` with a reference to the log entry, never a
    traceback; aiohttp's own HTTP errors (a malformed request line) pass as they are."""
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except web.HTTPException:
        raise
    except Exception:
        reference = uuid.uuid4().hex
        log.exception("web_internal_error", reference=reference, path=request.path[: connect.ECHO_LIMIT])
        return _answer_error(
            ConnectError(grpc.StatusCode.INTERNAL, f"internal error (log reference {reference})", "INTERNAL"), {}
        )
