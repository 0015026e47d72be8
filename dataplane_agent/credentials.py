"""Named secrets the agent sends on a session's behalf (an HTTP MCP server's bearer token): an
agent definition names a credential, never holds it, and the agent resolves the name when it
connects, outside the sandbox.

`Credentials` is the port: `resolve(name)` gives the secret or raises CredentialUnavailable with a
reason that never contains it. `DirectoryCredentials` is the store the agent has today: a
directory (`--credentials-dir`, by default `<state dir>/credentials`) with one file per
credential, named after it, holding the secret (one trailing newline ignored). The directory and
each file must belong to the agent's user and be readable by it alone (0700 / 0600): a file the
group or others can read, or a link, is refused, as `ssh` refuses a private key anyone can read.
A file is read at each use, so a rotated secret takes effect at the next connection, and nothing
here logs a secret. (A store in the control plane, encrypted, can replace this one behind the
same port.)
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Protocol

from serverkit import private_files

# What agent.proto allows as a credential's name: no '/', and never '.' or '..' alone.
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MAX_SECRET_BYTES = 16 * 1024


class CredentialUnavailable(Exception):
    """The credential cannot be had here; the message says why, never what it holds."""


class Credentials(Protocol):
    """Resolves a credential's name to its secret."""

    def resolve(self, name: str) -> str:
        """The secret; CredentialUnavailable if the name is unknown or its secret cannot be read."""


class NoCredentials:
    """An agent that holds no credential: every name is unknown."""

    def resolve(self, name: str) -> str:
        raise CredentialUnavailable(f"this agent holds no credentials (so not {name!r})")


class DirectoryCredentials:
    """One file per credential in a directory only the agent's user can read (see the module)."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory

    def resolve(self, name: str) -> str:
        if not _NAME.fullmatch(name) or name in (".", ".."):
            raise CredentialUnavailable(f"{name[:64]!r} is not a credential's name")
        self._check_owned(self._directory, "directory")
        path = self._directory / name
        try:
            # O_NOFOLLOW: a link planted in the directory is not followed to another file.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise CredentialUnavailable(f"no credential {name!r} on this agent") from None
        except OSError as error:
            raise CredentialUnavailable(f"the credential {name!r} cannot be read: {error.strerror}") from None
        with os.fdopen(fd, "rb") as file:
            info = os.fstat(file.fileno())
            self._check(info, f"the credential {name!r}", regular=True)
            data = file.read(MAX_SECRET_BYTES + 1)
        if len(data) > MAX_SECRET_BYTES:
            raise CredentialUnavailable(f"the credential {name!r} is larger than {MAX_SECRET_BYTES} bytes")
        try:
            secret = data.decode("utf-8").removesuffix("\n").removesuffix("\r")
        except UnicodeDecodeError:
            raise CredentialUnavailable(f"the credential {name!r} is not UTF-8 text") from None
        if not secret or any(ord(c) < 0x20 or ord(c) == 0x7F for c in secret):
            # Sent in an HTTP header: empty, or with a control character (a line break), it cannot be.
            raise CredentialUnavailable(f"the credential {name!r} is empty or holds a control character")
        return secret

    def _check_owned(self, path: Path, what: str) -> None:
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            raise CredentialUnavailable(f"the credentials {what} {path} does not exist") from None
        except OSError as error:
            raise CredentialUnavailable(f"the credentials {what} {path} cannot be read: {error.strerror}") from None
        self._check(info, f"the credentials {what} {path}", regular=False)

    @staticmethod
    def _check(info: os.stat_result, what: str, *, regular: bool) -> None:
        found = private_files.problem(info, what, regular=regular)
        if found is not None:
            raise CredentialUnavailable(found.replace("this process's user", "the agent's user"))
