"""Secret settings: how a process is given a secret, and how it keeps the secret out of its logs.

Every secret (a database URL that may hold a password, an enrollment token, an
API key) is declared once as a `SecretOption` and can then be given four ways,
looked at in this order:

    --NAME VALUE        accepted, but warned about: every user of the machine can read a command line
    --NAME-file PATH    the first line of a file (one trailing newline is dropped)
    $ENV                an environment variable
    $ENV_FILE           the path of such a file, in the environment

A flag and its file flag together, or the variable and its `_FILE` variable
together, are refused rather than one silently winning.

Every value read is remembered by `redact`, a structlog processor that ends
the processes' chains and rewrites each rendered line: a remembered value and
the password of any `scheme://user:password@` URL become `***`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

__all__ = ["MASK", "SecretOption", "SecretSettingError", "redact", "redact_text", "remember", "warn_on_command_line"]

MASK = "***"
"""What a secret is replaced with in a log line."""
# Shorter values are not worth hiding, and replacing them would garble every line.
_MIN_REDACTED = 4
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/?#@\s\"']*:)[^@/\s\"']+(?=@)")
# Longest first, so a URL is masked whole before its password is.
_remembered: tuple[str, ...] = ()


class SecretSettingError(ValueError):
    """A secret cannot be read as configured; the message says what to change."""


class _Log(Protocol):
    def warning(self, event: str, **fields: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class SecretOption:
    """One secret setting: `--<name>`, `--<name>-file`, `$<env>` and `$<env>_FILE`."""

    name: str  # flag name without dashes, e.g. "database-url"
    env: str  # e.g. "ASTRABOX_DATABASE_URL"
    what: str  # what the secret is, for help and messages, e.g. "the PostgreSQL DSN"

    @property
    def flag(self) -> str:
        """The flag taking the value itself, e.g. "--database-url"."""
        return f"--{self.name}"

    @property
    def file_flag(self) -> str:
        """The flag taking the path of a file holding the value, e.g. "--database-url-file"."""
        return f"--{self.name}-file"

    @property
    def file_env(self) -> str:
        """The variable holding the path of a file holding the value, e.g. "ASTRABOX_DATABASE_URL_FILE"."""
        return f"{self.env}_FILE"

    @property
    def _dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def _file_dest(self) -> str:
        return f"{self._dest}_file"

    def add_to(self, parser: argparse.ArgumentParser, note: str = "") -> None:
        """Adds `--<name>` and `--<name>-file` to `parser`; `note` ends the value flag's help."""
        parser.add_argument(
            self.flag, dest=self._dest, metavar="VALUE", default=None,
            help=f"{self.what}{note} (env {self.env}; on the command line every local user can read it: "
                 f"prefer {self.env} or {self.file_flag})",
        )  # fmt: skip
        parser.add_argument(
            self.file_flag, dest=self._file_dest, metavar="PATH", default=None,
            help=f"read {self.what} from this file, e.g. one only this user can read (env {self.file_env})",
        )  # fmt: skip

    def on_command_line(self, args: argparse.Namespace) -> bool:
        """Whether the value itself (not a file's path) was given as a flag."""
        return bool(getattr(args, self._dest, None))

    def given_in(self, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> str:
        """Where the secret is given: "flag" (either flag), "env" (the variable or its `_FILE`), or ""."""
        env = os.environ if environ is None else environ
        if getattr(args, self._dest, None) or getattr(args, self._file_dest, None):
            return "flag"
        return "env" if env.get(self.env) or env.get(self.file_env) else ""

    def read_file(self, source: str, path: str) -> str:
        """The secret from the file at `path`, named `source` in messages (and remembered, to be masked).
        SecretSettingError when it cannot be read or is empty."""
        value = self._read_file(source, path)
        remember(value)
        return value

    def read(self, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> str:
        """The secret from the flags in `args`, else from `environ`; empty when given nowhere.
        SecretSettingError when it is given twice or its file cannot be read."""
        env = os.environ if environ is None else environ
        # An empty flag or variable counts as not given (tests and scripts blank variables that way).
        value = self._pick(
            (self.flag, getattr(args, self._dest, None) or None),
            (self.file_flag, getattr(args, self._file_dest, None) or None),
        )
        if value is None:
            value = self._pick((self.env, env.get(self.env) or None), (self.file_env, env.get(self.file_env) or None))
        if value is None:
            return ""
        remember(value)
        return value

    def _pick(self, direct: tuple[str, str | None], from_file: tuple[str, str | None]) -> str | None:
        (direct_name, direct_value), (file_name, path) = direct, from_file
        if direct_value is not None and path is not None:
            raise SecretSettingError(f"{self.what} is given by both {direct_name} and {file_name}: give one")
        if path is not None:
            return self._read_file(file_name, path)
        return direct_value

    def _read_file(self, source: str, path: str) -> str:
        try:
            text = Path(path).expanduser().read_text()
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or str(error)
            raise SecretSettingError(
                f"cannot read {self.what} from {source} {path}: {reason}; give the path of a file holding "
                f"only {self.what}, readable by this user (uid {os.getuid()})"
            ) from None
        value = text.removesuffix("\n").removesuffix("\r")
        if not value:
            raise SecretSettingError(f"{source} {path} is empty; it should hold {self.what}")
        return value


def warn_on_command_line(options: Iterable[SecretOption], prog: str, log: _Log) -> None:
    """Tells the user, on stderr and in the log (without the value), of each secret given as a flag."""
    for option in options:
        print(
            f"{prog}: warning: {option.flag} puts a secret on the command line, where every user of this "
            f"machine can read it (ps, /proc); set {option.env} or use {option.file_flag} "
            f"(or {option.file_env}) instead",
            file=sys.stderr,
            flush=True,
        )
        log.warning("secret_on_command_line", flag=option.flag, instead=f"{option.env} or {option.file_flag}")


def remember(value: str) -> None:
    """From now on `value` (and, for a URL, its password) is masked in every log line."""
    global _remembered
    candidates = {value}
    try:
        password = urlsplit(value).password
    except ValueError:
        password = None
    if password:
        candidates |= {password, unquote(password)}
    masked = set(_remembered)
    for candidate in candidates:
        if len(candidate) >= _MIN_REDACTED:
            # As rendered: raw, inside JSON, inside a repr.
            masked |= {candidate, json.dumps(candidate)[1:-1], repr(candidate)[1:-1]}
    _remembered = tuple(sorted(masked, key=len, reverse=True))  # one assignment: readers see old or new


def redact_text(text: str) -> str:
    """`text` without the remembered secrets and without the passwords of the URLs in it."""
    text = _URL_PASSWORD.sub(lambda match: match["head"] + MASK, text)
    for secret in _remembered:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def redact(_logger: object, _method: str, rendered: Any) -> Any:
    """structlog processor, placed after the renderer: the rendered line with its secrets masked."""
    if isinstance(rendered, str):
        return redact_text(rendered)
    if isinstance(rendered, bytes):
        return redact_text(rendered.decode(errors="replace")).encode()
    return rendered
