"""The offline model: an Anthropic-Messages-compatible HTTP endpoint on loopback.

It serves the replies of `scripts.py` so the real Claude Code CLI can run with
no network and no credentials. Plain asyncio streams, HTTP/1.1 with keep-alive;
streaming replies use chunked transfer encoding and server-sent events.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import uuid
from dataclasses import dataclass
from typing import Any

import structlog

from dataplane_agent.offline_model.scripts import Offered, Reply, reply_for
from serverkit.waits import bounded

log = structlog.get_logger(__name__)

MODEL_NAME = "astrabox-offline"
_READ_TIMEOUT = 60.0
_MAX_BODY = 32 * 1024 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 413: "Payload Too Large"}


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class _Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""
    query: str = ""
    keep_alive: bool = True


@dataclass(frozen=True, slots=True)
class ReceivedRequest:
    """A request the model answered (headers, and so credentials, are not kept)."""

    method: str
    path: str
    body: dict[str, Any]


class OfflineModel:
    """Scripted Anthropic Messages API on loopback."""

    def __init__(self, history: int = 200) -> None:
        self._server: asyncio.Server | None = None
        self._base_url = ""
        self._ids = itertools.count(1)
        # Each open connection's task and writer: stop() ends a connection by closing its transport.
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self._received: collections.deque[ReceivedRequest] = collections.deque(maxlen=history)
        self._reported: collections.deque[dict[str, int]] = collections.deque(maxlen=history)
        # The prompt prefixes in the (pretend) prompt cache, newest last.
        self._cached_prefixes: collections.deque[str] = collections.deque(maxlen=16)

    @property
    def received(self) -> list[ReceivedRequest]:
        """The most recent requests, oldest first."""
        return list(self._received)

    @property
    def reported_usage(self) -> list[dict[str, int]]:
        """The usage of the most recent Messages replies, oldest first."""
        return list(self._reported)

    @property
    def base_url(self) -> str:
        if not self._base_url:
            raise RuntimeError("the offline model is not started")
        return self._base_url

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._server = await asyncio.start_server(self._serve_connection, host, port)
        bound_host, bound_port = self._server.sockets[0].getsockname()[:2]
        self._base_url = f"http://{bound_host}:{bound_port}"
        log.info("offline_model_started", base_url=self._base_url)

    async def stop(self) -> None:
        """Stop serving and end every connection (a keep-alive one waiting for its next request too).

        A connection is ended by aborting its transport, so that its handler sees the end of its
        stream and returns: cancelling the handler's task instead would make Python 3.11's asyncio
        print a traceback ("Exception in callback ... CancelledError"), since the done-callback
        asyncio.start_server puts on that task asks a cancelled task for its exception."""
        if self._server is None:
            return
        self._server.close()
        for writer in self._connections.values():
            writer.transport.abort()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=5)
        for task in list(self._connections):  # stuck past the abort: the last resort
            task.cancel()
        with contextlib.suppress(asyncio.TimeoutError):
            await bounded(self._server.wait_closed(), 5)
        self._server = None
        log.info("offline_model_stopped", base_url=self._base_url)

    async def __aenter__(self) -> OfflineModel:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- HTTP ---------------------------------------------------------------

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        try:
            while True:
                try:
                    request = await bounded(_read_request(reader), _READ_TIMEOUT)
                except HttpError as error:
                    await _send_json(writer, error.status, _error_body(error.status, str(error)), keep_alive=False)
                    return
                if request is None:
                    return
                await self._dispatch(request, writer)
                if not request.keep_alive:
                    return
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._connections.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception):
                await bounded(writer.wait_closed(), 1)

    async def _dispatch(self, request: _Request, writer: asyncio.StreamWriter) -> None:
        route = (request.method, request.path.rstrip("/"))
        try:
            body = _json(request) if request.body else {}
        except HttpError:
            body = {}
        self._received.append(ReceivedRequest(request.method, request.path, body))
        try:
            if route == ("POST", "/v1/messages"):
                await self._messages(request, writer)
            elif route == ("POST", "/v1/messages/count_tokens"):
                body = _json(request)
                await _send_json(writer, 200, {"input_tokens": _estimate_tokens(body)}, request.keep_alive)
            elif route == ("GET", "/v1/models"):
                await _send_json(writer, 200, _models_page(), request.keep_alive)
            else:
                log.debug("offline_model_unknown_path", method=request.method, path=request.path)
                await _send_json(
                    writer,
                    404,
                    _error_body(404, f"{request.method} {request.path} is not served here"),
                    request.keep_alive,
                )
        except HttpError as error:
            await _send_json(writer, error.status, _error_body(error.status, str(error)), request.keep_alive)

    async def _messages(self, request: _Request, writer: asyncio.StreamWriter) -> None:
        body = _json(request)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise HttpError(400, "messages: a non-empty list is required")
        reply = self._reply(body)
        message = self._message(body, reply)
        self._reported.append(message["usage"])
        log.debug(
            "offline_model_reply",
            model=body.get("model"),
            stream=bool(body.get("stream")),
            stop_reason=reply.stop_reason,
            tool=reply.tool.name if reply.tool else None,
            command=reply.command,
        )
        if body.get("stream"):
            await _send_stream(writer, message, request.keep_alive)
        else:
            await _send_json(writer, 200, message, request.keep_alive)

    def _reply(self, body: dict[str, Any]) -> Reply:
        # Side requests (titles, summaries, quota checks) come without tools: a short text will do.
        if not body.get("tools"):
            return Reply("AstraBox offline session")
        return reply_for(body["messages"], Offered.in_request(body))

    def _message(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}]
        if reply.tool is not None:
            content.append(
                {"type": "tool_use", "id": self._new_id("toolu"), "name": reply.tool.name, "input": reply.tool.input}
            )
        return {
            "id": self._new_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": str(body.get("model") or MODEL_NAME),
            "content": content,
            "stop_reason": reply.stop_reason,
            "stop_sequence": None,
            "usage": self._usage(body, content),
        }

    def _usage(self, body: dict[str, Any], content: list[dict[str, Any]]) -> dict[str, int]:
        """Tokens as the API would count them, about four characters each: the reply's as output;
        the request's as input, where a prefix the client marked for the prompt cache (its system
        prompt and tools, with `cache_control`) is written to the cache the first time it is seen
        and read from it after."""
        prefix = json.dumps([body.get("system"), body.get("tools")], sort_keys=True)
        cached = _tokens(prefix) if '"cache_control"' in prefix else 0
        seen = bool(cached) and prefix in self._cached_prefixes
        if cached and not seen:
            self._cached_prefixes.append(prefix)
        return {
            "input_tokens": _estimate_tokens(body) + (_tokens(prefix) - cached),
            "output_tokens": _tokens(json.dumps(content)),
            "cache_creation_input_tokens": 0 if seen else cached,
            "cache_read_input_tokens": cached if seen else 0,
        }

    def _new_id(self, prefix: str) -> str:
        # Unique per call and across model restarts (a resumed conversation replays old ids).
        return f"{prefix}_offline_{next(self._ids):04d}_{uuid.uuid4().hex[:12]}"


# -- request parsing ----------------------------------------------------------


async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
    line = await reader.readline()
    if not line:
        return None
    try:
        method, target, version = line.decode("latin-1").split()
    except ValueError:
        raise HttpError(400, "malformed request line") from None
    headers: dict[str, str] = {}
    while True:
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            break
        name, _, value = header.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    path, _, query = target.partition("?")
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" and (version == "HTTP/1.1" or connection == "keep-alive")
    request = _Request(method=method.upper(), path=path, headers=headers, query=query, keep_alive=keep_alive)
    if headers.get("transfer-encoding", "").lower() == "chunked":
        request.body = await _read_chunked(reader)
    elif length := int(headers.get("content-length", "0") or 0):
        if length > _MAX_BODY:
            raise HttpError(413, "request body too large")
        request.body = await reader.readexactly(length)
    return request


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    chunks: list[bytes] = []
    size_total = 0
    while True:
        size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            return b"".join(chunks)
        size_total += size
        if size_total > _MAX_BODY:
            raise HttpError(413, "request body too large")
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)


def _json(request: _Request) -> dict[str, Any]:
    try:
        body = json.loads(request.body or b"{}")
    except json.JSONDecodeError as error:
        raise HttpError(400, f"request body is not JSON: {error}") from None
    if not isinstance(body, dict):
        raise HttpError(400, "request body must be a JSON object")
    return body


def _estimate_tokens(body: dict[str, Any]) -> int:
    return _tokens(json.dumps(body.get("messages", [])))


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


# -- responses -----------------------------------------------------------------


def _error_body(status: int, message: str) -> dict[str, Any]:
    kind = {400: "invalid_request_error", 404: "not_found_error", 413: "request_too_large"}.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _models_page() -> dict[str, Any]:
    model = {
        "type": "model",
        "id": MODEL_NAME,
        "display_name": "AstraBox offline model",
        "created_at": "2025-01-01T00:00:00Z",
    }
    return {"data": [model], "has_more": False, "first_id": MODEL_NAME, "last_id": MODEL_NAME}


def _head(status: int, headers: dict[str, str], keep_alive: bool) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}"]
    headers = {
        **headers,
        "connection": "keep-alive" if keep_alive else "close",
        "request-id": f"req_{uuid.uuid4().hex}",
    }
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _send_json(writer: asyncio.StreamWriter, status: int, body: dict[str, Any], keep_alive: bool) -> None:
    data = json.dumps(body).encode()
    writer.write(_head(status, {"content-type": "application/json", "content-length": str(len(data))}, keep_alive))
    writer.write(data)
    await writer.drain()


async def _send_stream(writer: asyncio.StreamWriter, message: dict[str, Any], keep_alive: bool) -> None:
    headers = {"content-type": "text/event-stream", "cache-control": "no-cache", "transfer-encoding": "chunked"}
    writer.write(_head(200, headers, keep_alive))
    for event in sse_events(message):
        data = f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()
    writer.write(b"0\r\n\r\n")
    await writer.drain()


def sse_events(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The Messages streaming events that spell out `message`."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            events.append(
                {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
            )
            for piece in _pieces(block["text"]):
                events.append(
                    {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}
                )
        else:
            events.append({"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}})
            for piece in _pieces(json.dumps(block["input"])):
                events.append(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    }
                )
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        }
    )
    events.append({"type": "message_stop"})
    return events


def _pieces(text: str, size: int = 24) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]
