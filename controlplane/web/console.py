"""The console's files: the built single-page app shipped in this package (controlplane/web/console,
made from console/ by scripts/build-console), served at / and /assets/<name>.

The files are read once at start into a table; a request names a key of that table or gets 404, so
no request path ever reaches the file system. Every answer carries a Content-Security-Policy that
allows only this origin's scripts, styles and calls: an engine's text that slipped into the page as
markup still could not run.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from controlplane.web.origins import BROWSER_POLICY_HEADERS
from controlplane.web.sign_in import ConsoleSignIn

CONSOLE_DIR = Path(__file__).parent / "console"
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"
)
PAGE_HEADERS = {**BROWSER_POLICY_HEADERS, "Cross-Origin-Opener-Policy": "same-origin"}
# The largest console file read into memory (the built bundle is well under this).
MAX_FILE_BYTES = 16 * 1024 * 1024
NOT_BUILT = (
    "<!doctype html><title>AstraBox</title><p>The console is not built in this installation. "
    "Build it with scripts/build-console; the web API is served here all the same."
)


@dataclass(frozen=True, slots=True)
class _File:
    body: bytes
    content_type: str


def content_security_policy(connect_sources: Sequence[str] = ()) -> str:
    """The page's policy: its own origin only, and the sign-in's token endpoint for calls."""
    if not connect_sources:
        return CONTENT_SECURITY_POLICY
    return CONTENT_SECURITY_POLICY.replace("connect-src 'self'", "connect-src 'self' " + " ".join(connect_sources))


class Console:
    """The console's files, read at start, and its configuration (how people sign in)."""

    def __init__(self, sign_in: ConsoleSignIn, directory: Path = CONSOLE_DIR) -> None:
        self._sign_in = sign_in
        self._files: dict[str, _File] = {}
        if not (directory / "index.html").is_file():
            return
        for path in sorted(directory.rglob("*")):
            if path.is_file() and not path.is_symlink() and path.stat().st_size <= MAX_FILE_BYTES:
                name = path.relative_to(directory).as_posix()
                content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
                self._files[name] = _File(path.read_bytes(), content_type)

    @property
    def built(self) -> bool:
        return "index.html" in self._files

    def add_to(self, app: web.Application) -> None:
        app.router.add_get("/", self.index)
        app.router.add_get("/console/config.json", self.config)
        app.router.add_get("/assets/{name:.+}", self.asset)

    def _headers(self, cache: str) -> dict[str, str]:
        policy = content_security_policy(self._sign_in.connect_sources())
        return {**PAGE_HEADERS, "Content-Security-Policy": policy, "Cache-Control": cache}

    async def index(self, request: web.Request) -> web.StreamResponse:
        await self._sign_in.refresh()  # the policy names the token endpoint once it is known
        page = self._files.get("index.html")
        if page is None:
            return web.Response(text=NOT_BUILT, content_type="text/html", headers=self._headers("no-store"))
        return web.Response(body=page.body, content_type=page.content_type, headers=self._headers("no-cache"))

    async def config(self, request: web.Request) -> web.StreamResponse:
        await self._sign_in.refresh()
        return web.json_response(self._sign_in.config(), headers=self._headers("no-store"))

    async def asset(self, request: web.Request) -> web.StreamResponse:
        found = self._files.get(f"assets/{request.match_info['name']}")
        if found is None:
            return web.Response(status=404, text="not found", headers=self._headers("no-store"))
        # Built asset names carry their content's hash: a changed file has a new name.
        cache = "public, max-age=31536000, immutable"
        return web.Response(body=found.body, content_type=found.content_type, headers=self._headers(cache))
