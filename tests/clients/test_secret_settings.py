"""Secret settings: a secret by flag, file, variable or variable-named file; kept out of rendered log lines."""

from __future__ import annotations

import argparse
import io
import json
import uuid
from pathlib import Path

import pytest
import structlog

from astrabox.secret_settings import SecretOption, SecretSettingError, redact, redact_text, warn_on_command_line

TOKEN = SecretOption("enrollment-token", "ASTRABOX_ENROLLMENT_TOKEN", "the enrollment token")


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    TOKEN.add_to(parser)
    return parser.parse_args(argv)


def _secret() -> str:
    return f"tok-{uuid.uuid4().hex}"


def test_a_secret_comes_from_the_flag_its_file_the_variable_or_the_variables_file(tmp_path: Path) -> None:
    flag, in_file, in_env, in_env_file = _secret(), _secret(), _secret(), _secret()
    (tmp_path / "flag").write_text(in_file + "\n")
    (tmp_path / "env").write_text(in_env_file + "\r\n")

    assert TOKEN.read(_args("--enrollment-token", flag), {"ASTRABOX_ENROLLMENT_TOKEN": in_env}) == flag
    assert TOKEN.read(_args("--enrollment-token-file", str(tmp_path / "flag")), {}) == in_file
    assert TOKEN.read(_args(), {"ASTRABOX_ENROLLMENT_TOKEN": in_env}) == in_env
    assert TOKEN.read(_args(), {"ASTRABOX_ENROLLMENT_TOKEN_FILE": str(tmp_path / "env")}) == in_env_file
    assert TOKEN.read(_args(), {}) == ""
    # A flag wins over the environment; only the value flag is "on the command line".
    assert (
        TOKEN.read(_args("--enrollment-token-file", str(tmp_path / "flag")), {"ASTRABOX_ENROLLMENT_TOKEN": in_env})
        == in_file
    )
    assert TOKEN.on_command_line(_args("--enrollment-token", flag))
    assert not TOKEN.on_command_line(_args("--enrollment-token-file", str(tmp_path / "flag")))


def test_only_one_trailing_newline_is_dropped_from_a_file(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("  spaced token\n\n")
    assert TOKEN.read(_args("--enrollment-token-file", str(tmp_path / "token")), {}) == "  spaced token\n"


def test_a_missing_or_empty_file_is_an_error_that_names_the_flag_and_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(SecretSettingError, match=rf"--enrollment-token-file {missing}: No such file or directory"):
        TOKEN.read(_args("--enrollment-token-file", str(missing)), {})
    with pytest.raises(SecretSettingError, match=rf"ASTRABOX_ENROLLMENT_TOKEN_FILE {missing}: No such file"):
        TOKEN.read(_args(), {"ASTRABOX_ENROLLMENT_TOKEN_FILE": str(missing)})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(SecretSettingError, match="is empty"):
        TOKEN.read(_args("--enrollment-token-file", str(tmp_path / "empty")), {})


def test_a_secret_given_twice_the_same_way_is_refused(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-file")
    with pytest.raises(SecretSettingError, match="both --enrollment-token and --enrollment-token-file"):
        TOKEN.read(_args("--enrollment-token", "x", "--enrollment-token-file", str(tmp_path / "token")), {})
    with pytest.raises(SecretSettingError, match="both ASTRABOX_ENROLLMENT_TOKEN and ASTRABOX_ENROLLMENT_TOKEN_FILE"):
        TOKEN.read(
            _args(), {"ASTRABOX_ENROLLMENT_TOKEN": "x", "ASTRABOX_ENROLLMENT_TOKEN_FILE": str(tmp_path / "token")}
        )


def test_rendered_log_lines_lose_secrets_read_and_url_passwords() -> None:
    token = _secret() + '"quoted\\'
    TOKEN.read(_args("--enrollment-token", token), {})
    url = "postgresql://astrabox:s3cr%2Ft-pw@db.example:5432/astrabox"
    out = io.StringIO()
    logger = structlog.wrap_logger(structlog.PrintLogger(out), processors=[structlog.processors.JSONRenderer(), redact])

    logger.error("database_unreachable", database_url=url, token=token, said=f"token was {token}")
    logger.info("model_route", base_url="http://127.0.0.1:8080/v1", key_in_url="https://user:hunter22@h/x")

    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["database_url"] == "postgresql://astrabox:***@db.example:5432/astrabox"
    assert first["token"] == "***" and first["said"] == "token was ***"
    assert second == {
        "event": "model_route",
        "base_url": "http://127.0.0.1:8080/v1",
        "key_in_url": "https://user:***@h/x",
    }
    assert redact_text(f"Traceback ... {token!r}") == "Traceback ... '***'"


def test_the_warning_names_the_flag_and_what_to_use_instead_never_the_value(capsys: pytest.CaptureFixture[str]) -> None:
    with structlog.testing.capture_logs() as logged:
        warn_on_command_line([TOKEN], "astrabox agent", structlog.get_logger())

    err = capsys.readouterr().err
    assert err.startswith("astrabox agent: warning: --enrollment-token puts a secret on the command line")
    assert "ASTRABOX_ENROLLMENT_TOKEN" in err and "--enrollment-token-file" in err
    assert logged == [
        {
            "event": "secret_on_command_line",
            "log_level": "warning",
            "flag": "--enrollment-token",
            "instead": "ASTRABOX_ENROLLMENT_TOKEN or --enrollment-token-file",
        }
    ]
