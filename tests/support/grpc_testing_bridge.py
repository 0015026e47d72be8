"""Runs grpc.aio servicers under grpcio-testing: in-process, no sockets.

grpcio-testing calls servicer methods synchronously from its own threads and
its ServicerContext has no `abort_with_status`. The bridge wraps each async
method so it runs on the test's event loop, and gives it an async context
whose aborts land in grpcio-testing's RPC (with the rich status's trailing
metadata, so tests can read the ErrorInfo). Each call runs with `caller` bound,
as the control plane's authenticator binds the caller of a real call.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import grpc
import grpc_testing
from google.protobuf import descriptor
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from controlplane.identity.callers import Caller, bind, unbind


class _Aborted(Exception):
    """Ends a bridged call whose status was set on the testing context."""


class _AsyncContext:
    # grpcio-testing's own abort drops trailing metadata, so an abort here sets
    # code, details and trailers and ends the call as a completed one.
    def __init__(self, context: Any) -> None:
        self._context = context

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self._context.set_code(code)
        self._context.set_details(details)
        raise _Aborted

    async def abort_with_status(self, status: grpc.Status) -> None:
        self._context.set_trailing_metadata(status.trailing_metadata)
        await self.abort(status.code, status.details)

    async def send_initial_metadata(self, metadata: Any) -> None:
        self._context.send_initial_metadata(metadata)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


async def _as(caller: Caller, step: Any) -> Any:
    token = bind(caller)
    try:
        return await step
    finally:
        unbind(token)


class _SyncServicer:
    """Presents an async servicer's methods as the blocking ones grpcio-testing calls."""

    def __init__(self, servicer: Any, loop: asyncio.AbstractEventLoop, caller: Caller) -> None:
        self._servicer = servicer
        self._loop = loop
        self._caller = caller

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._servicer, name)

        if inspect.isasyncgenfunction(method):

            def stream(request: Any, context: Any) -> Any:
                agen = method(request, _AsyncContext(context))
                while True:
                    step = _as(self._caller, anext(agen, StopAsyncIteration))
                    future = asyncio.run_coroutine_threadsafe(step, self._loop)
                    try:
                        item = future.result()
                    except _Aborted:
                        return
                    if item is StopAsyncIteration:
                        return
                    yield item

            return stream

        def unary(request: Any, context: Any) -> Any:
            try:
                step = _as(self._caller, method(request, _AsyncContext(context)))
                return asyncio.run_coroutine_threadsafe(step, self._loop).result()
            except _Aborted:
                return None

        return unary


class ServicerHarness:
    """Invoke one service's RPCs in-process through grpcio-testing."""

    def __init__(self, service: descriptor.ServiceDescriptor, servicer: Any, caller: Caller) -> None:
        self._service = service
        self._server = grpc_testing.server_from_dictionary(
            {service: _SyncServicer(servicer, asyncio.get_running_loop(), caller)}, grpc_testing.strict_real_time()
        )

    async def unary(self, rpc: str, request: Any) -> tuple[Any, grpc.StatusCode, str, Any]:
        """Returns (response, code, details, ErrorInfo or None)."""
        method = self._service.methods_by_name[rpc]

        def call() -> tuple[Any, Any, grpc.StatusCode, str]:
            invocation = self._server.invoke_unary_unary(method, (), request, None)
            return invocation.termination()

        response, trailing, code, details = await asyncio.to_thread(call)
        return response, code, details, _error_info(trailing)

    async def server_stream(self, rpc: str, request: Any, count: int) -> tuple[list[Any], grpc.StatusCode | None, Any]:
        """Take `count` responses (or fewer if the stream ends), then cancel."""
        method = self._service.methods_by_name[rpc]

        def call() -> tuple[list[Any], grpc.StatusCode | None, Any]:
            invocation = self._server.invoke_unary_stream(method, (), request, None)
            responses = []
            try:
                while len(responses) < count:
                    responses.append(invocation.take_response())
            except ValueError:
                pass  # the stream terminated
            if len(responses) >= count:
                invocation.cancel()
                return responses, None, None
            trailing, code, _ = invocation.termination()
            return responses, code, _error_info(trailing)

        return await asyncio.to_thread(call)


def _error_info(trailing: Any) -> error_details_pb2.ErrorInfo | None:
    for key, value in trailing or ():
        if key == "grpc-status-details-bin":
            status = rpc_status.status_pb2.Status.FromString(value)
            for detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    return info
    return None
