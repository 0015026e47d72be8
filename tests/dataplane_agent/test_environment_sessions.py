"""A session's environment on the agent: StartRuntime.environment builds (or finds) the layer first, shown
as the startup phase "environment"; the real CLI in the local sandbox then uses the packages and sees
the variables; a second session shares the layer; a failed build fails the start with the package
manager's own message and holds nothing."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from astrabox.environments.v1 import environment_pb2 as env_pb
from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.claude_code import BUNDLED_CLI, ClaudeCodeAdapter
from dataplane_agent.environments.layers import LayerStore
from dataplane_agent.environments.local_layers import LocalLayers
from dataplane_agent.routes.model import ModelRoute
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from dataplane_agent.state import AgentState
from dataplane_agent.state_database import Database
from tests.dataplane_agent.fakes import (
    DirectorySandboxDriver,
    ScriptedEngine,
    deliver,
    kinds,
    result_turn,
    running_agent,
    start,
)

pytestmark = [pytest.mark.filterwarnings("ignore::claude_agent_sdk.CanUseToolShadowedWarning")]

TURN_TIMEOUT = 120.0


def _environment(spec: env_pb.EnvironmentSpec) -> pb.RuntimeEnvironment:
    digest = hashlib.sha256(spec.packages.SerializeToString(deterministic=True) + spec.setup_script.encode())
    return pb.RuntimeEnvironment(
        environment_id="env-1", name="py-tools", version=1, spec=spec, build_digest=digest.hexdigest()
    )


async def _store(tmp_path: Path, driver: LocalSandboxDriver) -> tuple[LayerStore, Database]:
    db = await Database.open(tmp_path / "layer-uses.db")
    return LayerStore(LocalLayers(tmp_path / "layers", driver, "agent-1"), AgentState(db)), db


@pytest.mark.e2e
async def test_sessions_of_an_environment_use_its_packages_and_share_one_build(
    tmp_path: Path, sandbox_root: Path, bwrap: str, model_route: ModelRoute
) -> None:
    if not BUNDLED_CLI.is_file():
        pytest.skip("claude-agent-sdk has no bundled CLI on this platform")
    driver = LocalSandboxDriver(sandbox_root, bwrap=bwrap)
    layers, db = await _store(tmp_path, driver)
    spec = env_pb.EnvironmentSpec(
        packages=env_pb.Packages(apt=["tree"], pip=["six"]), variables={"SHIP_NAME": "Nautilus"}
    )
    environment = _environment(spec)
    command = "tree --version && python3 -c 'import six; print(six.__name__)' && echo ship=$SHIP_NAME"
    run = f"tool: Bash {json.dumps({'command': command})}"
    try:
        async with running_agent(
            tmp_path / "agent", ClaudeCodeAdapter(), driver, model=model_route, layers=layers
        ) as agent:
            for session in ("s-1", "s-2"):
                begin = pb.StartRuntime(
                    engine="claude_code", permission_mode="bypassPermissions", environment=environment
                )
                assert not (await agent.command(session, start_runtime=begin)).HasField("error")
                outputs = await agent.outputs(session)
                phases = [o.startup_phase.phase for o in outputs if o.HasField("startup_phase")]
                assert phases == ["environment", "sandbox_created", "engine_connected", "ready"], kinds(outputs)
                await agent.command(session, **deliver("t-1", run, "bypassPermissions"))
                outputs = await agent.wait_for(session, "ResultMessage", timeout=TURN_TIMEOUT)
                [result] = [o for o in outputs if o.engine_message.type_name == "ResultMessage"]
                text = str(json.loads(result.engine_message.payload_json)["result"])
                assert "tree v" in text and "six" in text and "ship=Nautilus" in text, text
            assert layers.builds == 1
            record = await agent.state.session("s-2")
            assert pb.RuntimeEnvironment.FromString(record.environment) == environment
            assert await agent.runtimes.layers_in_use() == {environment.build_digest}

        # A new agent process on the same state (a new driver, which knows nothing of the sandbox):
        # the next message starts the engine again, in a sandbox with the same environment.
        again = LocalSandboxDriver(sandbox_root, bwrap=bwrap)
        async with running_agent(
            tmp_path / "agent", ClaudeCodeAdapter(), again, model=model_route, layers=layers
        ) as agent:
            await agent.command("s-2", **deliver("t-2", run, "bypassPermissions"))
            outputs = await agent.wait_for("s-2", "ResultMessage", 2, timeout=TURN_TIMEOUT)
            [result] = [o for o in outputs if o.turn_id == "t-2" and o.engine_message.type_name == "ResultMessage"]
            text = str(json.loads(result.engine_message.payload_json)["result"])
            assert "tree v" in text and "six" in text and "ship=Nautilus" in text, text
            assert layers.builds == 1
    finally:
        await db.close()


async def test_a_failed_build_fails_the_start_with_the_package_managers_message(
    tmp_path: Path, sandbox_root: Path, bwrap: str
) -> None:
    layers, db = await _store(tmp_path, LocalSandboxDriver(sandbox_root, bwrap=bwrap))
    spec = env_pb.EnvironmentSpec(packages=env_pb.Packages(pip=["astrabox-no-such-package-zz"]))
    engine, driver = ScriptedEngine(result_turn()), DirectorySandboxDriver(tmp_path / "sandboxes")
    try:
        async with running_agent(tmp_path / "agent", engine, driver, layers=layers) as agent:
            ack = await agent.command("s-1", **start(environment=_environment(spec)))
            assert not ack.HasField("error")
            [failed] = await agent.outputs("s-1")
            reason = failed.runtime_start_failed.reason
            assert reason.startswith("the environment could not be built: pip: ")
            assert "No matching distribution found for astrabox-no-such-package-zz" in reason
            assert driver.created == [] and engine.sessions == []
            assert await agent.state.sessions() == []
            assert not any((tmp_path / "layers").glob("[0-9a-f]*"))
    finally:
        await db.close()


NIL_SESSION = "00000000-0000-0000-0000-000000000000"


async def test_build_layer_builds_ahead_reports_progress_and_acknowledges_the_outcome(
    tmp_path: Path, sandbox_root: Path, bwrap: str
) -> None:
    layers, db = await _store(tmp_path, LocalSandboxDriver(sandbox_root, bwrap=bwrap))
    good = env_pb.EnvironmentSpec(packages=env_pb.Packages(pip=["six"]))
    bad = env_pb.EnvironmentSpec(packages=env_pb.Packages(pip=["astrabox-no-such-package-zz"]))
    progress: list[env_pb.BuildProgress] = []
    engine, driver = ScriptedEngine(result_turn()), DirectorySandboxDriver(tmp_path / "sandboxes")
    try:
        async with running_agent(tmp_path / "agent", engine, driver, layers=layers, progress=progress) as agent:
            layer = _environment(good)
            build = pb.BuildLayer(spec=good, build_digest=layer.build_digest)
            ack = await agent.command(NIL_SESSION, build_layer=build)
            assert not ack.HasField("error")
            assert (tmp_path / "layers" / layer.build_digest / "python" / "six.py").is_file()
            states = [p.state for p in progress]
            assert states[0] == env_pb.BUILD_STATE_BUILDING and states[-1] == env_pb.BUILD_STATE_READY
            assert {p.phase for p in progress} >= {"pip", "install", "commit", "ready"}
            assert all(p.agent_id == "agent-1" and p.build_digest == layer.build_digest for p in progress)

            # Ready already: acknowledged at once, no second build, READY reported.
            progress.clear()
            assert not (await agent.command(NIL_SESSION, build_layer=build)).HasField("error")
            assert [p.state for p in progress] == [env_pb.BUILD_STATE_READY] and layers.builds == 1

            # A session of the environment starts on the layer the command built.
            assert not (await agent.command("s-1", **start(environment=layer))).HasField("error")
            assert "runtime_started" in kinds(await agent.outputs("s-1")) and layers.builds == 1

            progress.clear()
            failing = pb.BuildLayer(spec=bad, build_digest=_environment(bad).build_digest)
            ack = await agent.command(NIL_SESSION, build_layer=failing)
            assert ack.error.code == 9  # FAILED_PRECONDITION
            assert "No matching distribution found for astrabox-no-such-package-zz" in ack.error.message
            assert progress[-1].state == env_pb.BUILD_STATE_FAILED
            assert "No matching distribution found" in progress[-1].error
    finally:
        await db.close()
