"""API keys: their form, how they are made and how one is recognised.

A key reads `abx_<key_id>_<secret>`: `key_id` (16 lowercase base32
characters) names it in listings, logs and audit records; `secret` is 32
random bytes (43 base64url characters). The service keeps only the secret's
SHA-256.

Why SHA-256 and not a password hash (bcrypt, argon2): a password hash is slow
on purpose, so that guessing a low-entropy password from its hash costs too
much. A key's secret is 256 random bits, which nobody can guess however fast
the hash; a slow hash would only add tens of milliseconds to every call that
misses the cache. The digest is compared in constant time (`hmac.compare_digest`)
after the row is found by the public `key_id`, so the time a refusal takes says
nothing about the secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

PREFIX = "abx"
# An agent's join token (`identity.agent_admission`) has the same form under its own prefix, so
# neither is ever taken for the other.
JOIN_PREFIX = "abxj"
_FORM = r"_([a-z2-7]{16})_([A-Za-z0-9_-]{43})"
_KEY = re.compile(PREFIX + _FORM)
_JOIN_TOKEN = re.compile(JOIN_PREFIX + _FORM)
KEY_ID = re.compile(r"[a-z2-7]{16}")


@dataclass(frozen=True, slots=True)
class NewKey:
    key_id: str
    # The whole key, shown to its creator once.
    secret: str
    secret_sha256: bytes


def new_key(prefix: str = PREFIX) -> NewKey:
    """A new API key, or with JOIN_PREFIX a new join token."""
    key_id = base64.b32encode(secrets.token_bytes(10)).decode().lower()
    secret = secrets.token_urlsafe(32)
    return NewKey(key_id, f"{prefix}_{key_id}_{secret}", digest(secret))


def parse(key: str) -> tuple[str, str] | None:
    """(key_id, secret) of a well-formed key; None for anything else."""
    match = _KEY.fullmatch(key)
    return (match.group(1), match.group(2)) if match else None


def parse_join_token(token: str) -> tuple[str, str] | None:
    """(token_id, secret) of a well-formed join token; None for anything else."""
    match = _JOIN_TOKEN.fullmatch(token)
    return (match.group(1), match.group(2)) if match else None


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def matches(secret: str, secret_sha256: bytes) -> bool:
    return hmac.compare_digest(digest(secret), secret_sha256)
