"""Secrets sealed with AES-256-GCM (`cryptography`) under the operator's key, never the database's.

Each seal takes a fresh random 96-bit nonce, and associated data naming the credential's project,
name and version: a row copied to another name, project or version fails to open, as a changed
byte does. The key is 32 random bytes, given base64 (`--credential-key-file`,
ASTRABOX_CREDENTIAL_KEY); its id (`key_id`, a short hash of it, no use for guessing it) is stored
with each row, so a row sealed under another key is told apart from a damaged one.

Rotation: a `Keyring` seals under its current key and opens with it or any previous one
(`--credential-previous-key-file`); a credential is sealed under the current key again at its
next PutCredential. Rows under a key that is no longer given stay unreadable until put again.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import secrets
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from serverkit import private_files

KEY_BYTES = 32
NONCE_BYTES = 12
# A key file holds the base64 of the key, one trailing newline at most: never more than this.
MAX_KEY_FILE_BYTES = 256
_AD_PREFIX = b"astrabox.credentialstore.v1\x00"


class KeyInvalid(ValueError):
    """A key as given cannot be used; the message says why, never what it holds."""


class SealedUnderOtherKey(Exception):
    """The row was sealed under a key this keyring does not hold."""

    def __init__(self, key_id: str) -> None:
        super().__init__(key_id)
        self.key_id = key_id


class SealBroken(Exception):
    """The row does not open under its own key: changed, or copied from another name or project."""


@dataclass(frozen=True, slots=True)
class Sealed:
    ciphertext: bytes
    nonce: bytes
    key_id: str


def parse_key(text: str, what: str) -> bytes:
    """The 32-byte key that `text` (base64, standard or URL-safe) encodes; KeyInvalid otherwise."""
    compact = text.strip()
    try:
        key = base64.b64decode(compact.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise KeyInvalid(f"{what} is not base64 text (make one with `openssl rand -base64 32`)") from None
    if len(key) != KEY_BYTES:
        raise KeyInvalid(f"{what} must encode {KEY_BYTES} random bytes, it encodes {len(key)}")
    return key


def key_id(key: bytes) -> str:
    """A short name of the key for the rows sealed under it (a hash: it tells nothing of the key)."""
    return hashlib.sha256(b"astrabox credential key id\x00" + key).hexdigest()[:16]


def new_key_text() -> str:
    return base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii")


def key_file(path: Path, create: bool = False) -> str:
    """The key text of a private key file (0600, this user's; KeyInvalid otherwise, naming the fix);
    with `create`, a new random key is written there first when the file does not exist."""
    if create:
        private_files.create(path, new_key_text())
    try:
        data = private_files.read(path, "the credentials key file", MAX_KEY_FILE_BYTES)
    except private_files.NotPrivate as error:
        raise KeyInvalid(str(error)) from None
    text = data.decode("ascii", errors="replace")
    parse_key(text, f"the credentials key file {path}")
    return text.strip()


def _associated(project_id: uuid.UUID, name: str, version: int) -> bytes:
    # A name holds no NUL (controlplane.credential_store.store.credential_name): the parts cannot run together.
    return _AD_PREFIX + project_id.bytes + name.encode() + b"\x00" + version.to_bytes(4, "big")


@dataclass(frozen=True, slots=True)
class _Key:
    key_id: str
    aead: AESGCM = field(repr=False)


class Keyring:
    """The current key (sealing and opening) and the previous ones (opening only)."""

    def __init__(self, current: bytes, previous: tuple[bytes, ...] = ()) -> None:
        self._current = _Key(key_id(current), AESGCM(current))
        self._keys = {k.key_id: k for k in (_Key(key_id(p), AESGCM(p)) for p in previous)}
        self._keys[self._current.key_id] = self._current

    @property
    def key_id(self) -> str:
        return self._current.key_id

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(self._keys)

    def seal(self, project_id: uuid.UUID, name: str, version: int, secret: str) -> Sealed:
        nonce = secrets.token_bytes(NONCE_BYTES)
        sealed = self._current.aead.encrypt(nonce, secret.encode(), _associated(project_id, name, version))
        return Sealed(sealed, nonce, self._current.key_id)

    def open(self, project_id: uuid.UUID, name: str, version: int, sealed: Sealed) -> str:
        """The secret; SealedUnderOtherKey or SealBroken."""
        key = self._keys.get(sealed.key_id)
        if key is None:
            raise SealedUnderOtherKey(sealed.key_id)
        try:
            plain = key.aead.decrypt(sealed.nonce, sealed.ciphertext, _associated(project_id, name, version))
        except InvalidTag:
            raise SealBroken() from None
        return plain.decode()


def keyring(current: str, previous: str = "") -> Keyring | None:
    """The keyring of the settings' key texts; None without a current key. KeyInvalid when a text is
    no key."""
    if not current:
        if previous:
            raise KeyInvalid("a previous credentials key needs a current one (--credential-key-file)")
        return None
    older = (parse_key(previous, "the previous credentials key"),) if previous else ()
    return Keyring(parse_key(current, "the credentials key"), older)
