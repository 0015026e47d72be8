"""The agent's own credential: made once, kept in its state directory, presented in every Hello.

The first Hello of an agent id binds the credential to that id (with the
enrollment token or a join token); from then on the credential alone recognises
the agent, and nobody holding only the token can connect under its id. An
operator admitting a pending agent tells it apart by the credential's
fingerprint, which the agent logs at every start (`agent_credential_ready`) and
`astrabox hosts list` shows. The agent makes the
secret itself and writes it (0600, fsynced) before it first dials, so a crash
at any point leaves it holding the credential the control plane may have bound.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
from pathlib import Path

import structlog

from astrabox.secret_settings import remember

log = structlog.get_logger(__name__)

FILE_NAME = "agent-credential"


def fingerprint(credential: str) -> str:
    """The credential's public fingerprint, as the control plane shows it (the start of its SHA-256)."""
    return "SHA256:" + hashlib.sha256(credential.encode()).hexdigest()[:16]


def load_or_create(state_dir: Path) -> str:
    credential = _load_or_create(state_dir / FILE_NAME)
    log.info("agent_credential_ready", fingerprint=fingerprint(credential))
    return credential


def _load_or_create(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return _create(path)
    with os.fdopen(fd) as file:
        mode = stat.S_IMODE(os.fstat(file.fileno()).st_mode)
        credential = file.read().strip()
    if mode & 0o077:
        log.warning("agent_credential_readable_by_others", path=str(path), mode=oct(mode), fix=f"chmod 600 {path}")
    if not credential:
        raise ValueError(f"{path} is empty: remove it to make a new credential (the agent then enrols again)")
    remember(credential)
    return credential


def _create(path: Path) -> str:
    credential = secrets.token_urlsafe(32)
    remember(credential)
    staging = path.with_name(f".{path.name}.new")
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(credential + "\n")
        file.flush()
        os.fsync(file.fileno())
    os.replace(staging, path)
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    log.info("agent_credential_created", path=str(path))
    return credential
