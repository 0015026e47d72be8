"""The one mapping from domain errors to gRPC status codes with ErrorInfo."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from controlplane import errors

ERROR_DOMAIN = "astrabox.dev"

_CODES: dict[type[errors.KernelError], grpc.StatusCode] = {
    errors.InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    errors.SessionNotFound: grpc.StatusCode.NOT_FOUND,
    errors.InteractionNotFound: grpc.StatusCode.NOT_FOUND,
    errors.TaskNotFound: grpc.StatusCode.NOT_FOUND,
    errors.InteractionNotPending: grpc.StatusCode.FAILED_PRECONDITION,
    errors.SessionNotReady: grpc.StatusCode.FAILED_PRECONDITION,
    errors.RequestIdReused: grpc.StatusCode.ALREADY_EXISTS,
    errors.NoAgentAvailable: grpc.StatusCode.UNAVAILABLE,
    errors.RuntimeNotAvailable: grpc.StatusCode.FAILED_PRECONDITION,
    errors.TooLarge: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.AgentNotConnected: grpc.StatusCode.UNAVAILABLE,
}


def code_for(error: errors.KernelError) -> grpc.StatusCode:
    if isinstance(error, errors.WorkspaceFailed):
        return error.code
    return _CODES.get(type(error), grpc.StatusCode.INTERNAL)


def to_status(error: errors.KernelError) -> grpc.Status:
    """Build the rich gRPC status (code, message, ErrorInfo) for a domain error."""
    code = code_for(error)
    info = error_details_pb2.ErrorInfo(reason=error.reason, domain=ERROR_DOMAIN, metadata=error.metadata)
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=code.value[0], message=error.message, details=[detail])
    return rpc_status.to_status(status)


def rpc_status_for(code: grpc.StatusCode, message: str) -> status_pb2.Status:
    """A plain google.rpc.Status, for negative acknowledgements on the relay."""
    return status_pb2.Status(code=code.value[0], message=message)


F = TypeVar("F", bound=Callable[..., Any])


def maps_errors(method: F) -> F:
    """Decorate a unary servicer method so KernelError aborts with its status."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await method(self, request, context)
        except errors.KernelError as error:
            await context.abort_with_status(to_status(error))

    return wrapper  # type: ignore[return-value]

