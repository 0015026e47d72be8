"""What `astrabox run` puts in a new session's workspace before its first message.

    --repo URL[@REF]   a git repository the agent clones before the first turn (CreateSession's
                       git_source): through the session's network policy, with the credential bound
                       to its host added by the egress proxy, so the URL holds no secret
    --repo-dir DIR     where in the workspace (default: its root)
    --upload DIR       a local directory uploaded into the workspace once the session is ready

REF is a branch, a tag or a commit id; it is what follows the first '@' of the URL's path (an '@'
before the host would be user information, which the control plane refuses).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from astrabox.environments.v1.environment_pb2 import GitSource

__all__ = ["NONE", "StartingFiles", "add_arguments", "repo_reference"]


def repo_reference(text: str) -> tuple[str, str]:
    """`URL` or `URL@REF` as (url, ref); ref empty for the remote's default branch."""
    parts = urlsplit(text)
    if not parts.scheme or not parts.netloc:
        raise argparse.ArgumentTypeError(f"{text!r} is not URL[@REF] (an http:// or https:// URL)")
    path, at, ref = parts.path.partition("@")
    if at and not ref:
        raise argparse.ArgumentTypeError(f"{text!r} has an empty REF after '@'")
    return parts._replace(path=path).geturl(), ref


@dataclass(frozen=True)
class StartingFiles:
    """The files a new session starts with, from `astrabox run`'s options."""

    git_source: GitSource | None = None
    upload: str = ""

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> StartingFiles:
        """From `add_arguments`' options; SystemExit with the reason for a combination that is not one."""
        source = None
        if args.repo is not None:
            url, ref = args.repo
            source = GitSource(url=url, ref=ref, directory=args.repo_dir)
        elif args.repo_dir:
            raise SystemExit("astrabox: --repo-dir needs --repo")
        if args.upload and not os.path.isdir(args.upload):
            raise SystemExit(f"astrabox: --upload {args.upload}: not a directory")
        return cls(git_source=source, upload=args.upload)


NONE = StartingFiles()
"""A session's workspace as the sandbox makes it: empty."""


def add_arguments(run: argparse.ArgumentParser) -> None:
    """`astrabox run`'s --repo, --repo-dir and --upload."""
    run.add_argument(
        "--repo",
        type=repo_reference,
        metavar="URL[@REF]",
        help="clone this git repository (http/https) into the workspace before the first turn, at REF"
        " (a branch, tag or commit; default: the remote's default branch)",
    )
    run.add_argument("--repo-dir", default="", metavar="DIR", help="where in the workspace --repo goes")
    run.add_argument(
        "--upload", default="", metavar="DIR", help="upload this local directory into the workspace before the prompt"
    )
