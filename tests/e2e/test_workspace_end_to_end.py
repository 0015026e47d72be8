"""Workspace files and commands through the public API, on the real stack:
a repository uploaded, listed, used with git, downloaded byte for byte; escapes refused."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from tests.support.archives import unpack

pytestmark = pytest.mark.e2e


def make_repository(root: Path) -> Path:
    repo = root / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "README.md").write_text("# demo\n")
    (repo / "src" / "data.bin").write_bytes(os.urandom(300_000))
    git = ["git", "-c", "user.email=a@b", "-c", "user.name=t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "first"], cwd=repo, check=True)
    return repo


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


async def test_a_repository_round_trips_through_the_api(client: AstraBoxClient, stack, tmp_path: Path):
    session = await client.create_session()
    sid = (await client.wait_for_state(session.session_id, ["READY"], timeout=120)).session_id
    repo = make_repository(tmp_path)

    written = await client.upload_directory(sid, repo, path="repo")
    assert written.entries >= 5 and written.bytes >= 300_000
    assert {e.name for e in await client.list_workspace(sid, "repo")} == {".git", "README.md", "src"}

    result = await client.run_command(sid, "cd repo && ls && git status --short --branch && git log --oneline")
    assert result.exit_code == 0, result.stderr
    assert b"README.md" in result.stdout and b"## main" in result.stdout and b"first" in result.stdout
    failed = await client.run_command(sid, "echo nope >&2; exit 7")
    assert (failed.exit_code, failed.stderr) == (7, b"nope\n")

    archive = await client.download_archive(sid, "repo")
    out = tmp_path / "out"
    unpack(archive, out)
    downloaded, original = files(out / "repo"), files(repo)
    # `git status` refreshes the stat cache in .git/index; every other byte is unchanged.
    downloaded.pop(".git/index"), original.pop(".git/index")
    assert downloaded == original

    await client.run_command(sid, "ln -s /etc escape")
    for path, reason in (
        ("../", "PATH_OUTSIDE_WORKSPACE"),
        ("escape", "PATH_OUTSIDE_WORKSPACE"),
        ("missing", "PATH_NOT_FOUND"),
    ):
        with pytest.raises(AstraBoxError) as refused:
            await client.list_workspace(sid, path)
        assert refused.value.reason == reason
