"""Errors the AstraBox client raises.

AstraBoxError                the server answered with an error (code, reason, message)
 └── SessionStateError       a session reached a state it cannot leave towards the awaited ones
LocalStackError              `astrabox.testing.LocalStack` could not start the stack
 └── ServerNotInstalledError the server distribution (astrabox-server) is not installed
"""

from __future__ import annotations

from collections.abc import Mapping

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

__all__ = ["AstraBoxError", "LocalStackError", "ServerNotInstalledError", "SessionStateError"]


class AstraBoxError(Exception):
    """An RPC failed.

    `code` is the gRPC status code; `reason`, `domain` and `metadata` come
    from the `google.rpc.ErrorInfo` detail (`reason` such as
    "SESSION_NOT_FOUND"; empty when the server sent none, e.g. when it was
    unreachable); `message` is the status message.
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        *,
        reason: str = "",
        domain: str = "",
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        self.code = code
        self.message = message
        self.reason = reason
        self.domain = domain
        self.metadata = dict(metadata or {})
        super().__init__(f"{code.name}{f' {reason}' if reason else ''}: {message}")

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError) -> AstraBoxError:
        """Reads code, message and ErrorInfo from a failed call."""
        code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
        message = error.details() if hasattr(error, "details") else str(error)
        info = _error_info(error)
        if info is None:
            return cls(code, message or "")
        return cls(code, message or "", reason=info.reason, domain=info.domain, metadata=info.metadata)


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


def _error_info(error: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    try:
        status = rpc_status.from_call(error)
    except (ValueError, AttributeError):
        return None  # a status detail that contradicts the call's own status
    if status is None:
        return None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    return None
