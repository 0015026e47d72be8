"""`astrabox run` with starting files, as a user runs it (the real CLI, a real stack, the offline
model): `--upload DIR` puts a local directory in the workspace before the prompt; `--repo` names a
git repository the agent clones before the first turn, a source it must not clone is refused with
one line and no session, and a clone that fails fails the session with git's own message."""

from __future__ import annotations

from pathlib import Path

import pytest

from astrabox.client import AstraBoxClient
from tests.e2e.test_run_with_agent import astrabox
from tests.support.git_server import make_repository, serve
from tests.support.stack import Stack, StartStack

pytestmark = pytest.mark.e2e


async def test_run_uploads_a_directory_before_the_prompt(stack: Stack, tmp_path: Path) -> None:
    (tmp_path / "project" / "docs").mkdir(parents=True)
    (tmp_path / "project" / "docs" / "notes.txt").write_text("uploaded-before-the-first-turn\n")
    done = astrabox(stack, "run", "--upload", str(tmp_path / "project"), "run: cat docs/notes.txt")
    assert done.returncode == 0, done.stderr
    assert "uploaded-before-the-first-turn" in done.stdout


async def test_run_refuses_a_repository_it_must_not_clone_in_one_line(stack: Stack, client: AstraBoxClient) -> None:
    for repo in ("http://user:hunter2@127.0.0.1/r.git", "ftp://h/r.git@main", "http://h/r.git@-upload"):
        refused = astrabox(stack, "run", "--repo", repo, "run: echo never")
        assert (refused.returncode, refused.stdout) == (1, ""), repo
        assert refused.stderr.startswith("astrabox: INVALID_ARGUMENT INVALID_GIT_SOURCE: "), refused.stderr
        assert len(refused.stderr.splitlines()) == 1 and "hunter2" not in refused.stderr
    climbing = astrabox(stack, "run", "--repo", "http://h/r.git", "--repo-dir", "../up", "run: echo never")
    assert "INVALID_GIT_SOURCE" in climbing.stderr and "'..'" in climbing.stderr
    assert (await client.list_sessions()).sessions == []


async def test_a_clone_that_fails_fails_the_session_with_gits_message(
    stack: Stack, client: AstraBoxClient, tmp_path: Path
) -> None:
    """The built-in environment has no network: git says it could not reach the server."""
    repository = make_repository(tmp_path / "served")
    with serve(tmp_path / "served") as served:
        url = f"http://localhost:{served.port}/{repository.name}"
        failed = astrabox(stack, "run", "--repo", f"{url}@v1", "run: echo never")
    assert failed.returncode == 1
    [session] = (await client.list_sessions()).sessions
    assert session.git_source.url == url and session.git_source.ref == "v1"
    assert session.failure_reason.startswith(f"git could not clone {url} at v1: ")
    assert "fatal: unable to access" in session.failure_reason
    assert served.requests == []


async def test_run_starts_with_the_repository_at_its_ref_through_the_proxy(stacks: StartStack, tmp_path: Path) -> None:
    """The issue's "done when": a repository served by the test over git's HTTP protocol, reached
    through the egress proxy of an environment LIMITED to it, checked out at a tag before the turn."""
    repository = make_repository(tmp_path / "served")
    stack = stacks(args=("--egress-allowed-networks", "127.0.0.0/8"))
    with serve(tmp_path / "served") as served:
        (tmp_path / "git.yaml").write_text(
            f'name: git-only\nnetwork:\n  mode: limited\n  allowed_hosts: ["localhost:{served.port}"]\n'
        )
        applied = astrabox(stack, "environments", "apply", "git.yaml", cwd=tmp_path)
        assert applied.returncode == 0, applied.stderr
        url = f"http://localhost:{served.port}/{repository.name}"
        done = astrabox(
            stack,
            "run",
            "--environment",
            "git-only",
            "--repo",
            f"{url}@v1",
            "--repo-dir",
            "app",
            "run: git -C app rev-parse HEAD && cat app/README.md",
        )
    assert done.returncode == 0, done.stderr
    assert repository.first in done.stdout and "first" in done.stdout
    assert "● repository (" in done.stdout  # the startup phase, with its time
    async with AstraBoxClient.connect(stack.address) as client:
        [session] = (await client.list_sessions()).sessions
    assert (session.environment.name, session.git_source.ref, session.git_source.directory) == ("git-only", "v1", "app")
    assert any(line.startswith("GET /project.git/info/refs") for line in served.requests)
