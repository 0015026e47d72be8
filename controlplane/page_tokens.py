"""Page tokens: opaque cursors a client hands back for the next page, signed so
that none can be forged or edited.

A token is base64url(JSON cursor) "." base64url(HMAC-SHA256 tag). The tag
covers the listing the token belongs to (its scope), so a token of one listing
is refused by another. The key is derived from the cluster secret every
control-plane replica reads from PostgreSQL (`controlplane.forwarding`): a
token one replica issued is good at every other.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json

from controlplane import validation

_KEY_LABEL = b"astrabox page tokens v1"
_TAG_BYTES = 16


class PageTokens:
    def __init__(self, key: bytes) -> None:
        self._key = key

    @classmethod
    def from_cluster_secret(cls, secret: str) -> PageTokens:
        return cls(hmac.new(secret.encode(), _KEY_LABEL, hashlib.sha256).digest())

    def issue(self, scope: str, cursor: dict[str, object]) -> str:
        payload = json.dumps(cursor, separators=(",", ":"), sort_keys=True).encode()
        return f"{_b64(payload)}.{_b64(self._tag(scope, payload))}"

    def read(self, scope: str, token: str) -> dict[str, object]:
        """The cursor of a token issued for `scope`; PAGE_TOKEN_INVALID for any other string."""
        try:
            encoded_payload, encoded_tag = token.split(".")
            payload, tag = _unb64(encoded_payload), _unb64(encoded_tag)
            if not hmac.compare_digest(tag, self._tag(scope, payload)):
                raise ValueError
            cursor = json.loads(payload)
        except (ValueError, UnicodeError, binascii.Error):
            raise validation.page_token_invalid() from None
        if not isinstance(cursor, dict):
            raise validation.page_token_invalid()
        return cursor

    def _tag(self, scope: str, payload: bytes) -> bytes:
        return hmac.new(self._key, scope.encode() + b"\n" + payload, hashlib.sha256).digest()[:_TAG_BYTES]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    # Only the canonical spelling: the decoder skips stray characters, the round trip does not.
    data = base64.urlsafe_b64decode(text.encode("ascii") + b"=" * (-len(text) % 4))
    if _b64(data) != text:
        raise ValueError
    return data
