"""Per-session tokens for the agent's routes (the model route's API key, the egress proxy's proxy
credentials).

A token is an HMAC of its owner (a session id, or a warm-pool sandbox's id) under a secret drawn at
start: nothing to store or revoke, and every token stops working when the agent (and so every
engine it launched) restarts. Each route draws its own secret, so a model token is no proxy token.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

_PREFIX = "astrabox"


class SessionTokens:
    """Issues and checks the tokens of one route."""

    def __init__(self) -> None:
        self._secret = secrets.token_bytes(32)

    def token(self, owner: str) -> str:
        return f"{_PREFIX}.{owner}.{self._mac(owner)}"

    def owner_of(self, token: str) -> str | None:
        """Whose token it is; None for anything this issuer did not issue."""
        prefix, _, rest = token.partition(".")
        owner, _, mac = rest.rpartition(".")
        if prefix != _PREFIX or not owner or not hmac.compare_digest(mac, self._mac(owner)):
            return None
        return owner

    def _mac(self, owner: str) -> str:
        return hmac.new(self._secret, owner.encode(), hashlib.sha256).hexdigest()[:40]
