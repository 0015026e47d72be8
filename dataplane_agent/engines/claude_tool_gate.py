"""The SDK's `can_use_tool` for a Claude Code session: every approval the CLI asks for (and every
AskUserQuestion) becomes a ToolRequest to the session's interaction broker, and whatever goes
wrong in asking is a refusal, never an approval."""

from __future__ import annotations

import uuid
from typing import Any

from claude_agent_sdk import PermissionResultAllow, PermissionResultDeny, ToolPermissionContext

from dataplane_agent.engines.base import InteractionBroker, ToolRequest

DEFAULT_DENIAL = "The user denied this tool use."


class ToolGate:
    """The SDK's `can_use_tool`: every approval (and AskUserQuestion) goes to the broker as a ToolRequest."""

    def __init__(self, broker: InteractionBroker | None, session_log: Any) -> None:
        self._broker = broker
        self._log = session_log

    def adopt(self, broker: InteractionBroker | None, session_log: Any) -> None:
        """From now on ask `broker` (a pre-started engine handed to a session)."""
        self._broker, self._log = broker, session_log

    async def __call__(
        self, tool_name: str, tool_input: dict[str, Any], context: ToolPermissionContext
    ) -> PermissionResultAllow | PermissionResultDeny:
        request = ToolRequest(
            interaction_id=str(uuid.uuid4()),
            tool_name=tool_name,
            input=dict(tool_input),
            tool_use_id=context.tool_use_id or "",
        )
        self._log.debug("engine_asks", interaction_id=request.interaction_id, tool_name=tool_name)
        if self._broker is None:
            return PermissionResultDeny(message="No one can approve tool use in this engine session.")
        try:
            decision = await self._broker.ask(request)
        except Exception as error:  # nobody can answer: refusing is the safe default
            self._log.warning("engine_ask_failed", interaction_id=request.interaction_id, error=repr(error))
            return PermissionResultDeny(message=f"The approval could not be obtained: {error}")
        if decision.allow:
            return PermissionResultAllow(updated_input=decision.updated_input)
        return PermissionResultDeny(message=decision.message or DEFAULT_DENIAL, interrupt=decision.interrupt)
