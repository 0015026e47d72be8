"""The model route: how an engine inside a sandbox reaches the model without ever holding the key.

The agent listens on a unix socket that every sandbox sees at
`/run/astrabox/model.sock` (a relay inside the sandbox turns it into the TCP
base URL the CLI needs). A sandboxed request carries its session's token as its
API key; the route checks the token, replaces it with the real key (or with
none, for the offline model) and forwards the request to the upstream,
streaming the response back as it arrives. The real key lives only in this
process: not in a sandbox's environment, files or processes, nor in the logs.

Tokens are an HMAC of the session id under a secret drawn at start: nothing to
store or revoke, and they stop working when the agent (and so every engine it
launched) restarts. One socket serves every session, so a sandbox prepared
before it has a session (a warm pool) can have the route mounted already.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

import structlog

from dataplane_agent.routes.listener import SandboxSocket
from dataplane_agent.routes.tokens import SessionTokens
from dataplane_agent.sandboxes.base import MODEL_BASE_URL_INNER
from serverkit.waits import bounded

log = structlog.get_logger(__name__)

SOCKET_NAME = "model.sock"
_MAX_HEAD = 64 * 1024
_MAX_BODY = 64 * 1024 * 1024
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer", "upgrade"}
)
_CREDENTIALS = frozenset({"x-api-key", "authorization"})
_REASONS = {
    401: "Unauthorized",
    400: "Bad Request",
    413: "Payload Too Large",
    501: "Not Implemented",
    502: "Bad Gateway",
}


def model_env(base_url: str, api_key: str) -> dict[str, str]:
    """The environment the engine's CLI needs to reach the model and stay quiet."""
    return {
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": api_key,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


class ModelAccess(Protocol):
    """How sessions reach the model (implemented by `ModelRoute`)."""

    @property
    def socket(self) -> Path | None:
        """The host socket every sandbox is given as its way to the model; None: none."""

    def env(self, owner: str) -> Mapping[str, str]:
        """What an engine needs to reach the model: the credential issued to `owner` (a session, or
        a warm-pool sandbox not yet handed to one), never the real key."""

    def hand_over(self, owner: str, session_id: str) -> None:
        """From now on `owner`'s credential is used by `session_id` (a pre-started engine adopted)."""

    def forget(self, session_id: str) -> None:
        """The session is gone from this agent: drop what `hand_over` recorded for it."""


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where the route forwards to, and the key it adds on the way out (empty: none)."""

    base_url: str
    api_key: str = field(default="", repr=False)


@dataclass(frozen=True, slots=True)
class RouteTimeouts:
    """Seconds allowed for each wait of the route."""

    connect: float = 30.0
    # A non-streaming reply's head arrives only once the whole reply is written.
    response: float = 600.0
    # Between two pieces of a streamed body, and for a client's next request on a kept connection.
    idle: float = 600.0


class HttpError(Exception):
    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


@dataclass(slots=True)
class _Head:
    """A request or response head: the start line and the headers in order."""

    start: str
    headers: list[tuple[str, str]]

    def get(self, name: str) -> str:
        return next((value for key, value in self.headers if key.lower() == name), "")

    def chunked(self) -> bool:
        return "chunked" in self.get("transfer-encoding").lower()


class ModelRoute:
    """The agent's side of every sandbox's way to the model."""

    def __init__(self, directory: Path, upstream: Upstream, timeouts: RouteTimeouts = RouteTimeouts()) -> None:
        self._socket = SandboxSocket(directory, SOCKET_NAME, limit=_MAX_HEAD)
        self._upstream = urlsplit(upstream.base_url)
        if self._upstream.scheme not in ("http", "https") or not self._upstream.hostname:
            raise ValueError(f"the model upstream must be an http(s) URL, not {upstream.base_url!r}")
        self._key = upstream.api_key
        self._timeouts = timeouts
        self._tokens = SessionTokens()
        # Credential owner (a warm-pool sandbox's id) -> the session that adopted its engine.
        self._handed_over: dict[str, str] = {}
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._tls = ssl.create_default_context() if self._upstream.scheme == "https" else None

    @property
    def socket(self) -> Path:
        """The unix socket, on the host; its directory holds nothing else."""
        return self._socket.path

    @property
    def upstream(self) -> str:
        return self._upstream.geturl()

    def token(self, owner: str) -> str:
        """The API key the engine of a session (or of a pool sandbox) presents to the route."""
        return self._tokens.token(owner)

    def env(self, owner: str) -> dict[str, str]:
        """What an engine's CLI needs: the in-sandbox base URL and its token, never the real key."""
        return model_env(MODEL_BASE_URL_INNER, self.token(owner))

    def hand_over(self, owner: str, session_id: str) -> None:
        self._handed_over[owner] = session_id

    def forget(self, session_id: str) -> None:
        for owner in [owner for owner, user in self._handed_over.items() if user == session_id]:
            del self._handed_over[owner]

    def session_of(self, token: str) -> str | None:
        """Who uses a token: the session, or the pool sandbox not yet handed to one; None for anything
        the route did not issue."""
        owner = self._tokens.owner_of(token)
        if owner is None:
            return None
        return self._handed_over.get(owner, owner)

    async def start(self) -> None:
        await self._socket.start(self._serve)
        log.info("model_route_started", socket=str(self.socket), upstream=self.upstream, with_key=bool(self._key))

    async def stop(self) -> None:
        if not await self._socket.stop():
            return
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()
        log.info("model_route_stopped", socket=str(self.socket))

    async def __aenter__(self) -> ModelRoute:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- one sandbox connection -------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            keep_alive = True
            while keep_alive:
                try:
                    head = await bounded(_read_head(reader), self._timeouts.idle)
                    if head is None:
                        return
                    keep_alive = await self._handle(head, reader, writer)
                except HttpError as error:
                    await _send_error(writer, error)
                    return
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        except asyncio.CancelledError:  # the route is stopping; the connection ends here
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await bounded(writer.wait_closed(), 1)

    async def _handle(self, head: _Head, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; whether the connection may carry another."""
        method, target, version = _request_line(head)
        session_id = self.session_of(_presented_key(head))
        if session_id is None:
            log.warning("model_route_refused", reason="unknown token", method=method, path=target.partition("?")[0])
            raise HttpError(401, "authentication_error", "invalid x-api-key")
        if method == "CONNECT" or head.get("upgrade"):
            raise HttpError(501, "invalid_request_error", "the model route forwards plain HTTP requests only")
        body = await _read_body(reader, head, self._timeouts.idle)
        client_keeps = _keeps_alive(head, version)
        began = time.monotonic()
        status, keeps = await self._forward(method, target, head, body, writer, client_keeps)
        log.debug(
            "model_route_request",
            session_id=session_id,
            method=method,
            path=target.partition("?")[0],
            status=status,
            ms=int((time.monotonic() - began) * 1000),
        )
        return keeps

    # -- upstream -----------------------------------------------------------------

    async def _forward(
        self, method: str, target: str, head: _Head, body: bytes, writer: asyncio.StreamWriter, client_keeps: bool
    ) -> tuple[int, bool]:
        request = self._upstream_request(method, target, head, body)
        for attempt in (1, 2):
            reused, (up_reader, up_writer) = await self._connection()
            try:
                up_writer.write(request)
                await bounded(up_writer.drain(), self._timeouts.idle)
                response = await bounded(_read_head(up_reader), self._timeouts.response)
                if response is None:
                    raise ConnectionResetError("the upstream closed the connection")
            except (OSError, asyncio.IncompleteReadError) as error:
                up_writer.close()
                if reused and attempt == 1:  # a kept connection the upstream had already dropped
                    continue
                raise HttpError(502, "api_error", f"the model upstream failed: {error}") from error
            except TimeoutError:
                up_writer.close()
                raise HttpError(502, "api_error", "the model upstream did not answer in time") from None
            break
        assert response is not None  # the loop breaks only with a response, else it raised
        try:
            status, upstream_keeps, client_keeps = await self._relay_response(
                method, response, up_reader, up_writer, writer, client_keeps
            )
        except BaseException:
            up_writer.close()
            raise
        if upstream_keeps:
            self._idle.append((up_reader, up_writer))
        else:
            up_writer.close()
        return status, client_keeps

    def _upstream_request(self, method: str, target: str, head: _Head, body: bytes) -> bytes:
        prefix = self._upstream.path.rstrip("/")
        lines = [f"{method} {prefix}{target} HTTP/1.1", f"host: {self._upstream.netloc}"]
        for name, value in head.headers:
            lower = name.lower()
            if (
                lower in _HOP_BY_HOP
                or lower in _CREDENTIALS
                or lower in ("host", "content-length", "transfer-encoding", "expect")
            ):
                continue
            lines.append(f"{name}: {value}")
        if self._key:
            lines.append(f"x-api-key: {self._key}")
        if body or method in ("POST", "PUT", "PATCH"):
            lines.append(f"content-length: {len(body)}")
        lines.append("connection: keep-alive")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    async def _relay_response(
        self,
        method: str,
        response: _Head,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
        writer: asyncio.StreamWriter,
        client_keeps: bool,
    ) -> tuple[int, bool, bool]:
        """Stream one response to the client; (status, upstream reusable, client connection reusable)."""
        status = _status(response)
        while 100 <= status < 200:  # interim responses are not the answer
            following = await bounded(_read_head(up_reader), self._timeouts.response)
            if following is None:
                raise ConnectionResetError("the upstream closed the connection")
            response = following
            status = _status(response)
        no_body = method == "HEAD" or status in (204, 304)
        length = response.get("content-length")
        until_close = not no_body and not response.chunked() and not length
        upstream_keeps = not until_close and response.get("connection").lower() != "close"
        client_keeps = client_keeps and not until_close
        lines = [response.start]
        lines += [f"{name}: {value}" for name, value in response.headers if name.lower() not in _HOP_BY_HOP]
        lines.append(f"connection: {'keep-alive' if client_keeps else 'close'}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        if no_body:
            pass
        elif response.chunked():
            await _copy_chunked(up_reader, writer, self._timeouts.idle)
        elif length:
            await _copy_exactly(up_reader, writer, int(length), self._timeouts.idle)
        else:
            await _copy_until_close(up_reader, writer, self._timeouts.idle)
        return status, upstream_keeps, client_keeps

    async def _connection(self) -> tuple[bool, tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
        while self._idle:
            reader, writer = self._idle.pop()
            if not reader.at_eof() and not writer.is_closing():
                return True, (reader, writer)
            writer.close()
        host = self._upstream.hostname
        assert host is not None
        port = self._upstream.port or (443 if self._tls else 80)
        try:
            return False, await bounded(
                asyncio.open_connection(
                    host, port, ssl=self._tls, server_hostname=host if self._tls else None, limit=_MAX_HEAD
                ),
                self._timeouts.connect,
            )
        except (TimeoutError, OSError) as error:
            raise HttpError(
                502, "api_error", f"the model upstream {self._upstream.netloc} is unreachable: {error or 'timed out'}"
            ) from error


# -- HTTP/1.1 framing -------------------------------------------------------------


async def _read_head(reader: asyncio.StreamReader) -> _Head | None:
    line = await _read_line(reader)
    if not line:
        return None
    start = line.decode("latin-1").rstrip("\r\n")
    headers: list[tuple[str, str]] = []
    size = len(line)
    while True:
        line = await _read_line(reader)
        size += len(line)
        if size > _MAX_HEAD:
            raise HttpError(400, "invalid_request_error", "request head too large")
        if line in (b"\r\n", b"\n"):
            return _Head(start, headers)
        if not line:
            raise asyncio.IncompleteReadError(b"", None)
        name, colon, value = line.decode("latin-1").partition(":")
        if colon:
            headers.append((name.strip(), value.strip()))


async def _read_line(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.readline()
    except ValueError:  # longer than the reader's limit
        raise HttpError(400, "invalid_request_error", "request head too large") from None


def _request_line(head: _Head) -> tuple[str, str, str]:
    parts = head.start.split()
    if len(parts) != 3 or not parts[1].startswith("/"):
        raise HttpError(400, "invalid_request_error", "malformed request line")
    return parts[0].upper(), parts[1], parts[2]


def _status(head: _Head) -> int:
    parts = head.start.split(maxsplit=2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise ConnectionResetError("the upstream sent a malformed status line")
    return int(parts[1])


def _presented_key(head: _Head) -> str:
    if key := head.get("x-api-key"):
        return key
    scheme, _, credentials = head.get("authorization").partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else ""


def _keeps_alive(head: _Head, version: str) -> bool:
    connection = head.get("connection").lower()
    return connection != "close" and (version == "HTTP/1.1" or connection == "keep-alive")


async def _read_body(reader: asyncio.StreamReader, head: _Head, timeout: float) -> bytes:
    if head.chunked():
        chunks: list[bytes] = []
        total = 0
        while True:
            size_line = await bounded(reader.readline(), timeout)
            try:
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
            except ValueError:
                raise HttpError(400, "invalid_request_error", "malformed chunked body") from None
            if size == 0:
                while (await bounded(reader.readline(), timeout)) not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(chunks)
            total += size
            if total > _MAX_BODY:
                raise HttpError(413, "request_too_large", "request body too large")
            chunks.append(await bounded(reader.readexactly(size), timeout))
            await bounded(reader.readexactly(2), timeout)
    length = head.get("content-length")
    if not length:
        return b""
    if not length.isdigit():
        raise HttpError(400, "invalid_request_error", "malformed content-length")
    if int(length) > _MAX_BODY:
        raise HttpError(413, "request_too_large", "request body too large")
    return await bounded(reader.readexactly(int(length)), timeout)


async def _copy_chunked(source: asyncio.StreamReader, sink: asyncio.StreamWriter, timeout: float) -> None:
    """Forward a chunked body chunk by chunk, so each server-sent event reaches the client as it comes."""
    while True:
        size_line = await bounded(source.readline(), timeout)
        if not size_line:
            raise ConnectionResetError("the upstream closed a chunked body early")
        size = int(size_line.split(b";")[0].strip() or b"0", 16)
        sink.write(size_line)
        if size == 0:
            while True:
                trailer = await bounded(source.readline(), timeout)
                sink.write(trailer or b"\r\n")
                if trailer in (b"\r\n", b"\n", b""):
                    await sink.drain()
                    return
        sink.write(await bounded(source.readexactly(size + 2), timeout))
        await sink.drain()


async def _copy_exactly(source: asyncio.StreamReader, sink: asyncio.StreamWriter, length: int, timeout: float) -> None:
    while length > 0:
        data = await bounded(source.read(min(length, 65536)), timeout)
        if not data:
            raise ConnectionResetError("the upstream closed the body early")
        length -= len(data)
        sink.write(data)
        await sink.drain()


async def _copy_until_close(source: asyncio.StreamReader, sink: asyncio.StreamWriter, timeout: float) -> None:
    while data := await bounded(source.read(65536), timeout):
        sink.write(data)
        await sink.drain()


async def _send_error(writer: asyncio.StreamWriter, error: HttpError) -> None:
    body = json.dumps({"type": "error", "error": {"type": error.kind, "message": str(error)}}).encode()
    head = (
        f"HTTP/1.1 {error.status} {_REASONS.get(error.status, 'Error')}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    with contextlib.suppress(ConnectionError):
        writer.write(head.encode("latin-1") + body)
        await bounded(writer.drain(), 5)
