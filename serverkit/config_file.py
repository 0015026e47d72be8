"""A process's optional config file (`--config FILE`): TOML read, its keys checked, and the effective
settings written back in the same form (`--print-config`).

The file is flat: one `key = value` line per setting, the key the setting's field name (`lease_ttl`,
the flag `--lease-ttl` without dashes), the value in the flag's unit (seconds for durations). A key
no setting has is refused, naming the file and the closest known key, so a typo never silently
leaves a default in force. A secret is never written in the file itself (it is copied, printed,
kept in repositories): `<name>_file` gives the path of a file holding it, as `--<name>-file` does.

What `render` writes is such a file: every setting, each line saying where its value came from,
secrets as comments with their value masked, so the output can be fed back with `--config`.
"""

from __future__ import annotations

import difflib
import json
import math
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from astrabox.secret_settings import MASK, redact_text

__all__ = ["ConfigFile", "ConfigFileError", "Shown", "load", "render"]

SECRET_FILE_SUFFIX = "_file"


class ConfigFileError(ValueError):
    """The config file cannot be used as written; the message names the file and what to change."""


@dataclass(frozen=True, slots=True)
class ConfigFile:
    """A config file's settings, by key, as TOML typed them."""

    path: str
    values: Mapping[str, Any]

    def where(self, key: str) -> str:
        """How a message names one of the file's settings."""
        return f"{key} in {self.path}"


def load(path: str, known: Iterable[str], secrets: Iterable[str]) -> ConfigFile:
    """The config file at `path`, every key one of `known`. ConfigFileError when it cannot be read,
    is not TOML, holds a table, names a setting there is not, or holds one of `secrets` itself."""
    try:
        with open(Path(path).expanduser(), "rb") as file:
            values = tomllib.load(file)
    except OSError as error:
        raise ConfigFileError(f"cannot read the config file {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        # tomllib's message gives the line and column, never the text there (which may be a secret).
        raise ConfigFileError(f"the config file {path} is not valid TOML: {error}") from None
    known, secrets = sorted(known), sorted(secrets)
    for key, value in values.items():
        if key in secrets:
            raise ConfigFileError(
                f"{key} in {path} is a secret and is not read from a config file: give the path of a file "
                f"holding it as {key}{SECRET_FILE_SUFFIX}, or set it in the environment"
            )
        if key not in known:
            close = difflib.get_close_matches(key, known + secrets, n=1)
            hint = f"; did you mean {close[0]}?" if close else "; `--print-config` lists every setting"
            raise ConfigFileError(f"unknown setting {key} in {path}{hint}")
        if isinstance(value, (dict, list)):
            raise ConfigFileError(f"{key} in {path} must be a single value, not a table or an array")
    return ConfigFile(path, values)


@dataclass(frozen=True, slots=True)
class Shown:
    """One setting as `render` writes it: its value as given (before conversion) and its source."""

    key: str
    value: Any
    source: str  # default, file, env or flag
    secret: bool = False


def render(prog: str, shown: Iterable[Shown]) -> str:
    """The effective settings as a config file: `key = value  # source`; a secret commented out, masked."""
    lines = [
        f"# {prog}: the effective settings, each with where its value came from (default, file, env, flag).",
        "# Secrets are masked and commented out; this text is a config file for --config as it is.",
    ]
    for item in shown:
        if item.secret:
            state = f'"{MASK}"' if item.value else "(not set)"
            lines.append(f"# {item.key} = {state}  # {item.source}, a secret")
        elif item.value is None:
            lines.append(f"# {item.key} = (not set)  # {item.source}")
        else:
            lines.append(f"{item.key} = {toml_value(item.value)}  # {item.source}")
    return "\n".join(lines) + "\n"


def toml_value(value: Any) -> str:
    """`value` written as TOML: booleans and numbers as themselves, durations in seconds, the rest as a
    string, any URL's password masked."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return repr(value)
    return json.dumps(redact_text(str(value)), ensure_ascii=False)
