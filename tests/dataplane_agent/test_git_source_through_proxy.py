"""A session's git repository cloned through the egress proxy, in a real local sandbox: the test
serves a repository over git's HTTP protocol on loopback, the session's environment is LIMITED to
that server, and a branch, a tag, a commit on no branch and the default branch are each checked out
before RuntimeStarted (the startup phase "repository" reported); a ref the remote lacks fails the
start with git's message; a server the environment does not allow is refused by the proxy."""

from __future__ import annotations

import subprocess
from pathlib import Path

from astrabox.environments.v1 import environment_pb2 as env_pb
from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.mcp_destinations import parse_networks
from dataplane_agent.routes.egress.bindings import CredentialBinding, NoBindings, Scheme
from dataplane_agent.routes.egress.policy import Mode
from dataplane_agent.routes.egress.proxy import EgressProxy
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from serverkit.host_patterns import parse
from tests.dataplane_agent.fakes import ScriptedEngine, result_turn, running_agent, start
from tests.support.egress import StaticBindings
from tests.support.git_server import make_repository, serve

SECRET = "git-host-token-5b1f0c7e9a"


def _limited_to(port: int, *, bound: bool = False) -> pb.RuntimeEnvironment:
    """An environment LIMITED to localhost:`port`, binding a credential to it when `bound` (in plain
    HTTP, which a loopback host may have)."""
    host = f"localhost:{port}"
    network = env_pb.NetworkPolicy(mode=env_pb.NETWORK_MODE_LIMITED, allowed_hosts=[host])
    spec = env_pb.EnvironmentSpec(network=network)
    if bound:
        spec.credentials.append(
            env_pb.CredentialBinding(credential="git", hosts=["localhost"], port=port, allow_plain_http=True)
        )
    return pb.RuntimeEnvironment(environment_id="e", name="git", version=1, spec=spec)


def _head(workspace: Path) -> str:
    done = subprocess.run(
        ["git", "-c", f"safe.directory={workspace}", "-C", str(workspace), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


async def test_a_branch_a_tag_a_commit_and_the_default_branch_are_checked_out_through_the_proxy(
    tmp_path: Path, sandbox_root: Path, bwrap: str
) -> None:
    repository = make_repository(tmp_path / "served")
    engine = ScriptedEngine(result_turn())
    driver = LocalSandboxDriver(sandbox_root, bwrap=bwrap)
    with serve(tmp_path / "served") as served:
        url = f"http://localhost:{served.port}/{repository.name}"
        cases = {
            "s-branch": ("feature", "", repository.feature),
            "s-tag": ("v1", "src/app", repository.first),
            "s-commit": (repository.detached, "", repository.detached),
            "s-default": ("", "", repository.second),
        }
        async with (
            EgressProxy(tmp_path / "egress", NoBindings(), allowed_networks=parse_networks("127.0.0.0/8")) as proxy,
            running_agent(tmp_path / "agent", engine, driver, egress=proxy) as agent,
        ):
            for session_id, (ref, directory, _) in cases.items():
                source = env_pb.GitSource(url=url, ref=ref, directory=directory)
                ack = await agent.command(session_id, **start(git_source=source, environment=_limited_to(served.port)))
                assert not ack.HasField("error")
            outputs = {sid: await agent.wait_for(sid, "runtime_started") for sid in cases}
            workspaces = {r.session_id: r.sandbox.workspace for r in await agent.state.sessions()}
            heads = {sid: _head(workspaces[sid] / cases[sid][1]) for sid in cases}
            files = sorted(p.name for p in (workspaces["s-branch"]).iterdir())
    for sid, phases in outputs.items():
        assert [o.startup_phase.phase for o in phases if o.HasField("startup_phase")] == [
            "sandbox_created",
            "repository",
            "engine_connected",
            "ready",
        ], sid
    assert heads == {sid: commit for sid, (_, _, commit) in cases.items()}
    assert files == [".git", "README.md", "feature.txt"]
    assert any("/project.git/info/refs" in line for line in served.requests)


async def test_a_missing_ref_or_a_server_not_allowed_fails_the_start_with_the_reason(
    tmp_path: Path, sandbox_root: Path, bwrap: str
) -> None:
    repository = make_repository(tmp_path / "served")
    engine = ScriptedEngine(result_turn())
    driver = LocalSandboxDriver(sandbox_root, bwrap=bwrap)
    with serve(tmp_path / "served") as served:
        url = f"http://localhost:{served.port}/{repository.name}"
        async with (
            EgressProxy(tmp_path / "egress", NoBindings(), allowed_networks=parse_networks("127.0.0.0/8")) as proxy,
            running_agent(tmp_path / "agent", engine, driver, egress=proxy) as agent,
        ):
            allowed = _limited_to(served.port)
            await agent.command("s-ref", **start(git_source=env_pb.GitSource(url=url, ref="nope"), environment=allowed))
            elsewhere = _limited_to(1)
            await agent.command("s-host", **start(git_source=env_pb.GitSource(url=url), environment=elsewhere))
            missing = (await agent.wait_for("s-ref", "runtime_start_failed"))[-1].runtime_start_failed.reason
            refused = (await agent.wait_for("s-host", "runtime_start_failed"))[-1].runtime_start_failed.reason
            assert await agent.state.sessions() == []
            # A session whose start failed keeps no way out.
            assert proxy.policy("s-ref").mode is Mode.NONE and proxy.env("s-ref") == {}
    assert missing == f"git could not clone {url} at nope: fatal: couldn't find remote ref nope"
    assert refused.startswith(f"git could not clone {url}: ")
    assert f"localhost:{served.port} is refused: not in this environment's allowed_hosts" in refused
    assert engine.sessions == []


async def test_the_credential_bound_to_the_git_host_is_added_on_the_way_out_and_kept_out_of_the_sandbox(
    tmp_path: Path, sandbox_root: Path, bwrap: str
) -> None:
    repository = make_repository(tmp_path / "served")
    engine = ScriptedEngine(result_turn())
    driver = LocalSandboxDriver(sandbox_root, bwrap=bwrap)
    with serve(tmp_path / "served") as served:
        url = f"http://localhost:{served.port}/{repository.name}"
        binding = CredentialBinding(
            "git", (parse("localhost"),), Scheme.BEARER, "", SECRET, port=served.port, allow_plain_http=True
        )
        async with (
            EgressProxy(
                tmp_path / "egress",
                StaticBindings({"s-1": [binding]}),
                allowed_networks=parse_networks("127.0.0.0/8"),
            ) as proxy,
            running_agent(tmp_path / "agent", engine, driver, egress=proxy) as agent,
        ):
            source = env_pb.GitSource(url=url, ref="v1")
            await agent.command("s-1", **start(git_source=source, environment=_limited_to(served.port, bound=True)))
            outputs = await agent.wait_for("s-1", "runtime_started")
            [record] = await agent.state.sessions()
            workspace = record.sandbox.workspace
            assert _head(workspace) == repository.first
            kept = [p.read_bytes() for p in workspace.rglob("*") if p.is_file()]
    assert served.authorizations and set(served.authorizations) == {f"Bearer {SECRET}"}
    assert all(SECRET.encode() not in content for content in kept)  # not in .git/config, nor anywhere
    assert all(SECRET.encode() not in o.SerializeToString() for o in outputs)
