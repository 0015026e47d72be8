"""A small HTTP MCP server for the tests (standard library only): the tools of tests/support/mcp_server.py
over the Streamable HTTP transport's JSON subset, behind a bearer credential.

    python -m tests.support.http_mcp_server      (run from the repository's root, or with it on PYTHONPATH)

It listens on 127.0.0.1 on a free port and prints `listening on <port>` once ready. Every request
must carry `Authorization: Bearer <$MCP_TEST_SECRET>`, else it answers 401. A POST carries one
JSON-RPC message: a request is answered with its JSON response, a notification with 202; a GET (the
optional event stream) and a DELETE (ending a session) answer 405, which the transport allows. Each
tool call is appended to `mcp-calls.log` in `$MCP_TEST_DIR` (default: its working directory), and
each request's outcome ("authorized" or "refused") to `mcp-requests.log` there.
"""

from __future__ import annotations

import hmac
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support.mcp_server import answer

_MAX_BODY = 1024 * 1024


class _Handler(BaseHTTPRequestHandler):
    secret = ""

    def do_POST(self) -> None:
        if not self._authorized():
            return
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= _MAX_BODY:
            self._reply(400, b'{"error": "a JSON-RPC message is expected"}')
            return
        try:
            message = json.loads(self.rfile.read(length))
        except ValueError:
            self._reply(400, b'{"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "parse error"}}')
            return
        response = answer(message) if isinstance(message, dict) else None
        if response is None:
            self._reply(202, b"")
            return
        self._reply(200, json.dumps(response).encode())

    def do_GET(self) -> None:
        if self._authorized():
            self._reply(405, b"")

    def do_DELETE(self) -> None:
        if self._authorized():
            self._reply(405, b"")

    def _authorized(self) -> bool:
        given = self.headers.get("Authorization") or ""
        ok = hmac.compare_digest(given.encode(), f"Bearer {self.secret}".encode())
        with open("mcp-requests.log", "a", encoding="utf-8") as requests:
            requests.write(f"{self.command} {'authorized' if ok else 'refused'}\n")
        if not ok:
            self._reply(401, b'{"error": "a valid bearer credential is required"}')
        return ok

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        if body:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    _Handler.secret = os.environ["MCP_TEST_SECRET"]
    os.chdir(os.environ.get("MCP_TEST_DIR", "."))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    sys.stdout.write(f"listening on {server.server_address[1]}\n")
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
