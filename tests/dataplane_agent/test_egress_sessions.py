"""A session's network policy reaches the egress proxy with its runtime: registered at start from
StartRuntime.environment, kept in the agent's state for a restarted agent, forgotten at destruction;
only a session with network access gets the proxy's variables."""

from __future__ import annotations

from pathlib import Path

from astrabox.environments.v1 import environment_pb2 as env_pb
from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.routes.egress.bindings import NoBindings
from dataplane_agent.routes.egress.policy import Mode
from dataplane_agent.routes.egress.proxy import EgressProxy
from tests.dataplane_agent.fakes import (
    DirectorySandboxDriver,
    ScriptedEngine,
    deliver,
    result_turn,
    running_agent,
    start,
)


def _environment(mode: int, *hosts: str) -> pb.RuntimeEnvironment:
    network = env_pb.NetworkPolicy(mode=mode, allowed_hosts=list(hosts))
    return pb.RuntimeEnvironment(
        environment_id="env-1", name="web", version=2, spec=env_pb.EnvironmentSpec(network=network)
    )


async def test_a_sessions_policy_is_registered_at_start_kept_across_a_restart_and_forgotten_at_destruction(
    tmp_path: Path,
) -> None:
    engine, driver = ScriptedEngine(result_turn("eng-1")), DirectorySandboxDriver(tmp_path / "sandboxes")
    first = EgressProxy(tmp_path / "egress", NoBindings())
    async with running_agent(tmp_path, engine, driver, egress=first) as agent:
        await agent.command("s-1", **start(environment=_environment(env_pb.NETWORK_MODE_LIMITED, "pypi.org")))
        await agent.command("s-2", **start())
        limited = first.policy("s-1")
        assert limited.mode is Mode.LIMITED and limited.refusal("pypi.org", 443) is None
        assert first.policy("s-2").mode is Mode.NONE
        env_1 = dict(engine.sessions[0].config.env)
        env_2 = dict(engine.sessions[1].config.env)
        assert env_1["HTTPS_PROXY"] == first.env("s-1")["HTTPS_PROXY"] and env_1["NO_PROXY"] == "127.0.0.1"
        assert "HTTPS_PROXY" not in env_2 and "HTTP_PROXY" not in env_2

    # A restarted agent has a new proxy (new tokens): the policy comes back from its state before
    # anything of the session runs, and the next engine gets the new proxy's credentials.
    second = EgressProxy(tmp_path / "egress", NoBindings())
    async with running_agent(tmp_path, engine, driver, egress=second) as agent:
        assert second.policy("s-1").mode is Mode.LIMITED
        await agent.command("s-1", **deliver("t-1"))
        await agent.wait_for("s-1", "ResultMessage")
        assert engine.last.config.env["HTTPS_PROXY"] == second.env("s-1")["HTTPS_PROXY"]
        assert second.env("s-1")["HTTPS_PROXY"] != env_1["HTTPS_PROXY"]
        done = await agent.command("s-1", destroy_runtime=pb.DestroyRuntime(reason="archived"))
        assert not done.HasField("error")
        assert second.policy("s-1").mode is Mode.NONE and second.env("s-1") == {}


async def test_a_session_whose_start_failed_has_no_way_out(tmp_path: Path) -> None:
    engine, driver = ScriptedEngine(fail_start="no CLI found"), DirectorySandboxDriver(tmp_path / "sandboxes")
    proxy = EgressProxy(tmp_path / "egress", NoBindings())
    async with running_agent(tmp_path, engine, driver, egress=proxy) as agent:
        await agent.command("s-1", **start(environment=_environment(env_pb.NETWORK_MODE_UNRESTRICTED)))
        assert "runtime_start_failed" in [o.WhichOneof("body") for o in await agent.outputs("s-1")]
        assert proxy.policy("s-1").mode is Mode.NONE and proxy.env("s-1") == {}
