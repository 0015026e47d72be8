"""The data-plane agent's exceptions.

    AgentError
    ├── StateError            the local state database is unusable
    ├── CommandRefused        a command was refused; carries the gRPC status to acknowledge with
    │   └── DestroyNotDone    a DestroyRuntime whose sandbox is still there; carries the verdict
    └── RelayError            the stream to the control plane failed
        └── StreamRejected    the control plane did not answer Hello with Welcome

Sandbox and engine failures keep their own trees (`SandboxError`, `EngineError`
in the port modules); the runtime layer turns them into outputs.
"""

from __future__ import annotations

import grpc

from astrabox.runner.v1 import runner_service_pb2 as pb


class AgentError(Exception):
    """Base of every error the agent raises on purpose."""


class StateError(AgentError):
    """The local state database could not be opened or is inconsistent."""


class CommandRefused(AgentError):
    """A command was refused without effect; acknowledged with this status.

    A `final` refusal is remembered under the command id, so a redelivery gets
    the same answer; a non-final one (a destruction that could not be
    confirmed) is tried again if the command is redelivered.
    """

    def __init__(self, code: grpc.StatusCode, message: str, *, final: bool = True) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.final = final


class DestroyNotDone(CommandRefused):
    """A DestroyRuntime whose sandbox is still there: the driver refused (REFUSED) or could not
    confirm it (UNCONFIRMED). Never final: a redelivered command tries again."""

    def __init__(self, code: grpc.StatusCode, message: str, verdict: pb.DestroyVerdict) -> None:
        super().__init__(code, message, final=False)
        self.verdict = verdict


class RelayError(AgentError):
    """The stream to the control plane failed; the relay reconnects."""


class StreamRejected(RelayError):
    """The control plane ended or refused the stream before Welcome."""
