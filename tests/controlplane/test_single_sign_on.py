"""OIDC JSON Web Tokens as credentials: verified against a locally made key pair and JWKS (no
network), with the project and role their claims name."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import threading
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import jwt
import pytest
import pytest_asyncio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from astrabox.admin.v1 import admin_service_pb2
from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from astrabox.sessionkernel.v1 import session_kernel_service_pb2
from controlplane.errors import Unauthenticated
from controlplane.identity.tokens import TokenVerifier
from controlplane.server import RunningControlPlane, serve
from controlplane.settings import ControlPlaneSettings, SettingsError, oidc_settings
from tests.support import auth

ISSUER = "https://sso.example.test"
AUDIENCE = "astrabox"


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwks(**keys: rsa.RSAPrivateKey) -> dict[str, Any]:
    public = []
    for kid, key in keys.items():
        entry = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
        public.append({**entry, "kid": kid, "use": "sig", "alg": "RS256"})
    return {"keys": public}


def token(key: rsa.RSAPrivateKey, kid: str = "k1", algorithm: str = "RS256", **claims: Any) -> str:
    now = int(time.time())
    body = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice@example.test",
        "iat": now,
        "exp": now + 600,
        "astrabox_project": "default",
        "astrabox_role": "developer",
        **claims,
    }
    body = {name: value for name, value in body.items() if value is not None}
    return jwt.encode(body, key, algorithm=algorithm, headers={"kid": kid})


@pytest.fixture(scope="module")
def signing_key() -> rsa.RSAPrivateKey:
    return new_key()


@pytest_asyncio.fixture
async def plane(
    database_url: str, bootstrap_key_file: str, tmp_path: Path, signing_key: rsa.RSAPrivateKey
) -> AsyncIterator[RunningControlPlane]:
    keys_file = tmp_path / "jwks.json"
    keys_file.write_text(json.dumps(jwks(k1=signing_key)))
    settings = ControlPlaneSettings(
        database_url=database_url,
        listen="127.0.0.1:0",
        bootstrap_key_file=bootstrap_key_file,
        credentials_ttl=timedelta(0),
        oidc_issuer=ISSUER,
        oidc_audience=AUDIENCE,
        oidc_jwks=str(keys_file),
    )
    async with serve(settings) as running:
        yield running


async def refusal(address: str, credential: str) -> AstraBoxError:
    async with AstraBoxClient.connect(address, api_key=credential) as client:
        with pytest.raises(AstraBoxError) as refused:
            await client.admin.whoami()
    return refused.value


async def test_a_valid_token_is_its_subject_in_its_project_with_its_role(
    plane: RunningControlPlane, signing_key: rsa.RSAPrivateKey
) -> None:
    async with AstraBoxClient.connect(plane.address, api_key=token(signing_key)) as client:
        me = await client.admin.whoami()
        assert (me.project.name, me.role, me.subject, me.key_id) == (
            "default",
            admin_service_pb2.ROLE_DEVELOPER,
            "alice@example.test",
            "",
        )
        assert (await client.list_sessions()).sessions == []  # a developer's call goes through
        with pytest.raises(AstraBoxError) as refused:
            await client.admin.list_api_keys()
        assert refused.value.reason == "ROLE_INSUFFICIENT"


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("expired", "CREDENTIALS_EXPIRED"),
        ("wrong audience", "CREDENTIALS_INVALID"),
        ("wrong issuer", "CREDENTIALS_INVALID"),
        ("wrong signature", "CREDENTIALS_INVALID"),
        ("unknown key id", "CREDENTIALS_INVALID"),
        ("no key id", "CREDENTIALS_INVALID"),
        ("hmac with the public key", "CREDENTIALS_INVALID"),
        ("alg none", "CREDENTIALS_INVALID"),
        ("no exp", "CREDENTIALS_INVALID"),
        ("unknown project", "CREDENTIALS_INVALID"),
        ("bad role", "CREDENTIALS_INVALID"),
        ("tampered claims", "CREDENTIALS_INVALID"),
    ],
)
async def test_a_bad_token_is_refused(
    plane: RunningControlPlane, signing_key: rsa.RSAPrivateKey, case: str, reason: str
) -> None:
    public_pem = signing_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    if case == "expired":
        credential = token(signing_key, exp=int(time.time()) - 120)
    elif case == "wrong audience":
        credential = token(signing_key, aud="someone-else")
    elif case == "wrong issuer":
        credential = token(signing_key, iss="https://evil.example.test")
    elif case == "wrong signature":
        credential = token(new_key())  # same kid, another key
    elif case == "unknown key id":
        credential = token(signing_key, kid="k9")
    elif case == "no key id":
        credential = jwt.encode(
            {"iss": ISSUER, "aud": AUDIENCE, "sub": "x", "exp": int(time.time()) + 60}, signing_key, "RS256"
        )
    elif case == "hmac with the public key":
        header = jwt.utils.base64url_encode(json.dumps({"alg": "HS256", "kid": "k1", "typ": "JWT"}).encode())
        body = jwt.utils.base64url_encode(
            json.dumps(
                {
                    "iss": ISSUER,
                    "aud": AUDIENCE,
                    "sub": "x",
                    "exp": int(time.time()) + 60,
                    "astrabox_project": "default",
                    "astrabox_role": "admin",
                }
            ).encode()
        )
        signature = jwt.utils.base64url_encode(hmac.new(public_pem, header + b"." + body, hashlib.sha256).digest())
        credential = (header + b"." + body + b"." + signature).decode()
    elif case == "alg none":
        credential = jwt.encode(
            {
                "iss": ISSUER,
                "aud": AUDIENCE,
                "sub": "x",
                "exp": int(time.time()) + 60,
                "astrabox_project": "default",
                "astrabox_role": "admin",
            },
            None,
            algorithm="none",
            headers={"kid": "k1"},
        )
    elif case == "no exp":
        credential = token(signing_key, exp=None)
    elif case == "unknown project":
        credential = token(signing_key, astrabox_project="nobody")
    elif case == "bad role":
        credential = token(signing_key, astrabox_role="root")
    else:
        head, body, signature = token(signing_key).split(".")
        claims = json.loads(jwt.utils.base64url_decode(body))
        claims["astrabox_role"] = "admin"
        credential = ".".join([head, jwt.utils.base64url_encode(json.dumps(claims).encode()).decode(), signature])
    refused = await refusal(plane.address, credential)
    assert (refused.code, refused.reason) == (grpc.StatusCode.UNAUTHENTICATED, reason)
    assert not any(part and part in refused.message for part in (credential, *credential.split(".")))


async def test_a_subject_with_a_nul_and_a_lone_surrogate_is_audited_escaped(
    plane: RunningControlPlane, signing_key: rsa.RSAPrivateKey
) -> None:
    """A token's subject is the caller's choice, and JSON carries a NUL and a lone surrogate: each call
    it makes that changes something still leaves one audit record, its actor escaped and cut."""
    subject = "eve\x00\ud800" + "z" * 300
    async with auth.channel(plane.address, key=token(signing_key, sub=subject)) as channel:
        create = channel.unary_unary(
            "/astrabox.sessionkernel.v1.SessionKernelService/CreateSession",
            request_serializer=session_kernel_service_pb2.CreateSessionRequest.SerializeToString,
            response_deserializer=session_kernel_service_pb2.CreateSessionResponse.FromString,
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await create(session_kernel_service_pb2.CreateSessionRequest(request_id="r\x00"))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    rows = await plane.pool.fetch("SELECT actor, method, details, code FROM audit_records")
    assert [(r["actor"], r["method"], r["details"], r["code"]) for r in rows] == [
        (
            # 128 characters, escapes whole; the rest counted of the subject as kept (its first 256).
            "oidc:eve\\x00\\ud800" + "z" * 110 + f"…[{len('oidc:') + 256 - 120} more characters]",
            "CreateSession",
            {"request_id": "r\\x00"},
            "INVALID_ARGUMENT",
        )
    ]


async def test_a_key_added_to_the_jwks_file_is_used_without_a_restart(
    plane: RunningControlPlane, signing_key: rsa.RSAPrivateKey, tmp_path: Path
) -> None:
    rotated = new_key()
    assert (await refusal(plane.address, token(rotated, kid="k2"))).reason == "CREDENTIALS_INVALID"
    (tmp_path / "jwks.json").write_text(json.dumps(jwks(k1=signing_key, k2=rotated)))
    async with AstraBoxClient.connect(plane.address, api_key=token(rotated, kid="k2")) as client:
        assert (await client.admin.whoami()).subject == "alice@example.test"


def test_single_sign_on_half_configured_is_refused_at_start() -> None:
    with pytest.raises(SettingsError, match="--oidc-issuer, --oidc-audience and --oidc-jwks"):
        oidc_settings(ControlPlaneSettings(database_url="postgresql://x", oidc_issuer=ISSUER))
    assert oidc_settings(ControlPlaneSettings(database_url="postgresql://x")) is None


async def test_the_key_set_can_come_from_a_url(
    database_url: str, bootstrap_key_file: str, signing_key: rsa.RSAPrivateKey
) -> None:
    """An issuer's JWKS served over HTTP (here on loopback, allowed for the test): fetched, and used
    to verify."""
    body = json.dumps(jwks(k1=signing_key)).encode()

    class Keys(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Keys)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        settings = ControlPlaneSettings(
            database_url=database_url,
            listen="127.0.0.1:0",
            bootstrap_key_file=bootstrap_key_file,
            oidc_issuer=ISSUER,
            oidc_audience=AUDIENCE,
            oidc_jwks=f"http://127.0.0.1:{server.server_port}/jwks.json",
            oidc_allow_insecure_jwks=True,  # a test's issuer, on loopback
        )
        async with serve(settings) as running:
            async with AstraBoxClient.connect(running.address, api_key=token(signing_key)) as client:
                assert (await client.admin.whoami()).subject == "alice@example.test"
            assert (await refusal(running.address, token(new_key(), kid="k7"))).reason == "CREDENTIALS_INVALID"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080/jwks.json", "HTTP://sso.example.test/keys", "http://u:hunter22@idp/k"]
)
async def test_a_jwks_url_over_plain_http_is_refused_at_start(database_url: str, url: str) -> None:
    """Keys fetched over http could be replaced on the way, and a forged key signs any token: the control
    plane does not start with one, unless told it is a test's (flag or variable)."""
    settings = ControlPlaneSettings(
        database_url=database_url, listen="127.0.0.1:0", oidc_issuer=ISSUER, oidc_audience=AUDIENCE, oidc_jwks=url
    )
    with pytest.raises(SettingsError) as refused:
        async with serve(settings):
            pass
    message = str(refused.value)
    assert "plain http URL" in message and "https://" in message and "--oidc-allow-insecure-jwks" in message
    assert "hunter22" not in message

    environ = {
        "ASTRABOX_DATABASE_URL": database_url,
        "ASTRABOX_OIDC_ISSUER": ISSUER,
        "ASTRABOX_OIDC_AUDIENCE": AUDIENCE,
        "ASTRABOX_OIDC_JWKS": url,
    }
    with pytest.raises(SettingsError, match="plain http URL"):
        oidc_settings(ControlPlaneSettings.from_args([], environ))
    for allowed in (
        ControlPlaneSettings.from_args(["--oidc-allow-insecure-jwks"], environ),
        ControlPlaneSettings.from_args([], {**environ, "ASTRABOX_OIDC_ALLOW_INSECURE_JWKS": "1"}),
    ):
        taken = oidc_settings(allowed)
        assert taken is not None and taken.jwks == url
    # https and files need no flag.
    for jwks_source in ("https://sso.example.test/keys", "/etc/astrabox/jwks.json"):
        assert oidc_settings(ControlPlaneSettings.from_args([], {**environ, "ASTRABOX_OIDC_JWKS": jwks_source}))


async def test_the_clock_skew_allowed_is_the_oidc_leeway_setting(
    tmp_path: Path, signing_key: rsa.RSAPrivateKey
) -> None:
    """A token expired 10 s ago passes within the default 30 s of skew, and is refused with the
    config file's `oidc_leeway = 0`."""
    keys_file = tmp_path / "jwks.json"
    keys_file.write_text(json.dumps(jwks(k1=signing_key)))
    environ = {
        "ASTRABOX_DATABASE_URL": "postgresql://x",
        "ASTRABOX_OIDC_ISSUER": ISSUER,
        "ASTRABOX_OIDC_AUDIENCE": AUDIENCE,
        "ASTRABOX_OIDC_JWKS": str(keys_file),
    }
    strict = tmp_path / "controlplane.toml"
    strict.write_text("oidc_leeway = 0\n")
    lately_expired = token(signing_key, exp=int(time.time()) - 10)

    lenient = oidc_settings(ControlPlaneSettings.from_args([], environ))
    assert lenient is not None
    assert (await TokenVerifier(lenient).verify(lately_expired)).subject == "alice@example.test"

    exact = oidc_settings(ControlPlaneSettings.from_args(["--config", str(strict)], environ))
    assert exact is not None
    with pytest.raises(Unauthenticated) as refused:
        await TokenVerifier(exact).verify(lately_expired)
    assert refused.value.reason == "CREDENTIALS_EXPIRED"
