"""Checks on request fields, raising InvalidArgument with an actionable message.

Two layers, both here. `request` bounds every field of a SessionKernelService
request at the edge (length, characters, format) before any database, agent
or file system sees it; `FIELDS` is the one table of those bounds, documented
on the fields in session_kernel_service.proto. The named checks below it give
a field its meaning where the kernel uses it (one of the engine's permission modes, a
non-empty text).

An error message quotes a value only through `echo`: a short prefix, so a
megabyte of input never travels back in a status.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence

from google.protobuf.message import Message

from controlplane.engines import EngineManifest
from controlplane.errors import InvalidArgument

# The most a user message, an answer or an updated tool input may hold (UTF-8 bytes).
MAX_TEXT_BYTES = 256 * 1024
MAX_CHUNK_BYTES = 1024 * 1024
# The most one uploaded archive may hold, as streamed.
MAX_UPLOAD_BYTES = 256 * 1024 * 1024
MAX_PATH_BYTES = 4096
MAX_PATH_COMPONENT_BYTES = 255
MAX_TIMEOUT_MS = 24 * 60 * 60 * 1000
# At most this many characters of a value are quoted in an error message.
ECHO_CHARS = 64

FIELD_TOO_LONG = "FIELD_TOO_LONG"
PAGE_TOKEN_INVALID = "PAGE_TOKEN_INVALID"

_CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_MODEL = re.compile(r"[A-Za-z0-9._:/@+\[\]-]*")
_TERM = re.compile(r"[A-Za-z0-9._+-]{1,64}")
_LABEL_KEY = re.compile(r"[A-Za-z0-9._:/-]+")
_PAGE_TOKEN = re.compile(r"[A-Za-z0-9_=.-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

Check = Callable[[str, object], None]


def echo(value: str | bytes) -> str:
    """`value` as an error message may quote it: the repr of at most ECHO_CHARS characters,
    with the full length when it was cut."""
    prefix = value[:ECHO_CHARS]
    while len(repr(prefix)) > 2 * ECHO_CHARS:  # escapes: '\x00' is four characters
        prefix = prefix[: len(prefix) // 2]
    if len(prefix) == len(value):
        return repr(value)
    unit = "bytes" if isinstance(value, bytes) else "characters"
    return f"{prefix!r}… ({len(value)} {unit})"


def _size(value: str | bytes) -> int:
    return len(value) if isinstance(value, bytes) else len(value.encode("utf-8", "surrogatepass"))


def _string(
    max_bytes: int,
    pattern: re.Pattern[str] | None = None,
    explain: str = "",
    printable: bool = False,
    reason: str = "INVALID_ARGUMENT",
) -> Check:
    """A string field (when set): at most `max_bytes` of UTF-8 and no NUL; `printable`: no control
    characters either; `pattern`: matches all of it (`explain` says how, for the message)."""

    def check(field: str, value: object) -> None:
        assert isinstance(value, str)
        if len(value) > max_bytes or _size(value) > max_bytes:
            raise InvalidArgument(
                field,
                f"{field} must be at most {max_bytes} bytes, got {_size(value)}",
                FIELD_TOO_LONG if reason == "INVALID_ARGUMENT" else reason,
            )
        if pattern is not None and not pattern.fullmatch(value):
            raise InvalidArgument(field, f"{field} must be {explain}, got {echo(value)}", reason)
        if "\x00" in value or (printable and _CONTROL.search(value)):
            what = "control characters" if printable else "NUL characters"
            raise InvalidArgument(field, f"{field} must not contain {what}, got {echo(value)}", reason)

    return check


def _bytes(max_bytes: int) -> Check:
    def check(field: str, value: object) -> None:
        assert isinstance(value, bytes)
        if len(value) > max_bytes:
            raise InvalidArgument(field, f"{field} must be at most {max_bytes} bytes, got {len(value)}", FIELD_TOO_LONG)

    return check


def _map(max_entries: int, key: Check, value: Check, max_total_bytes: int) -> Check:
    def check(field: str, entries: object) -> None:
        assert isinstance(entries, Mapping)
        if len(entries) > max_entries:
            raise InvalidArgument(
                field, f"{field} may have at most {max_entries} entries, got {len(entries)}", FIELD_TOO_LONG
            )
        total = 0
        for k, v in entries.items():
            key(f"{field} key", k)
            value(f"{field}[{echo(k)}]", v)
            total += _size(k) + _size(v)
        if total > max_total_bytes:
            raise InvalidArgument(
                field, f"{field} must be at most {max_total_bytes} bytes in all, got {total}", FIELD_TOO_LONG
            )

    return check


def _range(low: int, high: int) -> Check:
    def check(field: str, value: object) -> None:
        assert isinstance(value, int)
        if not low <= value <= high:
            raise InvalidArgument(field, f"{field} must be between {low} and {high}, got {value}")

    return check


def _session_id_format(field: str, value: object) -> None:
    assert isinstance(value, str)
    session_id(value)


def _client_id_format(field: str, value: object) -> None:
    assert isinstance(value, str)
    client_id(field, value)


def _workspace_path(field: str, value: object) -> None:
    assert isinstance(value, str)
    workspace_path(value)


_label_key = _string(128, _LABEL_KEY, "1-128 characters of [A-Za-z0-9._:/-]")
_label_value = _string(256, printable=True)


def _repeated(max_entries: int, each: Check) -> Check:
    def check(field: str, values: object) -> None:
        assert isinstance(values, Sequence)
        if len(values) > max_entries:
            raise InvalidArgument(
                field, f"{field} may have at most {max_entries} entries, got {len(values)}", FIELD_TOO_LONG
            )
        for value in values:
            each(field, value)

    return check


# A stored credential's secret (CredentialService.PutCredential): sent in an HTTP header by the egress
# proxy, so UTF-8 text without control characters.
MAX_SECRET_BYTES = 16 * 1024


def _secret(field: str, value: object) -> None:
    """The bound of a secret, whose refusal never quotes it (no `echo`): its size at most."""
    assert isinstance(value, str)
    if len(value) > MAX_SECRET_BYTES or _size(value) > MAX_SECRET_BYTES:
        raise InvalidArgument(
            field, f"{field} must be at most {MAX_SECRET_BYTES} bytes, got {_size(value)}", FIELD_TOO_LONG
        )
    if _CONTROL.search(value):
        raise InvalidArgument(
            field, f"{field} must not contain control characters (a line break, a tab, NUL): it is sent in a header"
        )


# A terminal's rows and columns, and the keystrokes one OpenTerminal message carries.
MAX_TERMINAL_CELLS = 1000
MAX_TERMINAL_INPUT_BYTES = 64 * 1024


# Every field of a SessionKernelService or AdminService request, by name (a name means the same in every request).
# Each bounds a value that is set; which fields a call requires, the kernel says.
FIELDS: dict[str, Check] = {
    "session_id": _session_id_format,
    "request_id": _client_id_format,
    "client_message_id": _client_id_format,
    "engine": _string(64, printable=True),
    "permission_mode": _string(64, printable=True),
    "model": _string(256, _MODEL, "up to 256 characters of [A-Za-z0-9._:/@+[]-]"),
    "labels": _map(64, _label_key, _label_value, max_total_bytes=64 * 384),
    "page_token": _string(512, _PAGE_TOKEN, "a next_page_token this service issued", reason=PAGE_TOKEN_INVALID),
    "page_size": _range(0, 2**31 - 1),
    # ListSessions' filters (their meaning: controlplane.listing).
    "states": _repeated(16, _range(0, 2**31 - 1)),
    "label_selector": _string(4096),
    "after_seq": _range(0, 2**63 - 1),
    # ForkSession: the seq of the turn end to fork at (0: the last one).
    "through_seq": _range(0, 2**63 - 1),
    # WatchSessionEvents: also live deltas (a bool).
    "include_deltas": _range(0, 1),
    # ... and at most this many events per response (0: one, in `event`, as before).
    "max_events_per_response": _range(0, 1000),
    # WatchSessionEvents and ListSessionEvents: engine messages without their typed view (a bool).
    "omit_content": _range(0, 1),
    "text": _string(MAX_TEXT_BYTES),
    "interaction_id": _string(256, printable=True),
    "task_id": _string(256, printable=True),
    "updated_input_json": _string(MAX_TEXT_BYTES),
    "message": _string(MAX_TEXT_BYTES),
    "grant_id": _string(64, printable=True),
    "input_pattern": _string(4096),
    "answers": _map(64, _string(4096), _string(MAX_TEXT_BYTES), max_total_bytes=MAX_TEXT_BYTES),
    # RespondToInteraction's tool_result: a custom tool's result text, and whether it failed.
    "content": _string(MAX_TEXT_BYTES),
    "is_error": _range(0, 1),
    "path": _workspace_path,
    "chunk": _bytes(MAX_CHUNK_BYTES),
    "command": _string(64 * 1024),
    "timeout_ms": _range(0, MAX_TIMEOUT_MS),
    # OpenTerminal: TERM, the size (0: unchanged), and keystrokes.
    "term": _string(64, _TERM, "1-64 characters of [A-Za-z0-9._+-]"),
    "rows": _range(0, MAX_TERMINAL_CELLS),
    "columns": _range(0, MAX_TERMINAL_CELLS),
    "input": _bytes(MAX_TERMINAL_INPUT_BYTES),
    # AdminService (its own meaning is checked in controlplane.identity.admin).
    "name": _string(128, printable=True),
    "project_id": _string(64, printable=True),
    "key_id": _string(64, printable=True),
    "agent_id": _string(128, printable=True),
    # AdminService.DrainAgent: at most a week (controlplane.drains).
    "timeout_seconds": _range(0, 604_800),
    # CreateSessionRequest: an agent definition's name or id, and the version to pin (0: the newest).
    "agent": _string(128, printable=True),
    "agent_version": _range(0, 2**31 - 1),
    "environment": _string(128, printable=True),
    "environment_version": _range(0, 2**31 - 1),
    # CreateSessionRequest.git_source (their meaning is checked in controlplane.git_sources).
    "url": _string(2048, printable=True),
    "ref": _string(256, printable=True),
    "directory": _string(1024, printable=True),
    # CreateSessionRequest.memory: a memory store's name or id, and the mode (checked in controlplane.memory).
    "store": _string(128, printable=True),
    "mode": _range(0, 2**31 - 1),
    "role": _range(0, 3),
    "credential_hosts": _range(0, 2),
    # A google.protobuf.Timestamp (expire_time): 0001-01-01 to 9999-12-31, as the type allows.
    "seconds": _range(-62135596800, 253402300799),
    "nanos": _range(0, 999_999_999),
    # AdminService.SetQuotas (controlplane.quotas): the most each quota may be set to.
    "live_sessions": _range(0, 1_000_000),
    "sessions_per_minute": _range(0, 1_000_000),
    "message_bytes": _range(0, MAX_TEXT_BYTES),
    "upload_bytes": _range(0, MAX_UPLOAD_BYTES),
    "concurrent_commands": _range(0, 10_000),
    # CredentialService (controlplane.credential_store: a credential's name is checked there).
    "secret": _secret,
    "description": _string(256),
    # WebhookService (their meaning is checked in controlplane.webhooks.subscriptions).
    "webhook_id": _string(64, printable=True),
    "delivery_id": _string(64, printable=True),
    "event_types": _repeated(32, _string(64, printable=True)),
    "event_type": _string(64, printable=True),
    "enabled": _range(0, 1),
    "overlap_seconds": _range(0, 604_800),
    "state": _range(0, 3),
}


def request(message: Message) -> None:
    """Bound every field of a request (and of the messages in it) by `FIELDS`."""
    _fields(message, "")


def _fields(message: Message, prefix: str) -> None:
    for descriptor, value in message.ListFields():
        if descriptor.message_type is not None and not descriptor.message_type.GetOptions().map_entry:
            if not isinstance(value, Message):  # a repeated field of messages
                _repeated_messages(f"{prefix}{descriptor.name}", value)
            else:
                _fields(value, f"{prefix}{descriptor.name}.")
            continue
        check = FIELDS.get(descriptor.name)
        if check is None:  # a field this table misses; tests/controlplane/test_validation.py fails
            check = _string(4096) if isinstance(value, str) else _bytes(4096) if isinstance(value, bytes) else None
        if check is not None:
            check(prefix + descriptor.name, value)


# The most entries of a repeated message field of a request (CreateSessionRequest.memory); what
# each holds is bounded like any field, and its meaning checked by the service.
MAX_REPEATED_MESSAGES = 64


def _repeated_messages(field: str, values: Sequence[Message]) -> None:
    if len(values) > MAX_REPEATED_MESSAGES:
        raise InvalidArgument(
            field, f"{field} may have at most {MAX_REPEATED_MESSAGES} entries, got {len(values)}", FIELD_TOO_LONG
        )
    for index, value in enumerate(values):
        _fields(value, f"{field}[{index}].")


def label_key(field: str, value: str) -> str:
    """A key of a session's labels (CreateSessionRequest.labels)."""
    _label_key(field, value)
    return value


def label_value(field: str, value: str) -> str:
    """A value of a session's labels."""
    _label_value(field, value)
    return value


def session_id(value: str) -> str:
    if len(value) > 64:  # uuid.UUID would take a braced or urn: form, never longer
        raise InvalidArgument("session_id", f"session_id must be a UUID, got {echo(value)}")
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise InvalidArgument("session_id", f"session_id must be a UUID, got {echo(value)}") from None


def client_id(field: str, value: str) -> str:
    if not _CLIENT_ID.fullmatch(value):
        raise InvalidArgument(field, f"{field} must be 1-128 characters of [A-Za-z0-9._:-], got {echo(value)}")
    return value


def workspace_path(value: str) -> str:
    """A path relative to the workspace: at most MAX_PATH_BYTES, components of at most
    MAX_PATH_COMPONENT_BYTES, no NUL, and no '..' (which would climb out)."""
    if _size(value) > MAX_PATH_BYTES:
        raise InvalidArgument(
            "path", f"path must be at most {MAX_PATH_BYTES} bytes, got {_size(value)}", FIELD_TOO_LONG
        )
    if "\x00" in value:
        raise InvalidArgument("path", f"path must not contain NUL characters, got {echo(value)}")
    components = value.replace("\\", "/").split("/")
    if any(_size(c) > MAX_PATH_COMPONENT_BYTES for c in components):
        raise InvalidArgument(
            "path",
            f"each part of path must be at most {MAX_PATH_COMPONENT_BYTES} bytes, got {echo(value)}",
            FIELD_TOO_LONG,
        )
    if ".." in components:
        raise InvalidArgument("path", f"{echo(value)} climbs out of the workspace with '..'", "PATH_OUTSIDE_WORKSPACE")
    return value


def message_text(value: str) -> str:
    if not value.strip():
        raise InvalidArgument("text", "text must not be empty")
    FIELDS["text"]("text", value)
    return value


def permission_mode(manifest: EngineManifest, value: str) -> str:
    if value not in manifest.permission_modes:
        raise InvalidArgument(
            "permission_mode",
            f"unknown permission mode {echo(value)} for {manifest.kind}; valid: {', '.join(manifest.permission_modes)}",
            reason="PERMISSION_MODE_INVALID",
        )
    return value


def page_size(value: int, default: int, maximum: int) -> int:
    if value < 0 or value > maximum:
        raise InvalidArgument("page_size", f"page_size must be between 0 and {maximum}, got {value}")
    return value or default


def page_token_invalid() -> InvalidArgument:
    return InvalidArgument("page_token", "page_token is not one this service issued", PAGE_TOKEN_INVALID)
