"""A session's git repository at the start of its runtime, in a real local sandbox: cloned as the
sandbox's user before RuntimeStarted, once per workspace; a clone that fails fails the start with
git's own message, and no sandbox is left behind."""

from __future__ import annotations

import subprocess
from pathlib import Path

from astrabox.environments.v1 import environment_pb2 as env_pb
from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.runtimes.repository import scrub
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from tests.dataplane_agent.fakes import ScriptedEngine, kinds, result_turn, running_agent, start
from tests.support.git_server import make_repository, serve


def test_user_information_git_echoes_is_scrubbed() -> None:
    said = "fatal: unable to access 'http://u:hunter2@h/r.git/': proxy http://astrabox:tok@127.0.0.1:41801 refused"
    assert scrub(said) == "fatal: unable to access 'http://***@h/r.git/': proxy http://***@127.0.0.1:41801 refused"


async def test_a_repository_the_sandbox_cannot_reach_fails_the_start_with_gits_message(
    tmp_path: Path, sandbox_root: Path, bwrap: str
) -> None:
    """With no network (the built-in environment), the clone fails, and says why."""
    repository = make_repository(tmp_path / "served")
    engine = ScriptedEngine(result_turn())
    driver = LocalSandboxDriver(sandbox_root, bwrap=bwrap)
    with serve(tmp_path / "served") as served:
        source = env_pb.GitSource(url=f"http://localhost:{served.port}/{repository.name}", ref="main")
        async with running_agent(tmp_path / "agent", engine, driver) as agent:
            ack = await agent.command("s-1", **start(git_source=source))
            assert not ack.HasField("error")
            outputs = await agent.wait_for("s-1", "runtime_start_failed")
            assert await agent.state.sessions() == []
    assert kinds(outputs) == ["startup_phase", "runtime_start_failed"]
    reason = outputs[-1].runtime_start_failed.reason
    assert reason.startswith(f"git could not clone http://localhost:{served.port}/project.git at main: ")
    assert "fatal: unable to access" in reason
    assert engine.sessions == []  # no engine started for a session without its repository
    assert served.requests == []  # nothing left the sandbox
    assert not any(sandbox_root.iterdir())


async def test_a_workspace_that_holds_the_repository_already_is_left_as_it_is(
    tmp_path: Path, sandbox_root: Path, bwrap: str
) -> None:
    """A start again (after an idle stop, a retried start) does not clone over the session's work."""
    engine = ScriptedEngine(result_turn())
    driver = LocalSandboxDriver(sandbox_root, bwrap=bwrap)
    source = env_pb.GitSource(url="http://localhost:9/unreachable.git", directory="src")
    async with running_agent(tmp_path / "agent", engine, driver) as agent:
        sandbox = await driver.create(agent.runtimes._launcher.spec("s-1"))
        work = sandbox.workspace / "src"
        work.mkdir()
        subprocess.run(["git", "init", "-q", str(work)], check=True)
        (work / "mine.txt").write_text("the session's own work\n")
        ack = await agent.command("s-1", **start(git_source=source))
        assert not ack.HasField("error")
        outputs = await agent.wait_for("s-1", "runtime_started")
        assert "repository" not in [o.startup_phase.phase for o in outputs if o.HasField("startup_phase")]
        assert (work / "mine.txt").read_text() == "the session's own work\n"


async def test_a_start_of_a_session_this_agent_holds_already_clones_nothing(
    tmp_path: Path, sandbox_root: Path, bwrap: str
) -> None:
    """The control plane sends the repository with every start, for a sandbox made anew elsewhere;
    a workspace this agent still holds is the session's own, even one whose code removed .git."""
    engine = ScriptedEngine(result_turn())
    driver = LocalSandboxDriver(sandbox_root, bwrap=bwrap)
    source = env_pb.GitSource(url="http://localhost:9/unreachable.git")
    async with running_agent(tmp_path / "agent", engine, driver) as agent:
        assert not (await agent.command("s-1", **start())).HasField("error")
        await agent.wait_for("s-1", "runtime_started")
        [record] = await agent.state.sessions()
        (record.sandbox.workspace / "notes.txt").write_text("the session's own work\n")
        await agent.command("s-1", stop_runtime=pb.StopRuntime(reason="idle"))
        assert not (await agent.command("s-1", **start(git_source=source))).HasField("error")
        outputs = await agent.wait_for("s-1", "runtime_started", 2)
    assert "runtime_start_failed" not in kinds(outputs)
    assert "repository" not in [o.startup_phase.phase for o in outputs if o.HasField("startup_phase")]
    assert sorted(p.name for p in record.sandbox.workspace.iterdir()) == ["notes.txt"]
