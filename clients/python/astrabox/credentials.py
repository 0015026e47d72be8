"""Where a client's API key comes from when the program does not pass one.

In this order:

    $ASTRABOX_API_KEY          the key itself
    $ASTRABOX_API_KEY_FILE     the path of a file holding it
    ~/.config/astrabox/api-key the key `astrabox up` saved ($XDG_CONFIG_HOME is honoured)

`AstraBoxClient.connect(api_key=None)` and the `astrabox` command use
`default_api_key()`; `save_api_key` writes the file readable by its owner only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from astrabox.secret_settings import SecretOption, SecretSettingError

__all__ = ["config_path", "default_api_key", "save_api_key"]

API_KEY = SecretOption("api-key", "ASTRABOX_API_KEY", "the AstraBox API key")
"""The client's API key as a secret setting (`--api-key-file`, `$ASTRABOX_API_KEY`, …)."""


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    """The file `astrabox up` keeps the local project's key in."""
    env = os.environ if environ is None else environ
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "astrabox" / "api-key"


def default_api_key(environ: Mapping[str, str] | None = None) -> str:
    """The key from the environment, else from the config file; empty when there is none.
    SecretSettingError when both ASTRABOX_API_KEY and its _FILE are set, or the file is unreadable."""
    env = os.environ if environ is None else environ
    if env.get(API_KEY.env) and env.get(API_KEY.file_env):
        raise SecretSettingError(f"set {API_KEY.env} or {API_KEY.file_env}, not both")
    if env.get(API_KEY.env):
        return env[API_KEY.env]
    path = Path(env[API_KEY.file_env]) if env.get(API_KEY.file_env) else config_path(env)
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        if env.get(API_KEY.file_env):
            raise SecretSettingError(f"{API_KEY.file_env} names {path}, which does not exist") from None
        return ""
    except OSError as error:
        raise SecretSettingError(f"cannot read the API key file {path}: {error.strerror}") from None


def save_api_key(key: str, path: Path | None = None) -> Path:
    """Write `key` to `path` (default: `config_path()`) with mode 0600, replacing what was there."""
    path = path or config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(key + "\n")
    os.replace(staging, path)
    return path
