"""The data-plane agent's exceptions.

    AgentError
    ├── StateError            the local state database is unusable
    ├── CommandRefused        a command was refused; carries the gRPC status to acknowledge with
    └── RelayError            the stream to the control plane failed
        └── StreamRejected    the control plane did not answer Hello with Welcome

Sandbox and engine failures keep their own trees (`SandboxError`, `EngineError`
in the port modules); the runtime layer turns them into outputs.
"""

from __future__ import annotations

import grpc


class AgentError(Exception):
    """Base of every error the agent raises on purpose."""


class StateError(AgentError):
    """The local state database could not be opened or is inconsistent."""


class CommandRefused(AgentError):
    """A command was refused without effect; acknowledged with this status."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class RelayError(AgentError):
    """The stream to the control plane failed; the relay reconnects."""


class StreamRejected(RelayError):
    """The control plane ended or refused the stream before Welcome."""
