"""`astrabox run`'s starting files read from its command line: --repo URL[@REF] (the ref after the
first '@' of the path, an '@' before the host left to the control plane to refuse), --repo-dir and
--upload."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from astrabox.environments.v1.environment_pb2 import GitSource
from astrabox.starting_files import StartingFiles, add_arguments, repo_reference


def parsed(*argv: str) -> StartingFiles:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return StartingFiles.from_args(parser.parse_args(argv))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://127.0.0.1:8080/project.git", ("http://127.0.0.1:8080/project.git", "")),
        ("https://git.example.com/a/b.git@v1.0", ("https://git.example.com/a/b.git", "v1.0")),
        ("https://git.example.com/b.git@feature/login", ("https://git.example.com/b.git", "feature/login")),
        ("https://u:p@git.example.com/b.git", ("https://u:p@git.example.com/b.git", "")),
    ],
)
def test_a_repo_reference_splits_at_the_paths_at_sign(text: str, expected: tuple[str, str]) -> None:
    assert repo_reference(text) == expected


@pytest.mark.parametrize("text", ["project.git", "https://h/b.git@", "/srv/git/b.git"])
def test_what_is_not_url_at_ref_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        repo_reference(text)


def test_the_options_make_the_git_source_and_the_upload(tmp_path: Path) -> None:
    files = parsed("--repo", "http://h/r.git@main", "--repo-dir", "src", "--upload", str(tmp_path))
    assert files == StartingFiles(GitSource(url="http://h/r.git", ref="main", directory="src"), str(tmp_path))
    assert parsed() == StartingFiles()
    with pytest.raises(SystemExit, match="--repo-dir needs --repo"):
        parsed("--repo-dir", "src")
    with pytest.raises(SystemExit, match="not a directory"):
        parsed("--upload", str(tmp_path / "missing"))
