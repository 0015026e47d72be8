"""An OpenID Connect provider for tests: a real authorization server on loopback (aiohttp) doing the
authorization-code flow with PKCE for registered public clients, as an identity provider would.

- GET /.well-known/openid-configuration   the discovery document
- GET /jwks                               its signing key
- GET /authorize                          signs in `subject` without asking (a person who already
                                          has a session at the provider) and redirects to the
                                          client's registered redirect URI with a one-time code
- POST /token                             code + code_verifier (S256) -> id_token (RS256, aud =
                                          client id) and access_token; CORS open, as providers
                                          serve it to single-page apps

Every refusal is an OAuth error JSON (invalid_grant, invalid_request …) the test can assert.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

CORS = {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Headers": "content-type"}


@dataclass
class _Grant:
    client_id: str
    redirect_uri: str
    challenge: str
    nonce: str


@dataclass
class OidcProvider:
    """Runs with `async with provider.running():`; `issuer` is its URL once it runs."""

    clients: dict[str, str]  # client id -> its one registered redirect URI
    subject: str = "alice@example.test"
    claims: dict[str, Any] = field(default_factory=lambda: {"astrabox_project": "default", "astrabox_role": "admin"})
    issuer: str = ""
    key: rsa.RSAPrivateKey = field(default_factory=lambda: rsa.generate_private_key(65537, 2048))
    tokens_issued: int = 0
    _codes: dict[str, _Grant] = field(default_factory=dict)

    def jwks(self) -> dict[str, Any]:
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**public, "kid": "test-key", "use": "sig", "alg": "RS256"}]}

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[OidcProvider]:
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self._discovery)
        app.router.add_get("/jwks", self._keys)
        app.router.add_get("/authorize", self._authorize)
        app.router.add_post("/token", self._token)
        app.router.add_route("OPTIONS", "/token", self._preflight)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.issuer = f"http://127.0.0.1:{port}"
        try:
            yield self
        finally:
            await runner.cleanup()

    async def _discovery(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "issuer": self.issuer,
                "authorization_endpoint": f"{self.issuer}/authorize",
                "token_endpoint": f"{self.issuer}/token",
                "jwks_uri": f"{self.issuer}/jwks",
                "response_types_supported": ["code"],
                "code_challenge_methods_supported": ["S256"],
                "id_token_signing_alg_values_supported": ["RS256"],
            },
            headers=CORS,
        )

    async def _keys(self, request: web.Request) -> web.Response:
        return web.json_response(self.jwks(), headers=CORS)

    async def _authorize(self, request: web.Request) -> web.Response:
        query = request.query
        client_id, redirect_uri = query.get("client_id", ""), query.get("redirect_uri", "")
        if self.clients.get(client_id) != redirect_uri:
            # Never redirect to an unregistered URI: the error is shown here.
            return web.Response(status=400, text=f"unknown client or redirect URI: {client_id} {redirect_uri}")
        if query.get("response_type") != "code" or query.get("code_challenge_method") != "S256":
            return _redirect(redirect_uri, error="invalid_request", state=query.get("state", ""))
        if not query.get("code_challenge"):
            return _redirect(redirect_uri, error="invalid_request", state=query.get("state", ""))
        code = secrets.token_urlsafe(24)
        self._codes[code] = _Grant(client_id, redirect_uri, query["code_challenge"], query.get("nonce", ""))
        return _redirect(redirect_uri, code=code, state=query.get("state", ""))

    async def _preflight(self, request: web.Request) -> web.Response:
        return web.Response(status=204, headers={**CORS, "Access-Control-Allow-Methods": "POST"})

    async def _token(self, request: web.Request) -> web.Response:
        form = await request.post()
        grant = self._codes.pop(str(form.get("code", "")), None)  # one use only
        if form.get("grant_type") != "authorization_code" or grant is None:
            return _oauth_error("invalid_grant")
        if form.get("client_id") != grant.client_id or form.get("redirect_uri") != grant.redirect_uri:
            return _oauth_error("invalid_grant")
        verifier = str(form.get("code_verifier", ""))
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        if not verifier or challenge != grant.challenge:
            return _oauth_error("invalid_grant")
        now = int(time.time())
        claims = {"iss": self.issuer, "sub": self.subject, "iat": now, "exp": now + 600, **self.claims}
        id_token = jwt.encode(
            {**claims, "aud": grant.client_id, "nonce": grant.nonce}, self.key, "RS256", headers={"kid": "test-key"}
        )
        self.tokens_issued += 1
        return web.json_response(
            {
                "id_token": id_token,
                "access_token": secrets.token_urlsafe(16),
                "token_type": "Bearer",
                "expires_in": 600,
            },
            headers={**CORS, "Cache-Control": "no-store"},
        )


def _redirect(uri: str, **params: str) -> web.Response:
    separator = "&" if "?" in uri else "?"
    raise web.HTTPFound(f"{uri}{separator}{urlencode(params)}")


def _oauth_error(error: str) -> web.Response:
    return web.json_response({"error": error}, status=400, headers=CORS)
