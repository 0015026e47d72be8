"""Errors the AstraBox client raises.

AstraBoxError                the server answered with an error (code, reason, message)
 └── SessionStateError       a session reached a state it cannot leave towards the awaited ones
LocalStackError              `astrabox.testing.LocalStack` could not start the stack
 └── ServerNotInstalledError the server distribution (astrabox-server) is not installed
AgentFileError               an agent file (`astrabox.agent_files`) cannot be read or says something invalid
EnvironmentFileError         an environment file (`astrabox.environment_files`) likewise
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

__all__ = [
    "AgentFileError",
    "AstraBoxError",
    "EnvironmentFileError",
    "LocalStackError",
    "ServerNotInstalledError",
    "SessionStateError",
]


class AstraBoxError(Exception):
    """An RPC failed.

    `code` is the gRPC status code; `reason`, `domain` and `metadata` come
    from the `google.rpc.ErrorInfo` detail (`reason` such as
    "SESSION_NOT_FOUND"; empty when the server sent none, e.g. when it was
    unreachable); `message` is the status message. `retry_delay` is how long
    the server asks the caller to wait before it retries (a
    `google.rpc.RetryInfo` detail, e.g. with QUOTA_EXCEEDED); None without one.
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        *,
        reason: str = "",
        domain: str = "",
        metadata: Mapping[str, str] | None = None,
        retry_delay: timedelta | None = None,
    ) -> None:
        self.code = code
        self.message = message
        self.reason = reason
        self.domain = domain
        self.metadata = dict(metadata or {})
        self.retry_delay = retry_delay
        super().__init__(f"{code.name}{f' {reason}' if reason else ''}: {message}")

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError) -> AstraBoxError:
        """Reads code, message and ErrorInfo from a failed call."""
        code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
        message = error.details() if hasattr(error, "details") else str(error)
        info, retry = _details(error)
        delay = retry.retry_delay.ToTimedelta() if retry is not None else None
        if info is None:
            return cls(code, message or "", retry_delay=delay)
        return cls(
            code, message or "", reason=info.reason, domain=info.domain, metadata=info.metadata, retry_delay=delay
        )


class SessionStateError(AstraBoxError):
    """A session settled in a state it never leaves for the awaited ones.

    `session` is the session as last read.
    """

    def __init__(self, message: str, *, session: object) -> None:
        super().__init__(grpc.StatusCode.FAILED_PRECONDITION, message, reason="UNEXPECTED_STATE")
        self.session = session


class LocalStackError(Exception):
    """The local stack did not start: it exited, or it did not serve in time (the message ends with
    the last lines it printed)."""


class ServerNotInstalledError(LocalStackError):
    """The local stack needs the server (`astrabox up`, from the astrabox-server distribution)
    installed in the same Python environment as the client."""


class AgentFileError(ValueError):
    """An agent file is not one: its message names the file, the line and the key at fault, and what
    would be valid there."""


class EnvironmentFileError(ValueError):
    """An environment file is not one: its message names the file, the line and the key at fault, and
    what would be valid there."""


def _details(error: grpc.RpcError) -> tuple[error_details_pb2.ErrorInfo | None, error_details_pb2.RetryInfo | None]:
    """The ErrorInfo and RetryInfo details of a failed call, each None when it has none."""
    try:
        status = rpc_status.from_call(error)
    except (ValueError, AttributeError):
        return None, None  # a status detail that contradicts the call's own status
    info = retry = None
    for detail in status.details if status is not None else ():
        if info is None and detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
        elif retry is None and detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
    return info, retry
