"""The web API (controlplane.web): the control plane's own RPCs over the Connect protocol on a real
HTTP port, called as a browser or curl would, against a real control plane and PostgreSQL."""

from __future__ import annotations

import base64
import dataclasses
import json
import shutil
import ssl
import struct
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from astrabox.client import AstraBoxClient
from controlplane.server import RunningControlPlane, serve
from controlplane.settings import SettingsError
from controlplane.web.connect import ECHO_LIMIT
from controlplane.web.console import CONTENT_SECURITY_POLICY
from tests.controlplane.test_quotas import settings, team
from tests.e2e.test_tls import self_signed

KERNEL = "/astrabox.sessionkernel.v1.SessionKernelService"
ADMIN = "/astrabox.admin.v1.AdminService"
EVIL = "https://evil.example"


@pytest_asyncio.fixture
async def web(plane, database_url: str, bootstrap_key_file: str) -> AsyncIterator[RunningControlPlane]:
    await plane.connect_agent(capacity=1000)
    configured = dataclasses.replace(
        settings(database_url, bootstrap_key_file),
        web_listen="127.0.0.1:0",
        web_origins="https://console.example.com",
    )
    async with serve(configured) as control_plane:
        yield control_plane


@pytest_asyncio.fixture
async def http(web: RunningControlPlane) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(web.web_url) as session:
        yield session


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def reason(error: dict[str, Any]) -> str:
    [info] = [d for d in error.get("details", []) if d["type"] == "google.rpc.ErrorInfo"]
    return str(info["debug"]["reason"])


async def create_session(http: aiohttp.ClientSession, key: str, **fields: Any) -> str:
    body = {"requestId": uuid.uuid4().hex, **fields}
    async with http.post(f"{KERNEL}/CreateSession", json=body, headers=bearer(key)) as response:
        assert response.status == 200, await response.text()
        return str((await response.json())["session"]["sessionId"])


def envelopes(body: bytes) -> list[tuple[int, Any]]:
    """(flags, JSON) of each envelope of a Connect streaming body."""
    found, offset = [], 0
    while offset < len(body):
        flags, length = struct.unpack(">BI", body[offset : offset + 5])
        found.append((flags, json.loads(body[offset + 5 : offset + 5 + length])))
        offset += 5 + length
    return found


def envelope(message: dict[str, Any]) -> bytes:
    data = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(data)) + data


async def test_a_unary_call_in_json_is_the_grpc_call(http: aiohttp.ClientSession, api_key: str) -> None:
    async with http.post(f"{ADMIN}/WhoAmI", json={}, headers=bearer(api_key)) as response:
        assert response.status == 200, await response.text()
        assert response.content_type == "application/json"
        body = await response.json()
    assert body["caller"]["project"]["name"] == "default"
    assert body["caller"]["role"] == "ROLE_ADMIN"


async def test_created_over_http_is_seen_over_grpc(
    web: RunningControlPlane, http: aiohttp.ClientSession, api_key: str
) -> None:
    created = await create_session(http, api_key, labels={"made-by": "browser"})
    async with AstraBoxClient.connect(web.address) as client:
        session = await client.get_session(created)
    assert dict(session.labels) == {"made-by": "browser"}


async def test_errors_are_connect_json_with_the_grpc_error_info(http: aiohttp.ClientSession, api_key: str) -> None:
    missing = "00000000-0000-0000-0000-000000000000"
    async with http.post(f"{KERNEL}/GetSession", json={"sessionId": missing}, headers=bearer(api_key)) as response:
        assert response.status == 404
        error = await response.json()
    assert error["code"] == "not_found"
    assert reason(error) == "SESSION_NOT_FOUND"
    [info] = error["details"]
    assert base64.b64decode(info["value"] + "=" * (-len(info["value"]) % 4))  # the ErrorInfo's bytes, unpadded


async def test_no_key_is_401_and_a_wrong_one_too(http: aiohttp.ClientSession) -> None:
    async with http.post(f"{ADMIN}/WhoAmI", json={}) as response:
        assert response.status == 401
        assert reason(await response.json()) == "CREDENTIALS_MISSING"
    async with http.post(f"{ADMIN}/WhoAmI", json={}, headers=bearer("ab_not-a-key")) as response:
        assert response.status == 401
        assert reason(await response.json()) == "CREDENTIALS_INVALID"


async def test_another_projects_session_is_not_found(
    web: RunningControlPlane, http: aiohttp.ClientSession, api_key: str
) -> None:
    theirs = await create_session(http, api_key)
    _, developer, _ = await team(web.address)
    async with http.post(f"{KERNEL}/GetSession", json={"sessionId": theirs}, headers=bearer(developer)) as response:
        assert response.status == 404
        assert reason(await response.json()) == "SESSION_NOT_FOUND"


async def test_malformed_json_is_invalid_argument_with_a_bounded_echo(
    http: aiohttp.ClientSession, api_key: str
) -> None:
    hostile = '{"sessionId": "' + "x" * 5000 + '"'  # unterminated, and long
    async with http.post(
        f"{KERNEL}/GetSession",
        data=hostile,
        headers={**bearer(api_key), "Content-Type": "application/json"},
    ) as response:
        assert response.status == 400
        error = await response.json()
    assert error["code"] == "invalid_argument"
    assert reason(error) == "MALFORMED_REQUEST"
    assert len(error["message"]) < 3 * ECHO_LIMIT + 300, len(error["message"])


async def test_a_field_over_its_bound_gets_the_grpc_refusal(http: aiohttp.ClientSession, api_key: str) -> None:
    async with http.post(
        f"{KERNEL}/CreateSession",
        json={"requestId": "r1", "labels": {"k": "v" * 100_000}},
        headers=bearer(api_key),
    ) as response:
        assert response.status == 400
        assert (await response.json())["code"] == "invalid_argument"


async def test_an_oversized_body_is_refused_before_it_is_read(http: aiohttp.ClientSession, api_key: str) -> None:
    huge = b'{"labels": {"k": "' + b"v" * (33 * 1024 * 1024) + b'"}}'
    async with http.post(
        f"{KERNEL}/CreateSession", data=huge, headers={**bearer(api_key), "Content-Type": "application/json"}
    ) as response:
        assert response.status == 413
        error = await response.json()
    assert error["code"] == "resource_exhausted"
    assert reason(error) == "REQUEST_TOO_LARGE"


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
async def test_a_form_or_text_body_is_refused(http: aiohttp.ClientSession, api_key: str, content_type: str) -> None:
    """What a cross-site form can send without a preflight is never taken as a call."""
    async with http.post(
        f"{KERNEL}/CreateSession", data="{}", headers={**bearer(api_key), "Content-Type": content_type}
    ) as response:
        assert response.status == 415
        assert reason(await response.json()) == "CONTENT_TYPE_UNSUPPORTED"


async def test_a_forged_origin_is_refused_and_gets_no_cors(http: aiohttp.ClientSession, api_key: str) -> None:
    for origin in (EVIL, "null", "http://127.0.0.1.evil.example", "http://localhost:1"):
        async with http.post(f"{ADMIN}/WhoAmI", json={}, headers={**bearer(api_key), "Origin": origin}) as response:
            assert response.status == 403, origin
            assert reason(await response.json()) == "ORIGIN_NOT_ALLOWED"
            assert "Access-Control-Allow-Origin" not in response.headers
        async with http.options(
            f"{ADMIN}/WhoAmI", headers={"Origin": origin, "Access-Control-Request-Method": "POST"}
        ) as response:
            assert response.status == 403, origin
            assert "Access-Control-Allow-Origin" not in response.headers


async def test_the_consoles_own_and_configured_origins_are_served(
    web: RunningControlPlane, http: aiohttp.ClientSession, api_key: str
) -> None:
    port = web.web_url.rpartition(":")[2]
    for origin in (f"http://127.0.0.1:{port}", f"http://localhost:{port}", "https://console.example.com"):
        async with http.options(
            f"{ADMIN}/WhoAmI",
            headers={
                "Origin": origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization",
            },
        ) as response:
            assert response.status == 204, origin
            assert response.headers["Access-Control-Allow-Origin"] == origin
            assert "authorization" in response.headers["Access-Control-Allow-Headers"]
            assert "Access-Control-Allow-Credentials" not in response.headers  # no cookies, ever
        async with http.post(f"{ADMIN}/WhoAmI", json={}, headers={**bearer(api_key), "Origin": origin}) as response:
            assert response.status == 200, origin
            assert response.headers["Access-Control-Allow-Origin"] == origin


async def test_unknown_methods_and_the_runner_service_are_not_served(http: aiohttp.ClientSession, api_key: str) -> None:
    for path in (f"{KERNEL}/NoSuchMethod", "/astrabox.runner.v1.RunnerService/ResolveCredentials", "/x/y"):
        async with http.post(path, json={}, headers=bearer(api_key)) as response:
            assert response.status == 404, path
            assert (await response.json())["code"] == "unimplemented"
    async with http.get(f"{ADMIN}/WhoAmI", headers=bearer(api_key)) as response:
        assert response.status == 405


async def test_a_server_stream_delivers_events_as_they_are_written(
    web: RunningControlPlane, plane, http: aiohttp.ClientSession, api_key: str
) -> None:
    session = await create_session(http, api_key)
    async with http.post(
        f"{KERNEL}/WatchSessionEvents",
        data=envelope({"sessionId": session}),
        headers={**bearer(api_key), "Content-Type": "application/connect+json"},
    ) as response:
        assert response.status == 200
        assert response.content_type == "application/connect+json"
        first = await read_envelope(response)
        assert int(first["event"]["seq"]) == 1
        await plane.runtime_started(session)  # written after the watch began: arrives on it
        received = [first]
        while received[-1]["event"]["kind"] != "EVENT_KIND_RUNTIME_READY":
            received.append(await read_envelope(response))
    seqs = [int(e["event"]["seq"]) for e in received]
    assert seqs == list(range(1, len(seqs) + 1)), seqs  # nothing missing, nothing twice


async def read_envelope(response: aiohttp.ClientResponse) -> Any:
    flags, length = struct.unpack(">BI", await response.content.readexactly(5))
    assert flags == 0, flags
    return json.loads(await response.content.readexactly(length))


async def test_a_stream_error_is_in_the_end_of_stream(http: aiohttp.ClientSession, api_key: str) -> None:
    async with http.post(
        f"{KERNEL}/WatchSessionEvents",
        data=envelope({"sessionId": "00000000-0000-0000-0000-000000000000"}),
        headers={**bearer(api_key), "Content-Type": "application/connect+json"},
    ) as response:
        assert response.status == 200
        [(flags, end)] = envelopes(await response.read())
    assert flags == 2
    assert end["error"]["code"] == "not_found"
    assert reason(end["error"]) == "SESSION_NOT_FOUND"


async def test_a_truncated_envelope_is_malformed(http: aiohttp.ClientSession, api_key: str) -> None:
    async with http.post(
        f"{KERNEL}/WatchSessionEvents",
        data=struct.pack(">BI", 0, 1000) + b"{}",
        headers={**bearer(api_key), "Content-Type": "application/connect+json"},
    ) as response:
        [(_, end)] = envelopes(await response.read())
    assert end["error"]["code"] == "invalid_argument"
    assert reason(end["error"]) == "MALFORMED_REQUEST"


async def test_the_page_carries_a_strict_content_security_policy(http: aiohttp.ClientSession) -> None:
    async with http.get("/") as response:
        assert response.status == 200
        assert response.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
        assert "'unsafe-inline'" not in CONTENT_SECURITY_POLICY
        assert response.headers["X-Frame-Options"] == "DENY"
    for path in ("/assets/../../settings.py", "/assets/%2e%2e/server.py", "/assets/nothing.js"):
        async with http.get(path) as response:
            assert response.status in (404, 405), path


async def test_a_bad_origin_setting_stops_the_start(database_url: str, bootstrap_key_file: str) -> None:
    configured = dataclasses.replace(
        settings(database_url, bootstrap_key_file), web_listen="127.0.0.1:0", web_origins="https://x.example/path"
    )
    with pytest.raises(SettingsError, match="web-origins"):
        async with serve(configured):
            pass


async def test_with_a_tls_certificate_the_web_api_is_https_only(
    plane, database_url: str, bootstrap_key_file: str, api_key: str, tmp_path: Path
) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: this test makes its certificate with it")
    cert, key = self_signed(tmp_path, "web")
    configured = dataclasses.replace(
        settings(database_url, bootstrap_key_file), web_listen="127.0.0.1:0", tls_cert=str(cert), tls_key=str(key)
    )
    async with serve(configured) as control_plane:
        assert control_plane.web_url.startswith("https://127.0.0.1:")
        trusted = ssl.create_default_context(cafile=str(cert))
        port = control_plane.web_url.rpartition(":")[2]
        async with aiohttp.ClientSession(control_plane.web_url) as http:
            async with http.post(
                f"{ADMIN}/WhoAmI",
                json={},
                headers={**bearer(api_key), "Origin": f"https://127.0.0.1:{port}"},
                ssl=trusted,
            ) as response:
                assert response.status == 200
            plain = control_plane.web_url.replace("https://", "http://")
            with pytest.raises(aiohttp.ClientError):  # no plaintext answer with a key in it
                async with http.post(f"{plain}{ADMIN}/WhoAmI", json={}, headers=bearer(api_key)) as response:
                    await response.read()
