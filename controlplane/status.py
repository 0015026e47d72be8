"""The one mapping from domain errors to gRPC status codes with ErrorInfo."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar, cast

import grpc
import structlog
from google.protobuf import any_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from controlplane import database, errors

log = structlog.get_logger(__name__)

ERROR_DOMAIN = "astrabox.dev"

_CODES: dict[type[errors.KernelError], grpc.StatusCode] = {
    errors.InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    errors.SessionNotFound: grpc.StatusCode.NOT_FOUND,
    errors.InteractionNotFound: grpc.StatusCode.NOT_FOUND,
    errors.TaskNotFound: grpc.StatusCode.NOT_FOUND,
    errors.ToolGrantNotFound: grpc.StatusCode.NOT_FOUND,
    errors.InteractionNotPending: grpc.StatusCode.FAILED_PRECONDITION,
    errors.SessionNotReady: grpc.StatusCode.FAILED_PRECONDITION,
    errors.AgentVersionUnsupported: grpc.StatusCode.FAILED_PRECONDITION,
    errors.RequestIdReused: grpc.StatusCode.ALREADY_EXISTS,
    errors.NoAgentAvailable: grpc.StatusCode.UNAVAILABLE,
    errors.CapacityExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.DedicatedHostsUnavailable: grpc.StatusCode.FAILED_PRECONDITION,
    errors.CredentialsHostNotDedicated: grpc.StatusCode.PERMISSION_DENIED,
    errors.AgentsCordoned: grpc.StatusCode.FAILED_PRECONDITION,
    errors.IsolationUnavailable: grpc.StatusCode.FAILED_PRECONDITION,
    errors.RuntimeNotAvailable: grpc.StatusCode.FAILED_PRECONDITION,
    errors.ForkRefused: grpc.StatusCode.FAILED_PRECONDITION,
    errors.ForkPointBeyondEnd: grpc.StatusCode.OUT_OF_RANGE,
    errors.QuotaExceeded: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.AgentNotConnected: grpc.StatusCode.UNAVAILABLE,
    errors.Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    errors.CredentialsUnverifiable: grpc.StatusCode.UNAVAILABLE,
    errors.DatabaseUnavailable: grpc.StatusCode.UNAVAILABLE,
    errors.DatabaseConflict: grpc.StatusCode.ABORTED,
    errors.RoleInsufficient: grpc.StatusCode.PERMISSION_DENIED,
    errors.ProjectNotFound: grpc.StatusCode.NOT_FOUND,
    errors.ProjectExists: grpc.StatusCode.ALREADY_EXISTS,
    errors.KeyNotFound: grpc.StatusCode.NOT_FOUND,
    errors.AgentIdBound: grpc.StatusCode.PERMISSION_DENIED,
    errors.AgentPendingAdmission: grpc.StatusCode.PERMISSION_DENIED,
    errors.AgentNotFound: grpc.StatusCode.NOT_FOUND,
    errors.AgentDefinitionNotFound: grpc.StatusCode.NOT_FOUND,
    errors.AgentVersionNotFound: grpc.StatusCode.NOT_FOUND,
    errors.AgentDefinitionExists: grpc.StatusCode.ALREADY_EXISTS,
    errors.AgentDefinitionArchived: grpc.StatusCode.FAILED_PRECONDITION,
    errors.AgentVersionConflict: grpc.StatusCode.ABORTED,
    errors.EnvironmentNotFound: grpc.StatusCode.NOT_FOUND,
    errors.EnvironmentVersionNotFound: grpc.StatusCode.NOT_FOUND,
    errors.EnvironmentExists: grpc.StatusCode.ALREADY_EXISTS,
    errors.EnvironmentArchived: grpc.StatusCode.FAILED_PRECONDITION,
    errors.EnvironmentVersionConflict: grpc.StatusCode.ABORTED,
    errors.SessionBudgetExhausted: grpc.StatusCode.FAILED_PRECONDITION,
    errors.Unimplemented: grpc.StatusCode.UNIMPLEMENTED,
    errors.ScheduleNotFound: grpc.StatusCode.NOT_FOUND,
    errors.ScheduleExists: grpc.StatusCode.ALREADY_EXISTS,
    errors.ScheduleLimitReached: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.MemoryStoreNotFound: grpc.StatusCode.NOT_FOUND,
    errors.MemoryStoreExists: grpc.StatusCode.ALREADY_EXISTS,
    errors.MemoryStoreLimitReached: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.MemoryDocumentNotFound: grpc.StatusCode.NOT_FOUND,
    errors.MemoryDocumentTooLarge: grpc.StatusCode.INVALID_ARGUMENT,
    errors.MemoryDocumentLimitReached: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.MemoryStoreFull: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.MemoryVersionConflict: grpc.StatusCode.ABORTED,
    errors.CredentialNotFound: grpc.StatusCode.NOT_FOUND,
    errors.CredentialsUnavailable: grpc.StatusCode.FAILED_PRECONDITION,
    errors.CredentialUnreadable: grpc.StatusCode.FAILED_PRECONDITION,
    errors.SessionNotOnAgent: grpc.StatusCode.PERMISSION_DENIED,
    errors.WebhookNotFound: grpc.StatusCode.NOT_FOUND,
    errors.WebhookDeliveryNotFound: grpc.StatusCode.NOT_FOUND,
}


def code_for(error: errors.KernelError) -> grpc.StatusCode:
    if isinstance(error, errors.WorkspaceFailed):
        return error.code
    return _CODES.get(type(error), grpc.StatusCode.INTERNAL)


def to_status(error: errors.KernelError) -> grpc.Status:
    """Build the rich gRPC status (code, message, ErrorInfo, and RetryInfo when the error says how long
    to wait) for a domain error."""
    code = code_for(error)
    if code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN) and not isinstance(error, errors.Internal):
        # An agent's or a replica's own failure: its text stays in the log.
        return to_status(unexpected(error))
    info = error_details_pb2.ErrorInfo(reason=error.reason, domain=ERROR_DOMAIN, metadata=error.metadata)
    details = [_packed(info)]
    if error.retry_after is not None:
        retry = error_details_pb2.RetryInfo()
        retry.retry_delay.FromTimedelta(max(error.retry_after, timedelta(0)))
        details.append(_packed(retry))
    status = status_pb2.Status(code=code.value[0], message=error.message, details=details)
    return rpc_status.to_status(status)


def _packed(message: Message) -> any_pb2.Any:
    detail = any_pb2.Any()
    detail.Pack(message)
    return detail


def refusal(error: BaseException, **where: str) -> errors.KernelError:
    """What a caller is told of `error`, whatever it is: a KernelError is its own answer; the database's
    faults are DatabaseUnavailable or DatabaseConflict (logged in one line: they say the database is
    away, not that the code is wrong); anything else is `unexpected`."""
    if isinstance(error, errors.KernelError):
        return error
    if isinstance(error, database.UNAVAILABLE_ERRORS):
        log.warning("database_unavailable", **where, error=type(error).__name__, detail=str(error)[:300])
        return errors.DatabaseUnavailable()
    if isinstance(error, database.CONFLICT_ERRORS):
        log.info("database_conflict", **where, error=type(error).__name__, detail=str(error)[:300])
        return errors.DatabaseConflict()
    return unexpected(error, **where)


def unexpected(error: BaseException, **where: str) -> errors.Internal:
    """The INTERNAL error for one no rule foresaw: logged with its traceback under a
    reference, and only the reference goes to the caller (a driver's text can hold
    anybody's data)."""
    ref = uuid.uuid4().hex[:16]
    log.error("rpc_failed", ref=ref, **where, exc_info=error)
    return errors.Internal(ref)


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

    return cast(F, wrapper)


def retry_info(error: grpc.aio.AioRpcError) -> error_details_pb2.RetryInfo | None:
    """The RetryInfo a failed call carries; None without one."""
    try:
        status = rpc_status.from_call(error)
    except (ValueError, AttributeError):
        return None
    for detail in status.details if status else ():
        retry = error_details_pb2.RetryInfo()
        if detail.Unpack(retry):
            return retry
    return None


def error_info(error: grpc.aio.AioRpcError) -> error_details_pb2.ErrorInfo | None:
    """The ErrorInfo a failed call carries (the reading side of `to_status`); None without one."""
    try:
        status = rpc_status.from_call(error)
    except (ValueError, AttributeError):
        return None
    for detail in status.details if status else ():
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info
    return None
