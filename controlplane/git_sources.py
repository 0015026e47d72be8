"""A session's git repository (CreateSessionRequest.git_source): what its url, ref and directory may be.

The data-plane agent runs `git clone -- URL DIR` and `git checkout --detach REF` inside the sandbox
with these values, so each is refused here unless it means only what it says (INVALID_ARGUMENT,
INVALID_GIT_SOURCE, metadata "field"):

- the url is http:// or https:// with a host and without user information: git's other
  transports (ext::, file://, ssh) would let a request reach a program or the host's files, and a
  secret belongs in the credential store, added on the way out by the egress proxy, never in a
  URL the journal and the sandbox would see;
- the ref is empty (the remote's default branch) or a name git's check-ref-format accepts, never
  starting with '-' (no option can be smuggled in);
- the directory is relative and climbs with no '..' component.

Their lengths are bounded at the edge (`controlplane.validation.FIELDS`: url, ref, directory).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from astrabox.environments.v1 import environment_pb2
from controlplane.errors import InvalidArgument
from controlplane.validation import echo

INVALID_GIT_SOURCE = "INVALID_GIT_SOURCE"

# What git's check-ref-format refuses anywhere in a name: control characters, space, ~ ^ : ? * [ \.
_REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
_HOST = re.compile(r"^[A-Za-z0-9._-]+$|^[0-9A-Fa-f:.]+$")


def _refused(field: str, message: str) -> InvalidArgument:
    return InvalidArgument(f"git_source.{field}", message, INVALID_GIT_SOURCE)


def checked(source: environment_pb2.GitSource) -> environment_pb2.GitSource:
    """`source` if the agent may clone it as it is (the directory without redundant slashes or '.'
    parts), else InvalidArgument (INVALID_GIT_SOURCE)."""
    _url(source.url)
    _ref(source.ref)
    return environment_pb2.GitSource(url=source.url, ref=source.ref, directory=_directory(source.directory))


def _url(url: str) -> None:
    if not url:
        raise _refused("url", "git_source.url is required: the http(s) URL of the repository")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise _refused("url", "git_source.url must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise _refused("url", f"git_source.url {echo(url)} is not a URL: {exc}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise _refused(
            "url",
            f"git_source.url {echo(url)} must be an http:// or https:// URL: the agent clones over git's HTTP "
            "protocol only, through the session's network policy",
        )
    if "@" in parts.netloc:
        raise _refused(
            "url",
            "git_source.url must not hold user information (user:password@): store the secret with "
            "`astrabox credentials put` and bind it to the repository's host in the session's environment",
        )
    if not _HOST.match(parts.hostname or "") or (port is not None and not 0 < port < 65536):
        raise _refused("url", f"git_source.url {echo(url)} has no valid host")


def _ref(ref: str) -> None:
    if not ref:
        return
    why = ""
    if ref.startswith("-"):
        why = "must not start with '-'"
    elif _REF_FORBIDDEN.search(ref):
        why = "must not contain spaces, control characters or any of ~ ^ : ? * [ \\"
    elif ".." in ref or "@{" in ref or "//" in ref or ref == "@":
        why = "must not contain '..', '@{' or '//', nor be '@'"
    elif ref.startswith("/") or ref.endswith(("/", ".", ".lock")):
        why = "must not start with '/' nor end with '/', '.' or '.lock'"
    elif any(part.startswith(".") for part in ref.split("/")):
        why = "must not have a part starting with '.'"
    if why:
        raise _refused("ref", f"git_source.ref {echo(ref)} {why} (a branch, a tag or a full commit id)")


def _directory(directory: str) -> str:
    if not directory:
        return ""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in directory):
        raise _refused("directory", "git_source.directory must not contain control characters")
    if directory.startswith("/"):
        raise _refused("directory", "git_source.directory must be relative to the workspace, not absolute")
    parts = [part for part in directory.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise _refused("directory", f"git_source.directory {echo(directory)} must not climb with '..'")
    return "/".join(parts)
