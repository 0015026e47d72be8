"""Single sign-on: OIDC JSON Web Tokens as bearer credentials, next to API keys.

With `--oidc-issuer`, `--oidc-audience` and `--oidc-jwks` set, a bearer
credential shaped like a JWT (three base64url parts) is verified with PyJWT
(a well-kept library; nothing here parses or checks a signature by hand):

- its signature, by the issuer's public key named by the token's `kid`, from a
  JWKS document in a file (re-read when it changes) or at an https URL
  (fetched at most every `REFRESH_MIN_S` seconds, and every `--oidc-jwks-refresh`);
- only asymmetric algorithms (`ALGORITHMS`): never `none`, never HMAC (a public
  key used as an HMAC secret is the classic forgery);
- `iss`, `aud`, `exp` and `sub` are required; `iss` and `aud` must match;
  `--oidc-leeway` (30 s) of clock skew is allowed.

Two claims say what the caller may do: the project's name (`--oidc-project-claim`,
default `astrabox_project`) and the role (`--oidc-role-claim`, default
`astrabox_role`: viewer, developer or admin). The caller is named
`oidc:<sub>` in logs and audit records; a token is never logged.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jwt
import structlog

from controlplane.errors import Unauthenticated
from controlplane.validation import echo

ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
REFRESH_MIN_S = 30.0
MAX_JWKS_BYTES = 1024 * 1024

log = structlog.get_logger(__name__)


def looks_like_jwt(credential: str) -> bool:
    return credential.count(".") == 2 and not credential.startswith("abx_")


@dataclass(frozen=True, slots=True)
class OidcSettings:
    issuer: str
    audience: str
    # A file path, or an https:// URL (http:// only with --oidc-allow-insecure-jwks: `settings.oidc_settings`).
    jwks: str
    project_claim: str = "astrabox_project"
    role_claim: str = "astrabox_role"
    # Seconds of clock skew allowed on `exp`; seconds between fetches of a JWKS URL.
    leeway: float = 30.0
    jwks_refresh: float = 300.0


@dataclass(frozen=True, slots=True)
class Claims:
    subject: str
    project: str
    role: str
    expires_at: datetime


def _invalid(why: str) -> Unauthenticated:
    return Unauthenticated("CREDENTIALS_INVALID", f"the token is not valid: {why}")


class KeySet:
    """The issuer's public keys by `kid`, from a JWKS file or URL."""

    def __init__(self, source: str, refresh: float = 300.0) -> None:
        self._source = source
        self._refresh = refresh
        self._keys: dict[str, jwt.PyJWK] = {}
        self._loaded_at = float("-inf")
        self._file_stamp: tuple[int, int] | None = None
        self._lock = asyncio.Lock()

    async def key(self, kid: str) -> jwt.PyJWK:
        async with self._lock:
            if self._stale(kid):
                await asyncio.to_thread(self._load)
        found = self._keys.get(kid)
        if found is None:
            raise _invalid(f"no key {echo(kid)} in the issuer's key set")
        return found

    def _stale(self, kid: str) -> bool:
        age = time.monotonic() - self._loaded_at
        if not self._source.startswith(("https://", "http://")):
            try:
                stat = os.stat(self._source)
            except OSError:
                return age >= REFRESH_MIN_S
            return (stat.st_mtime_ns, stat.st_size) != self._file_stamp
        return age >= self._refresh or (kid not in self._keys and age >= REFRESH_MIN_S)

    def _load(self) -> None:
        self._loaded_at = time.monotonic()
        try:
            if self._source.startswith(("https://", "http://")):
                with urllib.request.urlopen(self._source, timeout=10) as response:
                    text = response.read(MAX_JWKS_BYTES + 1)
            else:
                stat = os.stat(self._source)
                with open(self._source, "rb") as file:
                    text = file.read(MAX_JWKS_BYTES + 1)
                self._file_stamp = (stat.st_mtime_ns, stat.st_size)
            if len(text) > MAX_JWKS_BYTES:
                raise ValueError("the key set is larger than 1 MiB")
            keys = jwt.PyJWKSet.from_dict(json.loads(text))
        except (OSError, ValueError, jwt.PyJWKSetError) as error:
            # The keys already known stay in use; a token with an unknown kid is refused.
            log.warning("oidc_jwks_unreadable", source=self._source, error=str(error)[:200])
            return
        self._keys = {key.key_id: key for key in keys.keys if key.key_id}


class TokenVerifier:
    """Verifies an OIDC JWT and reads its subject, project and role."""

    def __init__(self, settings: OidcSettings) -> None:
        self._settings = settings
        self._keys = KeySet(settings.jwks, settings.jwks_refresh)

    async def verify(self, token: str) -> Claims:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise _invalid("not a JSON Web Token") from None
        if header.get("alg") not in ALGORITHMS:
            raise _invalid(f"algorithm {echo(str(header.get('alg')))} is not accepted (only asymmetric ones)")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise _invalid("it names no key (kid)")
        key = await self._keys.key(kid)
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[header["alg"]],
                audience=self._settings.audience,
                issuer=self._settings.issuer,
                leeway=self._settings.leeway,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthenticated("CREDENTIALS_EXPIRED", "the token has expired") from None
        except jwt.InvalidTokenError as error:
            raise _invalid(str(error)[:120]) from None
        project, role = claims.get(self._settings.project_claim), claims.get(self._settings.role_claim)
        if not isinstance(project, str) or not project:
            raise _invalid(f"it has no {self._settings.project_claim} claim naming a project")
        if role not in ("viewer", "developer", "admin"):
            raise _invalid(f"its {self._settings.role_claim} claim is not viewer, developer or admin")
        # Trusted until its expiry and the skew allowed (what PyJWT accepts, a cached verdict accepts too).
        expires_at = datetime.fromtimestamp(claims["exp"] + self._settings.leeway, UTC)
        return Claims(str(claims["sub"])[:256], project, role, expires_at)
