"""What a Claude Code session reports when it fails: the CLI's stderr tail appended to the error,
and every secret value of its environment blanked out of errors and logs."""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any

# Names of environment variables whose values are secrets.
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH")


class Failures:
    """Turns what went wrong into an error message: the CLI's stderr tail appended, secrets blanked."""

    def __init__(self, redact: Redactor, stderr_tail: collections.deque[str], session_log: Any) -> None:
        self.redact = redact
        self.log = session_log
        self._stderr = stderr_tail

    def describe(self, what: str) -> str:
        message = what
        if self._stderr:
            message += "; CLI stderr: " + " | ".join(self._stderr)
        message = self.redact(message)
        self.log.warning("engine_failed", error=message)
        return message


class Redactor:
    """Blanks out secret values (API keys, tokens) from text meant for errors and logs."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self._secrets = sorted({secret for secret in secrets if len(secret) >= 4}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
        return text


def looks_secret(name: str) -> bool:
    """Whether an environment variable's name says its value is a secret (to be blanked out)."""
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS)
