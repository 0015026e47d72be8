"""The console's sign-in at an OIDC issuer (controlplane.web.sign_in): the control plane discovers the
issuer's endpoints and hands them to the console, the page may call the token endpoint, and the
token the authorization-code flow with PKCE yields is a credential of the web API, as a browser
would use it; against a real authorization server on loopback (tests.support.oidc_provider)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest
import pytest_asyncio

from controlplane.server import RunningControlPlane, serve
from controlplane.settings import SettingsError
from tests.controlplane.test_quotas import settings
from tests.support.oidc_provider import OidcProvider

CLIENT = "astrabox-console"
WHOAMI = "/astrabox.admin.v1.AdminService/WhoAmI"


@pytest_asyncio.fixture
async def provider() -> AsyncIterator[OidcProvider]:
    idp = OidcProvider(clients={})
    async with idp.running():
        yield idp


@pytest_asyncio.fixture
async def web(
    provider: OidcProvider, database_url: str, bootstrap_key_file: str, tmp_path: Path
) -> AsyncIterator[RunningControlPlane]:
    keys = tmp_path / "jwks.json"
    keys.write_text(json.dumps(provider.jwks()))
    configured = dataclasses.replace(
        settings(database_url, bootstrap_key_file),
        web_listen="127.0.0.1:0",
        oidc_issuer=provider.issuer,
        oidc_audience=CLIENT,  # the console's ID token names its client as audience
        oidc_jwks=str(keys),
        console_oidc_client_id=CLIENT,
    )
    async with serve(configured) as control_plane:
        provider.clients[CLIENT] = f"{control_plane.web_url}/"
        yield control_plane


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


async def test_the_console_gets_the_issuers_endpoints_and_may_call_its_token_endpoint(
    web: RunningControlPlane, provider: OidcProvider
) -> None:
    async with aiohttp.ClientSession(web.web_url) as http:
        async with http.get("/console/config.json") as response:
            config = (await response.json())["oidc"]
        async with http.get("/") as response:
            policy = response.headers["Content-Security-Policy"]
    assert config == {
        "issuer": provider.issuer,
        "clientId": CLIENT,
        "audience": CLIENT,
        "scopes": "openid profile email",
        "authorizationEndpoint": f"{provider.issuer}/authorize",
        "tokenEndpoint": f"{provider.issuer}/token",
    }
    assert f"connect-src 'self' {provider.issuer};" in policy
    assert "script-src 'self';" in policy  # the issuer's scripts are not let in


async def test_the_authorization_code_flow_with_pkce_yields_a_credential_of_the_web_api(
    web: RunningControlPlane, provider: OidcProvider
) -> None:
    """What the console does in the browser, step by step."""
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{web.web_url}/console/config.json") as response:
            config = (await response.json())["oidc"]
        verifier, challenge = pkce()
        state = secrets.token_urlsafe(16)
        redirect_uri = f"{web.web_url}/"
        async with http.get(
            config["authorizationEndpoint"],
            params={
                "response_type": "code",
                "client_id": config["clientId"],
                "redirect_uri": redirect_uri,
                "scope": config["scopes"],
                "state": state,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
            },
            allow_redirects=False,
        ) as response:
            assert response.status == 302
            back = urlsplit(response.headers["Location"])
        returned = parse_qs(back.query)
        assert f"{back.scheme}://{back.netloc}{back.path}" == redirect_uri
        assert returned["state"] == [state]
        form = {
            "grant_type": "authorization_code",
            "code": returned["code"][0],
            "redirect_uri": redirect_uri,
            "client_id": CLIENT,
        }
        async with http.post(config["tokenEndpoint"], data={**form, "code_verifier": "not-the-verifier"}) as response:
            assert response.status == 400  # a stolen code is nothing without the verifier
        async with http.get(config["authorizationEndpoint"], params={}, allow_redirects=False) as response:
            assert response.status == 400
        verifier, challenge = pkce()
        async with http.get(
            config["authorizationEndpoint"],
            params={
                "response_type": "code",
                "client_id": CLIENT,
                "redirect_uri": redirect_uri,
                "state": state,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
            },
            allow_redirects=False,
        ) as response:
            code = parse_qs(urlsplit(response.headers["Location"]).query)["code"][0]
        async with http.post(
            config["tokenEndpoint"], data={**form, "code": code, "code_verifier": verifier}
        ) as response:
            assert response.status == 200
            tokens = await response.json()
        port = web.web_url.rpartition(":")[2]
        async with http.post(
            f"{web.web_url}{WHOAMI}",
            json={},
            headers={"Authorization": f"Bearer {tokens['id_token']}", "Origin": f"http://127.0.0.1:{port}"},
        ) as response:
            assert response.status == 200, await response.text()
            caller = (await response.json())["caller"]
    assert caller["subject"] == provider.subject
    assert caller["role"] == "ROLE_ADMIN"


async def test_an_issuer_that_cannot_be_reached_leaves_keys_and_says_why(
    database_url: str, bootstrap_key_file: str, tmp_path: Path
) -> None:
    keys = tmp_path / "jwks.json"
    keys.write_text(json.dumps({"keys": []}))
    configured = dataclasses.replace(
        settings(database_url, bootstrap_key_file),
        web_listen="127.0.0.1:0",
        oidc_issuer="http://127.0.0.1:9",  # nothing listens on the discard port
        oidc_audience=CLIENT,
        oidc_jwks=str(keys),
        console_oidc_client_id=CLIENT,
    )
    async with serve(configured) as control_plane, aiohttp.ClientSession(control_plane.web_url) as http:
        async with http.get("/console/config.json") as response:
            config = await response.json()
        async with http.get("/") as response:
            assert response.status == 200
            assert "connect-src 'self';" in response.headers["Content-Security-Policy"]
    assert config["oidc"] is None
    assert "127.0.0.1:9" in config["oidcUnavailable"]


async def test_without_single_sign_on_the_console_signs_in_with_keys(
    database_url: str, bootstrap_key_file: str
) -> None:
    configured = dataclasses.replace(settings(database_url, bootstrap_key_file), web_listen="127.0.0.1:0")
    async with (
        serve(configured) as control_plane,
        aiohttp.ClientSession(control_plane.web_url) as http,
        http.get("/console/config.json") as response,
    ):
        assert await response.json() == {"oidc": None}
    with pytest.raises(SettingsError, match="needs single sign-on"):
        async with serve(dataclasses.replace(configured, console_oidc_client_id=CLIENT)):
            pass
