"""What a project's named, versioned definitions (agents, environments) share: their names and how a
request refers to one, version numbers, the canonical form a definition is stored and digested in,
and the signed cursors of their listings.

The definitions differ in what they hold (`agent_definitions.specs`, `environments.specs`); they are
named, referred to, numbered, digested and paged alike, so that one rule serves both.
"""

from __future__ import annotations

import hashlib
import re
import uuid

from google.protobuf.message import Message

from controlplane import validation
from controlplane.errors import InvalidArgument, RequestIdReused
from controlplane.page_tokens import PageTokens
from controlplane.validation import echo

_NAME = re.compile(r"[a-z][a-z0-9-]{0,63}")
NAME_RULE = "1-64 characters of [a-z0-9-], starting with a letter"
MAX_VERSION = 2**31 - 1
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500


def new_name(what: str, value: str) -> str:
    """A new definition's name: unique in its project, never of the form of an id (a UUID), so that
    a reference (`ref`) is either unambiguously. `what` is the kind ("agent", "environment")."""
    if not _NAME.fullmatch(value) or as_id(value) is not None:
        raise InvalidArgument("name", f"an {what}'s name is {NAME_RULE}, and not a UUID; got {echo(value)}")
    return value


def ref(what: str, value: str, field: str) -> uuid.UUID | str:
    """What a request names a definition by: its id (a UUID) or its name."""
    if not value:
        raise InvalidArgument(field, f"{field} must name the {what}: its name or its id")
    found = as_id(value)
    if found is not None:
        return found
    if not _NAME.fullmatch(value):
        raise InvalidArgument(
            field, f"{field} must be an {what}'s name ({NAME_RULE}) or id (a UUID), got {echo(value)}"
        )
    return value


def as_id(value: str) -> uuid.UUID | None:
    if len(value) > 64:  # uuid.UUID would take a braced or urn: form, never longer
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def version(field: str, value: int) -> int:
    """A version a request names: 0 (the newest) or a version number."""
    if not 0 <= value <= MAX_VERSION:
        raise InvalidArgument(field, f"{field} must be 0 (the newest) or a version number, got {value}")
    return value


def canonical(spec: Message) -> bytes:
    """The form a definition is stored and compared in: deterministic, without fields this version
    of the contract does not know (so equal definitions are equal whatever client wrote them)."""
    copy = type(spec)()
    copy.CopyFrom(spec)
    copy.DiscardUnknownFields()
    return copy.SerializeToString(deterministic=True)


def digest(canonical_form: bytes) -> str:
    """A version's spec_digest: the SHA-256 of the canonical form, hex."""
    return hashlib.sha256(canonical_form).hexdigest()


def same_request(what: str, request_id: str, made: tuple[str, str, str], asked: tuple[str, str]) -> None:
    """A create's retry: `made` is the (id, name, first version's spec digest) its request id made,
    `asked` the (name, spec digest) the retry asks for; another name or definition is RequestIdReused."""
    made_id, made_name, made_digest = made
    if (made_name, made_digest) != asked:
        raise RequestIdReused(
            f"request_id {echo(request_id)} was already used to create {what} {made_name}"
            " with another name or definition",
            {"request_id": request_id, f"{what}_id": made_id},
        )


def page_size(value: int) -> int:
    return validation.page_size(value, default=DEFAULT_PAGE_SIZE, maximum=MAX_PAGE_SIZE)


class Pages:
    """The cursors of a kind's two listings: definitions by name, one definition's versions newest first."""

    def __init__(self, page_tokens: PageTokens, kind: str) -> None:
        self._tokens = page_tokens
        self._kind = kind

    def _scope(self, project_id: uuid.UUID, show_archived: bool) -> str:
        return f"{self._kind}s/{project_id}/{'all' if show_archived else 'active'}"

    def after_name(self, project_id: uuid.UUID, show_archived: bool, token: str) -> str:
        """The name a listing's page token resumes after ("" for the first page)."""
        value = self._read(self._scope(project_id, show_archived), token, "after", str)
        return value if isinstance(value, str) else ""

    def next_by_name(self, project_id: uuid.UUID, show_archived: bool, last_name: str | None) -> str:
        return self._tokens.issue(self._scope(project_id, show_archived), {"after": last_name}) if last_name else ""

    def before_version(self, definition_id: object, token: str) -> int | None:
        """The version a versions listing's page token resumes before (None for the first page)."""
        value = self._read(f"{self._kind}-versions/{definition_id}", token, "before", int)
        return value if isinstance(value, int) else None

    def next_by_version(self, definition_id: object, last_version: int | None) -> str:
        if last_version is None:
            return ""
        return self._tokens.issue(f"{self._kind}-versions/{definition_id}", {"before": last_version})

    def _read(self, scope: str, token: str, key: str, kind: type) -> object | None:
        if not token:
            return None
        validation.FIELDS["page_token"]("page_token", token)
        value = self._tokens.read(scope, token).get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise validation.page_token_invalid()
        return value
