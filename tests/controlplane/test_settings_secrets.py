"""The control plane's secret settings: the database URL and token by file, the TLS key read with care."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog

from controlplane.settings import ControlPlaneSettings, SettingsError, tls_credentials


def _settings(*argv: str, environ: dict[str, str] | None = None) -> ControlPlaneSettings:
    return ControlPlaneSettings.from_args(list(argv), environ or {})


def test_the_database_url_and_token_come_from_files_and_are_not_in_the_settings_repr(tmp_path: Path) -> None:
    (tmp_path / "url").write_text("postgresql://astrabox:pw-from-file@db:5432/astrabox\n")
    (tmp_path / "token").write_text("token-from-file\n")

    settings = _settings(
        "--database-url-file",
        str(tmp_path / "url"),
        environ={"ASTRABOX_ENROLLMENT_TOKEN_FILE": str(tmp_path / "token")},
    )

    assert settings.database_url == "postgresql://astrabox:pw-from-file@db:5432/astrabox"
    assert settings.enrollment_token == "token-from-file"
    assert settings.secrets_on_command_line == ()
    assert "pw-from-file" not in repr(settings) and "token-from-file" not in repr(settings)


def test_no_database_url_or_an_unreadable_file_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="set ASTRABOX_DATABASE_URL or give --database-url-file"):
        _settings()
    with pytest.raises(SettingsError, match=f"--database-url-file {tmp_path}/missing: No such file or directory"):
        _settings("--database-url-file", str(tmp_path / "missing"))


def test_a_tls_key_other_users_can_read_is_used_but_warned_about(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    key.write_text("-----BEGIN PRIVATE KEY-----\n")
    key.chmod(0o644)
    settings = _settings("--tls-cert", str(cert), "--tls-key", str(key), environ={"ASTRABOX_DATABASE_URL": "x"})

    with structlog.testing.capture_logs() as loose:
        assert tls_credentials(settings) is not None
    key.chmod(0o600)
    with structlog.testing.capture_logs() as private:
        assert tls_credentials(settings) is not None

    assert [(e["event"], e["mode"], e["fix"]) for e in loose] == [
        ("tls_key_readable_by_others", "0o644", f"chmod 600 {key}")
    ]
    assert private == []
