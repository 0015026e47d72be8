"""The first admin key: how an installation gets its first credential.

With `--bootstrap-key-file PATH` (ASTRABOX_BOOTSTRAP_KEY_FILE), a control plane
starting on a database that holds no API key yet makes one: an admin key of
the operator project `default`. If PATH exists it holds the key to register
(so a deployment can provision it as a secret); otherwise a new key is written
there, readable by its owner only (0600). Once any key exists the flag does
nothing. Replicas starting together bootstrap once (an advisory lock).
"""

from __future__ import annotations

import os
from pathlib import Path

import asyncpg
import structlog

from astrabox.secret_settings import remember
from controlplane.identity import keys, store
from controlplane.identity.callers import Role

log = structlog.get_logger(__name__)

CREATED_BY = "bootstrap"


class BootstrapError(ValueError):
    """The bootstrap key file cannot be used; the message says why (never with its content)."""


def _read_or_create(path: Path) -> tuple[str, bytes]:
    """(key_id, secret digest) of the key in `path`, written there first if the file does not exist."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        new = keys.new_key()
        remember(new.secret)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(new.secret + "\n")
        log.info("bootstrap_key_written", path=str(path), key_id=new.key_id)
        return new.key_id, new.secret_sha256
    except OSError as error:
        raise BootstrapError(f"cannot read the bootstrap key file {path}: {error.strerror}") from None
    remember(text)
    parsed = keys.parse(text)
    if parsed is None:
        raise BootstrapError(f"{path} does not hold an AstraBox API key (abx_<key id>_<secret>)")
    return parsed[0], keys.digest(parsed[1])


async def bootstrap(pool: asyncpg.Pool, path: str) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await store.lock_bootstrap(conn)
        if await store.any_key(conn):
            return
        if not path:
            log.warning(
                "no_api_keys",
                fix="start the control plane once with --bootstrap-key-file PATH to make the first admin key",
            )
            return
        # A small file, once per installation: not worth a thread.
        key_id, secret_sha256 = _read_or_create(Path(path).expanduser())  # noqa: ASYNC240
        project = await store.operator_project(conn)
        await store.insert_key(
            conn,
            key_id=key_id,
            project_id=project.project_id,
            name="bootstrap admin",
            role=Role.ADMIN,
            secret_sha256=secret_sha256,
            created_by=CREATED_BY,
            expires_at=None,
        )
        log.info("bootstrap_key_registered", key_id=key_id, project=project.name)
