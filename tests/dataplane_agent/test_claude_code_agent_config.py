"""A session's agent configuration applied by the claude_code adapter: the real bundled CLI in a
real bubblewrap sandbox, against the offline model, whose `report: setup` row says what it was
given (system prompt, tools) and whose `tool:` row calls any tool with any input."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from astrabox.agents.v1 import agent_pb2
from dataplane_agent.engines.agent_config import AgentConfig
from dataplane_agent.engines.base import EngineConfig, EngineError, EngineOutput, ToolDecision
from dataplane_agent.engines.claude_code import BUNDLED_CLI, ClaudeCodeAdapter, ClaudeCodeSession
from dataplane_agent.routes.model import ModelRoute
from dataplane_agent.sandboxes.base import Sandbox, SandboxSpec
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from tests.dataplane_agent.test_claude_code_interactions import RecordingBroker

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore::claude_agent_sdk.CanUseToolShadowedWarning")]

TURN_TIMEOUT = 60.0
ASK, ALLOW, DENY = agent_pb2.TOOL_POLICY_ASK, agent_pb2.TOOL_POLICY_ALLOW, agent_pb2.TOOL_POLICY_DENY


@pytest.fixture
def driver(sandbox_root: Path, bwrap: str) -> LocalSandboxDriver:
    if not BUNDLED_CLI.is_file():
        pytest.skip("claude-agent-sdk has no bundled CLI on this platform")
    return LocalSandboxDriver(sandbox_root, bwrap=bwrap)


@pytest.fixture
async def sandbox(driver: LocalSandboxDriver, model_route: ModelRoute) -> Sandbox:
    return await driver.create(
        SandboxSpec(session_id="agent-config", agent_id="agent-1", model_socket=model_route.socket)
    )


def spec(**fields: object) -> agent_pb2.AgentSpec:
    return agent_pb2.AgentSpec(**fields)  # type: ignore[arg-type]


def rules(*pairs: tuple[str, int], default: int = agent_pb2.TOOL_POLICY_UNSPECIFIED) -> agent_pb2.Tools:
    return agent_pb2.Tools(rules=[agent_pb2.ToolRule(tool=t, policy=p) for t, p in pairs], default_policy=default)


async def _start(
    route: ModelRoute,
    sandbox: Sandbox,
    driver: LocalSandboxDriver,
    agent: agent_pb2.AgentSpec,
    *,
    mode: str = "bypassPermissions",
    broker: RecordingBroker | None = None,
) -> ClaudeCodeSession:
    config = EngineConfig(
        permission_mode=mode,
        env=route.env("agent-config"),
        interactions=broker if broker is not None else RecordingBroker(),
        agent_config=AgentConfig.from_proto(agent),
    )
    return await ClaudeCodeAdapter().start(sandbox, driver, config)


async def _exchange(session: ClaudeCodeSession, text: str, permission_mode: str = "") -> list[EngineOutput]:
    await session.send(text, permission_mode)
    outputs: list[EngineOutput] = []
    async with asyncio.timeout(TURN_TIMEOUT):
        async for output in session.outputs():
            outputs.append(output)
            if output.ends_turn:
                await session.end_turn_mode()
                return outputs
    raise AssertionError("the engine stopped before the turn's result")


def _result(outputs: list[EngineOutput]) -> str:
    return str(outputs[-1].payload.get("result"))


def _reported(outputs: list[EngineOutput]) -> tuple[str, list[str]]:
    """The system prompt and the tools the offline model says it received."""
    text = _result(outputs)
    assert text.startswith("System prompt: "), text
    prompt, _, tools = text.removeprefix("System prompt: ").rpartition("\nTools: ")
    return prompt, tools.split(", ")


async def _report(route: ModelRoute, sandbox: Sandbox, driver: LocalSandboxDriver, agent: agent_pb2.AgentSpec):
    session = await _start(route, sandbox, driver, agent)
    try:
        return _reported(await _exchange(session, "report: setup"))
    finally:
        await session.close()


async def test_an_appended_system_prompt_follows_the_engines_own_and_a_replacing_one_is_used_instead(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    own, every_tool = await _report(model_route, sandbox, driver, spec())
    appended = "Always answer in French.\nSign every answer with 'Le Robot'."
    with_appended, _ = await _report(
        model_route, sandbox, driver, spec(system_prompt=agent_pb2.SystemPrompt(append=appended))
    )
    replacing = "You are a terse release-notes writer."
    replaced, _ = await _report(
        model_route, sandbox, driver, spec(system_prompt=agent_pb2.SystemPrompt(replace=replacing))
    )

    assert appended not in own and len(own) > 2000  # the engine's own, long prompt ...
    assert with_appended.endswith(appended) and len(with_appended) > 2000  # ... with the agent's after it
    assert replaced.endswith(replacing)
    # Only the SDK's short preamble (a billing header, one line of identity) is left of the engine's.
    assert len(replaced) < len(replacing) + 300
    assert {"Bash", "Read", "Write", "Edit"} <= set(every_tool)  # what a session without an agent is offered


async def test_only_the_enabled_tools_are_offered_and_another_cannot_be_called(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    session = await _start(model_route, sandbox, driver, spec(tools=agent_pb2.Tools(enabled=["Bash", "Read"])))
    try:
        _, offered = _reported(await _exchange(session, "report: setup"))
        refused = await _exchange(session, 'tool: Write {"file_path": "/workspace/w.txt", "content": "no"}')
    finally:
        await session.close()
    assert {"Bash", "Read"} <= set(offered) and not {"Write", "Edit"} & set(offered)
    assert _result(refused).startswith("The command was denied:")
    assert not (sandbox.workspace / "w.txt").exists()


@pytest.mark.parametrize("mode", ["bypassPermissions", "acceptEdits"])
async def test_ask_on_bash_asks_whatever_the_mode_while_read_runs_freely(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox, mode: str
) -> None:
    (sandbox.workspace / "notes.txt").write_text("read me\n")
    broker = RecordingBroker(ToolDecision(allow=False, message="Not now."), ToolDecision(allow=True))
    agent = spec(tools=rules(("Bash", ASK), ("Read", ALLOW)))
    session = await _start(model_route, sandbox, driver, agent, mode=mode, broker=broker)
    try:
        read = await _exchange(session, 'tool: Read {"file_path": "/workspace/notes.txt"}')
        assert broker.requests == [] and "read me" in _result(read)

        denied = await _exchange(session, "run: touch asked.txt")
        assert [r.tool_name for r in broker.requests] == ["Bash"]
        assert _result(denied) == "The command was denied: Not now."
        assert not (sandbox.workspace / "asked.txt").exists()

        await _exchange(session, "run: touch asked.txt")
    finally:
        await session.close()
    assert [r.tool_name for r in broker.requests] == ["Bash", "Bash"]
    assert (sandbox.workspace / "asked.txt").exists()


async def test_allow_runs_without_asking_in_the_default_mode(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    broker = RecordingBroker(ToolDecision(allow=False, message="No."))
    agent = spec(tools=rules(("Bash", ASK), default=ALLOW))
    session = await _start(model_route, sandbox, driver, agent, mode="default", broker=broker)
    try:
        await _exchange(session, 'tool: Write {"file_path": "/workspace/allowed.txt", "content": "yes"}')
        assert broker.requests == []  # "default" would have asked
        await _exchange(session, "run: touch asked.txt")
    finally:
        await session.close()
    assert (sandbox.workspace / "allowed.txt").read_text() == "yes"
    assert [r.tool_name for r in broker.requests] == ["Bash"] and not (sandbox.workspace / "asked.txt").exists()


@pytest.mark.parametrize(
    ("session_mode", "message_mode"),
    [("bypassPermissions", ""), ("default", "bypassPermissions"), ("acceptEdits", "")],
)
async def test_deny_on_write_refuses_it_whatever_the_mode(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox, session_mode: str, message_mode: str
) -> None:
    broker = RecordingBroker(ToolDecision(allow=True))
    agent = spec(tools=rules(("Write", DENY), ("Bash", ALLOW)))
    session = await _start(model_route, sandbox, driver, agent, mode=session_mode, broker=broker)
    try:
        denied = await _exchange(
            session, 'tool: Write {"file_path": "/workspace/denied.txt", "content": "no"}', message_mode
        )
        ran = await _exchange(session, "run: touch allowed.txt", message_mode)
    finally:
        await session.close()
    assert not (sandbox.workspace / "denied.txt").exists()
    assert "Write is denied by the agent's policy." in _result(denied)
    assert broker.requests == []  # refused without asking anyone
    assert (sandbox.workspace / "allowed.txt").exists() and "touch allowed.txt" in _result(ran)


async def test_a_pattern_rule_matches_and_the_first_matching_rule_decides(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    agent = spec(tools=rules(("Write", ALLOW), ("*", DENY)))
    session = await _start(model_route, sandbox, driver, agent)
    try:
        await _exchange(session, 'tool: Write {"file_path": "/workspace/first.txt", "content": "ok"}')
        denied = await _exchange(session, "run: touch matched.txt")
    finally:
        await session.close()
    assert (sandbox.workspace / "first.txt").exists() and not (sandbox.workspace / "matched.txt").exists()
    assert "Bash is denied by the agent's policy." in _result(denied)


async def test_max_turns_ends_a_message_after_that_many_model_round_trips_and_the_next_message_runs(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    session = await _start(model_route, sandbox, driver, spec(limits=agent_pb2.Limits(max_turns=2)))
    try:
        cut = await _exchange(session, "steps: 3")
        whole = await _exchange(session, "steps: 1")  # two round trips: a Bash step, then the answer
    finally:
        await session.close()
    assert cut[-1].payload["subtype"] == "error_max_turns" and cut[-1].payload["is_error"] is True
    assert whole[-1].payload["subtype"] == "success" and _result(whole) == "Finished 1 steps."


async def test_a_prestarted_engine_refuses_a_session_with_an_agent_configuration(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    # As the warm pool starts it: the default mode, no configuration.
    warm = await _start(model_route, sandbox, driver, spec())
    try:
        configured = EngineConfig(
            permission_mode="default",
            interactions=RecordingBroker(),
            agent_config=AgentConfig.from_proto(spec(tools=rules(("Write", DENY)))),
        )
        with pytest.raises(EngineError, match="another agent configuration"):
            await warm.adopt(sandbox, configured)
        # A session without one takes it on (in its own mode).
        await warm.adopt(sandbox, EngineConfig(permission_mode="default", interactions=RecordingBroker()))
        assert warm.permission_mode == "default"
    finally:
        await warm.close()


async def test_an_engine_started_with_an_agent_configuration_is_adopted_by_a_session_with_that_one_only(
    model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    # As the warm pool starts it for an agent version: the default mode, the version's configuration.
    version = spec(tools=rules(("Write", DENY)))
    warm = await _start(model_route, sandbox, driver, version)
    try:
        other = EngineConfig(
            interactions=RecordingBroker(), agent_config=AgentConfig.from_proto(spec(tools=rules(("Read", DENY))))
        )
        with pytest.raises(EngineError, match="another agent configuration"):
            await warm.adopt(sandbox, other)
        with pytest.raises(EngineError, match="another agent configuration"):
            await warm.adopt(sandbox, EngineConfig(interactions=RecordingBroker()))
        broker = RecordingBroker()
        same = EngineConfig(
            permission_mode="default", interactions=broker, agent_config=AgentConfig.from_proto(version)
        )
        await warm.adopt(sandbox, same)

        outputs = [o async for o in warm.run_turn('tool: Write {"file_path": "/workspace/w.txt", "content": "x"}')]

        assert warm.permission_mode == "default"
        assert "Write is denied by the agent's policy" in json.dumps([o.payload for o in outputs])
        assert not (sandbox.workspace / "w.txt").exists()
    finally:
        await warm.close()
