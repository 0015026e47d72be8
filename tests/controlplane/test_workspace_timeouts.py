"""The workspace reply timeout (`--workspace-reply-timeout`, controlplane.workspace): an agent
silent on a command for longer answers the caller DEADLINE_EXCEEDED AGENT_SILENT, naming the
setting to raise, and the command is cancelled on the agent; it is read from the config file."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from controlplane.settings import ControlPlaneSettings
from controlplane.workspace import WorkspaceTimeouts
from tests.controlplane.test_quotas import Aborted, Context, attached, run


def reason(status: grpc.Status) -> str:
    """The ErrorInfo reason `status` carries."""
    [details] = [value for key, value in status.trailing_metadata if key == "grpc-status-details-bin"]
    for detail in status_pb2.Status.FromString(details).details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info.reason
    return ""


async def test_an_agent_silent_on_a_command_past_the_reply_timeout_fails_it_and_it_is_cancelled(
    plane, tmp_path: Path
) -> None:
    config = tmp_path / "controlplane.toml"
    config.write_text("workspace_reply_timeout = 0.5\nworkspace_delivery_timeout = 45\n")
    settings = ControlPlaneSettings.from_args(["--config", str(config)], {"ASTRABOX_DATABASE_URL": "postgresql://x"})
    timeouts = WorkspaceTimeouts(settings.workspace_reply_timeout, settings.workspace_delivery_timeout)
    assert timeouts == WorkspaceTimeouts(reply=0.5, delivery=45.0)

    async with attached(plane, timeouts) as (servicer, agent, session_id):
        context = Context()
        with pytest.raises(Aborted):
            await run(servicer, session_id, context)  # the fake agent never answers a command

    assert context.status is not None and context.status.code is grpc.StatusCode.DEADLINE_EXCEEDED
    assert "said nothing on this request for 0.5 s" in context.status.details
    assert "--workspace-reply-timeout" in context.status.details
    assert reason(context.status) == "AGENT_SILENT"
    assert [r.WhichOneof("op") for r in agent.requests] == ["exec_command", "cancel"]
