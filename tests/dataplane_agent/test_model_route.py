"""The model route: a sandbox's token in, the real key out, responses streamed back as they come."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import structlog

from dataplane_agent.offline_model import OfflineModel
from dataplane_agent.routes.model import ModelRoute, Upstream
from dataplane_agent.sandboxes.base import MODEL_BASE_URL_INNER

REAL_KEY = "sk-ant-real-key-never-in-a-sandbox-0123456789"


@dataclass
class RecordingUpstream:
    """An HTTP upstream that records each request's headers and streams server-sent events,
    holding back all but the first until `release` is set."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    requests: list[dict[str, str]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    server: asyncio.Server | None = None

    @property
    def base_url(self) -> str:
        assert self.server is not None
        host, port = self.server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while request_line := await reader.readline():
                headers: dict[str, str] = {}
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.decode().partition(":")
                    headers[name.strip().lower()] = value.strip()
                headers[":path"] = request_line.decode().split()[1]
                self.requests.append(headers)
                self.bodies.append(await reader.readexactly(int(headers.get("content-length", "0"))))
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                )
                for number in range(3):
                    if number == 1:
                        await self.release.wait()
                    event = f"event: ping\ndata: {json.dumps({'n': number})}\n\n".encode()
                    writer.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        finally:
            writer.close()


@pytest.fixture
async def recording() -> AsyncIterator[RecordingUpstream]:
    upstream = RecordingUpstream()
    upstream.server = await asyncio.start_server(upstream.serve, "127.0.0.1", 0)
    try:
        yield upstream
    finally:
        upstream.server.close()


@contextlib.asynccontextmanager
async def _route(tmp_path: Path, upstream: Upstream) -> AsyncIterator[ModelRoute]:
    async with ModelRoute(tmp_path / "model-route", upstream) as route:
        yield route


@contextlib.asynccontextmanager
async def _connect(route: ModelRoute) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    # Through the directory's fd: a test's temporary path may be longer than a socket address allows.
    directory = os.open(route.socket.parent, os.O_PATH)
    try:
        reader, writer = await asyncio.open_unix_connection(f"/proc/self/fd/{directory}/{route.socket.name}")
    finally:
        os.close(directory)
    try:
        yield reader, writer
    finally:
        writer.close()


def _request(key_header: str, body: dict, path: str = "/v1/messages") -> bytes:
    data = json.dumps(body).encode()
    head = f"POST {path} HTTP/1.1\r\nhost: {MODEL_BASE_URL_INNER[7:]}\r\ncontent-type: application/json\r\n{key_header}\r\n"
    return (head + f"content-length: {len(data)}\r\n\r\n").encode() + data


async def _response_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    status = int((await asyncio.wait_for(reader.readline(), 10)).split()[1])
    headers = {}
    while (line := await asyncio.wait_for(reader.readline(), 10)) != b"\r\n":
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers


async def _chunk(reader: asyncio.StreamReader) -> bytes:
    size = int(await asyncio.wait_for(reader.readline(), 10), 16)
    data = await asyncio.wait_for(reader.readexactly(size + 2), 10)
    return data[:-2]


async def _json_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> dict:
    if headers.get("transfer-encoding") == "chunked":
        data = b""
        while piece := await _chunk(reader):
            data += piece
        return json.loads(data)
    return json.loads(await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), 10))


async def test_a_streamed_reply_flows_through_and_the_key_is_swapped(
    tmp_path: Path, recording: RecordingUpstream
) -> None:
    with structlog.testing.capture_logs() as logs:
        async with (
            _route(tmp_path, Upstream(recording.base_url, REAL_KEY)) as route,
            _connect(route) as (reader, writer),
        ):
            token = route.token("session-1")
            writer.write(_request(f"x-api-key: {token}", {"stream": True, "messages": []}))

            status, headers = await _response_head(reader)
            first = await _chunk(reader)  # arrives while the upstream still holds the rest back
            recording.release.set()
            rest = [await _chunk(reader), await _chunk(reader), await _chunk(reader)]

    assert status == 200 and headers["content-type"] == "text/event-stream"
    assert b'data: {"n": 0}' in first and [b'"n": 1' in rest[0], b'"n": 2' in rest[1], rest[2]] == [True, True, b""]
    seen = recording.requests[0]
    assert seen["x-api-key"] == REAL_KEY and "authorization" not in seen
    assert seen[":path"] == "/v1/messages" and json.loads(recording.bodies[0]) == {"stream": True, "messages": []}
    assert REAL_KEY not in json.dumps(logs) and token not in json.dumps(logs)


async def test_a_bearer_token_is_accepted_and_an_upstream_path_prefix_kept(
    tmp_path: Path, recording: RecordingUpstream
) -> None:
    recording.release.set()
    async with (
        _route(tmp_path, Upstream(recording.base_url + "/anthropic/", REAL_KEY)) as route,
        _connect(route) as (reader, writer),
    ):
        writer.write(_request(f"authorization: Bearer {route.token('s-2')}", {}, path="/v1/messages?beta=true"))
        status, _ = await _response_head(reader)

    assert status == 200
    assert recording.requests[0][":path"] == "/anthropic/v1/messages?beta=true"
    assert recording.requests[0]["x-api-key"] == REAL_KEY and "authorization" not in recording.requests[0]


@pytest.mark.parametrize(
    "key_header", ["x-api-key: astrabox.session-1.0000", "x-api-key: " + REAL_KEY, "x-other: none"]
)
async def test_anything_but_a_session_token_gets_401(
    tmp_path: Path, recording: RecordingUpstream, key_header: str
) -> None:
    with structlog.testing.capture_logs() as logs:
        async with (
            _route(tmp_path, Upstream(recording.base_url, REAL_KEY)) as route,
            _connect(route) as (reader, writer),
        ):
            writer.write(_request(key_header, {"messages": []}))
            status, headers = await _response_head(reader)
            body = await _json_body(reader, headers)

    assert status == 401 and body == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "invalid x-api-key"},
    }
    assert recording.requests == []
    refused = [entry for entry in logs if entry["event"] == "model_route_refused"]
    assert len(refused) == 1 and key_header.partition(": ")[2] not in json.dumps(logs)


async def test_a_token_is_bound_to_its_session(tmp_path: Path) -> None:
    async with _route(tmp_path, Upstream("http://127.0.0.1:9")) as route:
        token = route.token("alpha")
        assert route.session_of(token) == "alpha"
        assert route.session_of(token.replace("alpha", "beta")) is None
        assert route.env("alpha")["ANTHROPIC_API_KEY"] == token
        assert route.env("alpha")["ANTHROPIC_BASE_URL"] == MODEL_BASE_URL_INNER
        async with _route(tmp_path / "other", Upstream("http://127.0.0.1:9")) as other:
            assert other.session_of(token) is None  # another agent process: another secret


async def test_the_offline_model_answers_through_the_route_on_one_kept_connection(
    tmp_path: Path, offline_model: OfflineModel
) -> None:
    request = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    async with _route(tmp_path, Upstream(offline_model.base_url)) as route, _connect(route) as (reader, writer):
        key = f"x-api-key: {route.token('s-3')}"
        writer.write(_request(key, request))
        status, headers = await _response_head(reader)
        message = await _json_body(reader, headers)
        writer.write(_request(key, {**request, "stream": True}))
        streamed_status, streamed_headers = await _response_head(reader)
        events = (await _json_body_text(reader)).split("\n\n")

    assert status == 200 and message["type"] == "message" and headers["connection"] == "keep-alive"
    assert streamed_status == 200 and streamed_headers["content-type"] == "text/event-stream"
    assert events[0].startswith("event: message_start") and "message_stop" in events[-2]


async def _json_body_text(reader: asyncio.StreamReader) -> str:
    data = b""
    while piece := await _chunk(reader):
        data += piece
    return data.decode()


async def test_an_unreachable_upstream_is_a_502(tmp_path: Path) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    async with (
        _route(tmp_path, Upstream(f"http://127.0.0.1:{port}", REAL_KEY)) as route,
        _connect(route) as (reader, writer),
    ):
        writer.write(_request(f"x-api-key: {route.token('s-4')}", {}))
        status, headers = await _response_head(reader)
        body = await _json_body(reader, headers)

    assert status == 502 and body["error"]["type"] == "api_error" and "unreachable" in body["error"]["message"]


async def test_stopping_removes_the_socket(tmp_path: Path) -> None:
    route = ModelRoute(tmp_path / "model-route", Upstream("http://127.0.0.1:9"))
    await route.start()
    assert route.socket.is_socket() and route.socket.stat().st_mode & 0o777 == 0o666
    await route.stop()
    assert not route.socket.exists()


async def test_a_malformed_request_gets_400_and_the_route_keeps_serving(
    tmp_path: Path, recording: RecordingUpstream
) -> None:
    recording.release.set()
    async with _route(tmp_path, Upstream(recording.base_url, REAL_KEY)) as route:
        async with _connect(route) as (reader, writer):
            writer.write(b"GET /v1/models HTTP/1.1\r\n" + b"x-filler: " + b"a" * 70_000 + b"\r\n\r\n")
            status, _ = await _response_head(reader)
        async with _connect(route) as (reader, writer):
            writer.write(_request(f"x-api-key: {route.token('s-5')}", {}))
            after, _ = await _response_head(reader)

    assert (status, after) == (400, 200)
