"""The Python client of AstraBox: drive coding-agent sessions over gRPC.

    from astrabox import AssistantMessage, AstraBoxClient

    async with AstraBoxClient.connect("127.0.0.1:7233") as client:
        session = await client.start_session()
        turn = await session.send("Create hello.txt")
        async for event in turn.events():
            if isinstance(event.message, AssistantMessage) and event.message.text:
                print(event.message.text)
        print((await turn.result()).total_cost_usd)

    astrabox.client     AstraBoxClient: the connection, one method per RPC (protobuf in and out)
    astrabox.sessions   SessionHandle, Turn, TurnResult: a session and its turns
    astrabox.events     Event: a journal event, its engine message typed
    astrabox.messages   typed views of the engine's messages (assistant text, tool use, tool result, result, …)
    astrabox.agent_definitions
                        client.agents: agent definitions and their versions (AgentService)
    astrabox.agent_files
                        agent definitions as YAML files, read strictly and written back
    astrabox.errors     the exceptions
    astrabox.testing    LocalStack: a whole stack in a child process, for tests (needs astrabox-server)
    astrabox.render     one-line renderings of events, as `astrabox run` prints them
    astrabox.cli        the `astrabox` command
    astrabox.sessionkernel.v1, astrabox.agents.v1, astrabox.admin.v1, astrabox.runner.v1
                        the generated protobuf and gRPC code

The names below are importable from `astrabox` itself; each is loaded from its
module on first use, so `import astrabox` alone loads nothing else.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from astrabox.client import AstraBoxClient, Backoff, CommandResult
    from astrabox.errors import AstraBoxError, SessionStateError
    from astrabox.events import Event
    from astrabox.messages import (
        AssistantMessage,
        InitMessage,
        Message,
        OtherMessage,
        ResultMessage,
        SystemMessage,
        TaskMessage,
        TextBlock,
        ThinkingBlock,
        ToolResultBlock,
        ToolUseBlock,
        Usage,
        UserMessage,
    )
    from astrabox.sessions import SessionHandle, Turn, TurnOutcome, TurnResult

__all__ = [
    "AssistantMessage",
    "AstraBoxClient",
    "AstraBoxError",
    "Backoff",
    "CommandResult",
    "Event",
    "InitMessage",
    "Message",
    "OtherMessage",
    "ResultMessage",
    "SessionHandle",
    "SessionStateError",
    "SystemMessage",
    "TaskMessage",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "Turn",
    "TurnOutcome",
    "TurnResult",
    "Usage",
    "UserMessage",
]

# Where the names above come from (each is in its module's own __all__).
_MODULES = ("astrabox.client", "astrabox.errors", "astrabox.events", "astrabox.messages", "astrabox.sessions")


def __getattr__(name: str) -> Any:
    """Loads an exported name from its module on first use."""
    if name in __all__:
        for module in map(importlib.import_module, _MODULES):
            if name in module.__all__:
                value = getattr(module, name)
                globals()[name] = value
                return value
    raise AttributeError(f"module 'astrabox' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
