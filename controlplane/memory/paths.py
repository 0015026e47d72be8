"""What a memory document's path and content may be.

A path becomes a file under the sandbox's memory directory, written by the agent (often root) and
read back from a directory the sandbox controls, so it is held to rules no trick gets through:
UTF-8 of 1 to MAX_PATH_BYTES bytes, relative, components separated by "/" that are neither empty,
"." nor "..", no control character (C0, DEL, C1), no backslash, no Unicode line or paragraph
separator, no component of more than MAX_COMPONENT_BYTES bytes, at most MAX_DEPTH components, and
none starting with ".astrabox" (the agent's temporary files). Content is UTF-8 text of at most the
store's document size.
"""

from __future__ import annotations

import hashlib
import unicodedata

from controlplane.errors import InvalidArgument, MemoryDocumentTooLarge
from controlplane.validation import echo

INVALID_MEMORY_PATH = "INVALID_MEMORY_PATH"
MAX_PATH_BYTES = 256
MAX_COMPONENT_BYTES = 128
MAX_DEPTH = 16
RESERVED_PREFIX = ".astrabox"
RULE = (
    f"a relative path of 1-{MAX_PATH_BYTES} bytes, components separated by '/' (not empty, '.' or '..',"
    f" at most {MAX_COMPONENT_BYTES} bytes, at most {MAX_DEPTH} of them, none starting with {RESERVED_PREFIX!r}),"
    " without control characters or backslashes"
)


def problem(path: str) -> str:
    """Why `path` is not a document path; empty when it is one."""
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError:
        return "it is not valid UTF-8"
    if not path or size > MAX_PATH_BYTES:
        return f"it is {size} bytes"
    if path.startswith("/"):
        return "it is absolute"
    if "\\" in path:
        return "it holds a backslash"
    for char in path:
        if unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"):
            return f"it holds the character U+{ord(char):04X}"
    parts = path.split("/")
    if len(parts) > MAX_DEPTH:
        return f"it has more than {MAX_DEPTH} components"
    for part in parts:
        if part in ("", ".", ".."):
            return f"it has a component {part!r}"
        if len(part.encode()) > MAX_COMPONENT_BYTES:
            return f"a component is longer than {MAX_COMPONENT_BYTES} bytes"
        if part.startswith(RESERVED_PREFIX):
            return f"a component starts with {RESERVED_PREFIX!r}"
    return ""


def document_path(path: str, field: str = "path") -> str:
    """`path` if it is a document path; InvalidArgument (INVALID_MEMORY_PATH) saying why not."""
    why = problem(path)
    if why:
        raise InvalidArgument(field, f"{field} {echo(path)} is not {RULE}: {why}", INVALID_MEMORY_PATH)
    return path


def text(content: str | bytes, limit: int) -> str:
    """`content` as the text of a document; MemoryDocumentTooLarge past `limit` bytes or not UTF-8."""
    raw = content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass")
    if len(raw) > limit:
        raise MemoryDocumentTooLarge(len(raw), limit)
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise MemoryDocumentTooLarge(len(raw), limit, f"is not UTF-8 (at byte {error.start})") from None
    if "\0" in decoded:  # PostgreSQL text holds no NUL
        raise MemoryDocumentTooLarge(len(raw), limit, "holds a NUL character")
    return decoded


def sha256(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()
