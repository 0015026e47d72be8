"""The engine manifest travels from the agent: a real agent declares Claude Code's permission
modes (from the claude-agent-sdk it runs) in its Hello, and the control plane, which does not
import that SDK, validates sessions against them."""

from __future__ import annotations

import typing

import grpc
import pytest
from claude_agent_sdk.types import PermissionMode

from astrabox.client import AstraBoxClient, AstraBoxError

pytestmark = pytest.mark.e2e


async def test_sessions_get_the_permission_modes_the_agent_declared(client: AstraBoxClient, stack) -> None:
    session = await client.create_session(request_id="manifest-e2e")
    assert (session.engine, session.permission_mode) == ("claude_code", "bypassPermissions")
    assert tuple(session.capabilities.permission_modes) == typing.get_args(PermissionMode)
    assert session.capabilities.supports_interactions and session.capabilities.supports_server_info

    await client.wait_for_state(session.session_id, ["READY"], timeout=120)
    changed = await client.set_permission_mode(session.session_id, "plan")
    assert changed.permission_mode == "plan"
    with pytest.raises(AstraBoxError) as refused:
        await client.set_permission_mode(session.session_id, "yolo")
    assert (refused.value.code, refused.value.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "PERMISSION_MODE_INVALID")
    assert "bypassPermissions" in refused.value.message

    with pytest.raises(AstraBoxError) as unknown:
        await client.create_session(request_id="manifest-e2e-unknown", engine="vim")
    assert (
        unknown.value.code is grpc.StatusCode.INVALID_ARGUMENT
        and "connected agents run: claude_code" in unknown.value.message
    )
