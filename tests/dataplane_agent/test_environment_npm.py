"""An environment's npm packages come from the npm registry only: a package whose dependency is a git
repository, a tarball URL or a tarball served elsewhere fails the build, naming it and the URL, and
nothing of it is fetched or installed. The real npm, against a registry served on loopback (its
packuments and tarballs made here), with the host's npm configuration set aside (HOME)."""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import shutil
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dataplane_agent.environments.downloads import download
from dataplane_agent.environments.packages import Packages
from dataplane_agent.environments.steps import LayerBuildError

pytestmark = pytest.mark.skipif(shutil.which("npm") is None, reason="needs npm")


def _tarball(name: str, version: str, dependencies: dict[str, str]) -> bytes:
    files = {
        "package/package.json": json.dumps({"name": name, "version": version, "dependencies": dependencies}),
        "package/index.js": f"module.exports = {name!r};\n",
    }
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        for path, text in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return data.getvalue()


@dataclass
class Server:
    """An HTTP server on loopback serving `files` by path, and the paths asked for."""

    files: dict[str, bytes] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)
    url: str = ""

    def publish(self, name: str, dependencies: dict[str, str], tarball_at: Server | None = None) -> None:
        """`name` 1.0.0 on this registry, its tarball here or on `tarball_at`."""
        body = _tarball(name, "1.0.0", dependencies)
        host = tarball_at or self
        host.files[f"/{name}/-/{name}-1.0.0.tgz"] = body
        dist = {
            "tarball": f"{host.url}/{name}/-/{name}-1.0.0.tgz",
            "shasum": hashlib.sha1(body).hexdigest(),
            "integrity": "sha512-" + base64.b64encode(hashlib.sha512(body).digest()).decode(),
        }
        version = {"name": name, "version": "1.0.0", "dependencies": dependencies, "dist": dist}
        packument = {"name": name, "dist-tags": {"latest": "1.0.0"}, "versions": {"1.0.0": version}}
        self.files[f"/{name}"] = json.dumps(packument).encode()


def _serve(server: Server) -> Iterator[Server]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            server.asked.append(path)
            body = server.files.get(path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.url = f"http://127.0.0.1:{httpd.server_port}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def elsewhere() -> Iterator[Server]:
    """Another host: where a hostile dependency points."""
    yield from _serve(Server())


@pytest.fixture
def registry(elsewhere: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    for server in _serve(Server()):
        home = tmp_path / "home"
        home.mkdir()
        monkeypatch.setenv("HOME", str(home))  # no user .npmrc, a cache of the test's own
        monkeypatch.setenv("NPM_CONFIG_REGISTRY", server.url + "/")
        server.publish("leaf", {})
        server.publish("good", {"leaf": "^1.0.0"})
        elsewhere.files["/payload.tgz"] = _tarball("payload", "1.0.0", {})
        server.publish("by-url", {"payload": f"{elsewhere.url}/payload.tgz"})
        server.publish("by-git", {"payload": f"git+{elsewhere.url}/payload.git"})
        server.publish("by-github", {"payload": "github:someone/payload"})
        server.publish("wrapper", {"by-url": "^1.0.0", "leaf": "^1.0.0"})
        server.publish("hosted-elsewhere", {}, tarball_at=elsewhere)
        server.publish("depends-on-hosted-elsewhere", {"hosted-elsewhere": "1.0.0"})
        yield server


async def _progress(phase: str, message: str, percent: int) -> None:
    pass


async def test_a_package_and_its_dependencies_from_the_registry_are_installed(registry: Server, tmp_path: Path) -> None:
    await download(Packages(npm=("good",)), tmp_path / "work", _progress)
    modules = tmp_path / "work/node/node_modules"
    assert (modules / "good/index.js").read_text() == "module.exports = 'good';\n"
    assert (modules / "leaf/package.json").is_file()
    lock = json.loads((tmp_path / "work/node/package-lock.json").read_text())
    assert lock["packages"]["node_modules/leaf"]["resolved"] == f"{registry.url}/leaf/-/leaf-1.0.0.tgz"


@pytest.mark.parametrize(
    ("entry", "names"),
    [
        ("by-url", ("by-url", "payload", "{elsewhere}/payload.tgz")),
        ("wrapper", ("by-url", "payload", "{elsewhere}/payload.tgz")),  # two levels down
        ("by-git", ("by-git", "payload", "git+{elsewhere}/payload.git")),
        ("by-github", ("by-github", "payload", "github:someone/payload")),
        ("depends-on-hosted-elsewhere", ("hosted-elsewhere", "{elsewhere}/hosted-elsewhere/-/")),
    ],
)
async def test_a_dependency_from_anywhere_but_the_registry_fails_the_build_and_nothing_is_installed(
    registry: Server, elsewhere: Server, tmp_path: Path, entry: str, names: tuple[str, ...]
) -> None:
    with pytest.raises(LayerBuildError) as failed:
        await download(Packages(npm=(entry,)), tmp_path / "work", _progress)
    message = str(failed.value)
    assert message.startswith("npm: ")
    for name in names:
        assert name.format(elsewhere=elsewhere.url) in message, message
    assert "not from the npm registry" in message or "not to the npm registry" in message
    assert f"({registry.url}/)" in message
    assert "nothing was installed" in message
    assert elsewhere.asked == []  # not even fetched to read its manifest
    assert not (tmp_path / "work/node/node_modules").exists()
