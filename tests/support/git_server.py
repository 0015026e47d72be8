"""A git repository made by a test and served over git's ("dumb") HTTP protocol on loopback.

`make_repository` writes a bare repository with a known history: `main` at the second commit, the
tag `v1` at the first, the branch `feature` one commit past the first, and a commit on no branch
(`detached`) only reachable by its id. `serve` serves a directory of bare repositories with
http.server after `git update-server-info`, and records the request lines and Authorization
headers it saw (the test can tell the clone went to this server, with which credential).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

_IDENTITY = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent",
    "PATH": "/usr/local/bin:/usr/bin:/bin",
}


@dataclass(frozen=True)
class Repository:
    """The bare repository `name` under the served root, and its commits' ids."""

    name: str
    first: str
    second: str
    feature: str
    detached: str


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, env=_IDENTITY, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def _commit(work: Path, name: str, text: str) -> str:
    (work / name).write_text(text)
    _git(work, "add", name)
    _git(work, "commit", "-q", "-m", f"{name}: {text.strip()}")
    return _git(work, "rev-parse", "HEAD")


def make_repository(root: Path, name: str = "project.git") -> Repository:
    """The repository under `root` (a directory `serve` serves), made through a scratch clone."""
    work = root.parent / f"{name}.work"
    work.mkdir(parents=True)
    _git(work, "init", "-q", "-b", "main")
    first = _commit(work, "README.md", "first\n")
    _git(work, "tag", "v1")
    second = _commit(work, "README.md", "second\n")
    _git(work, "checkout", "-q", "-b", "feature", first)
    feature = _commit(work, "feature.txt", "feature\n")
    _git(work, "checkout", "-q", "--detach", first)
    detached = _commit(work, "detached.txt", "detached\n")
    _git(work, "checkout", "-q", "main")
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "clone", "-q", "--bare", str(work), name)
    bare = root / name
    # The detached commit reaches the bare repository under a ref no clone fetches by default.
    _git(work, "push", "-q", str(bare), f"{detached}:refs/keep/detached")
    _git(bare, "update-server-info")
    return Repository(name=name, first=first, second=second, feature=feature, detached=detached)


@dataclass
class Served:
    port: int
    requests: list[str] = field(default_factory=list)
    # Each request's Authorization header ("" without one).
    authorizations: list[str] = field(default_factory=list)


class _Handler(http.server.SimpleHTTPRequestHandler):
    served: Served

    def log_message(self, format: str, *args: object) -> None:
        self.served.requests.append(self.requestline)
        self.served.authorizations.append(self.headers.get("Authorization", ""))


@contextlib.contextmanager
def serve(root: Path) -> Iterator[Served]:
    """`root` served on 127.0.0.1 (a free port) until the block ends."""
    served = Served(port=0)
    handler = functools.partial(type("Handler", (_Handler,), {"served": served}), directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    served.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
