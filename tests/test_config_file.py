"""The config file (`--config FILE`, serverkit.config_file) and `--print-config`: a flag over its
variable over the file over the default; a file's mistakes refused naming the file and the key; the
effective settings printed with their sources, secrets masked, as a file that reads back the same."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path

import pytest

from controlplane.settings import ControlPlaneSettings
from dataplane_agent.settings import AgentSettings
from tests.test_settings_shape import demo

PASSWORD = "hunter2-very-secret"
DATABASE_URL = f"postgresql://astrabox:{PASSWORD}@db.internal/astrabox"


def write(tmp_path: Path, text: str, name: str = "settings.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def printed(load: object, argv: Sequence[str], environ: Mapping[str, str], capsys: pytest.CaptureFixture[str]) -> str:
    """What `--print-config` prints, having checked it exits 0."""
    with pytest.raises(SystemExit) as exited:
        load([*argv, "--print-config"], environ)  # type: ignore[operator]
    assert exited.value.code == 0
    return capsys.readouterr().out


def usage_error(argv: Sequence[str], capsys: pytest.CaptureFixture[str], environ: Mapping[str, str] = {}) -> str:
    with pytest.raises(SystemExit) as exited:
        demo(argv, environ)
    assert exited.value.code == 2
    return capsys.readouterr().err


def test_a_flag_beats_its_variable_which_beats_the_file_which_beats_the_default(tmp_path: Path) -> None:
    config = write(tmp_path, 'name = "from-file"\ncount = 5\nwait = 0.5\neager = false\n')

    from_file = demo(["--config", config])
    assert (from_file.name, from_file.count, from_file.wait, from_file.eager) == (
        "from-file",
        5,
        timedelta(seconds=0.5),
        False,
    )
    assert demo(["--config", config], {"DEMO_NAME": "from-env", "DEMO_EAGER": "yes"}).name == "from-env"
    assert demo(["--config", config], {"DEMO_EAGER": "yes"}).eager is True
    assert demo(["--config", config, "--name", "from-flag"], {"DEMO_NAME": "from-env"}).name == "from-flag"
    assert demo(["--config", config, "--eager"]).eager is True
    assert demo([]).count == 3


def test_print_config_names_each_values_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write(tmp_path, "count = 5\nwait = 0.5\n")

    out = printed(demo, ["--config", config, "--name", "flagged"], {"DEMO_WAIT": "2"}, capsys)

    lines = [line for line in out.splitlines() if not line.startswith("#")]
    assert lines == ['name = "flagged"  # flag', "count = 5  # file", "wait = 2.0  # env", "eager = true  # default"]
    assert "# token = (not set)  # default, a secret" in out


def test_a_files_mistakes_are_refused_naming_the_file_and_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = write(tmp_path, "cuont = 4\n", "typo.toml")
    assert f"demo: error: unknown setting cuont in {typo}; did you mean count?" in usage_error(
        ["--config", typo], capsys
    )

    bad = write(tmp_path, "count = 0\n", "bad.toml")
    assert f"demo: error: count in {bad}: must be a positive number, got '0'" in usage_error(["--config", bad], capsys)

    not_a_number = write(tmp_path, 'wait = "soon"\n', "nan.toml")
    err = usage_error(["--config", not_a_number], capsys)
    assert f"demo: error: wait in {not_a_number}: invalid float value: 'soon'" in err

    switch = write(tmp_path, 'eager = "yes"\n', "switch.toml")
    assert f'eager in {switch} must be true or false, got "yes"' in usage_error(["--config", switch], capsys)

    broken = write(tmp_path, "count = = 4\n", "broken.toml")
    assert f"demo: error: the config file {broken} is not valid TOML: " in usage_error(["--config", broken], capsys)
    assert "line 1" in usage_error(["--config", broken], capsys)

    table = write(tmp_path, "[count]\nvalue = 4\n", "table.toml")
    assert f"count in {table} must be a single value" in usage_error(["--config", table], capsys)

    missing = str(tmp_path / "missing.toml")
    assert f"cannot read the config file {missing}: No such file" in usage_error(["--config", missing], capsys)

    # A good file with a bad variable: the variable is what is named.
    good = write(tmp_path, "count = 4\n", "good.toml")
    err = usage_error(["--config", good], capsys, {"DEMO_COUNT": "-1"})
    assert "demo: error: environment variable DEMO_COUNT: must be a positive number, got '-1'" in err


def test_a_secret_in_the_file_is_refused_without_its_value_and_read_from_the_file_it_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inline = write(tmp_path, f'token = "{PASSWORD}"\n', "inline.toml")
    err = usage_error(["--config", inline], capsys)
    assert f"token in {inline} is a secret and is not read from a config file" in err and "token_file" in err
    assert PASSWORD not in err

    misspelt = write(tmp_path, f'tokn = "{PASSWORD}"\n', "misspelt.toml")
    err = usage_error(["--config", misspelt], capsys)
    assert "unknown setting tokn" in err and "did you mean token" in err and PASSWORD not in err

    (tmp_path / "token").write_text(PASSWORD + "\n")
    by_file = write(tmp_path, f'token_file = "{tmp_path / "token"}"\n', "by_file.toml")
    assert demo(["--config", by_file]).token == PASSWORD
    assert demo(["--config", by_file], {"DEMO_TOKEN": "from-env"}).token == "from-env"
    out = printed(demo, ["--config", by_file], {}, capsys)
    assert f'token_file = "{tmp_path / "token"}"  # file' in out and PASSWORD not in out


def test_print_config_masks_the_control_planes_secrets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "credential-key"
    key.write_text("k" * 43 + "=\n")
    key.chmod(0o600)
    config = write(tmp_path, f'credential_key_file = "{key}"\noidc_jwks = "https://u:{PASSWORD}x@idp/jwks"\n')
    environ = {"ASTRABOX_DATABASE_URL": DATABASE_URL, "ASTRABOX_ENROLLMENT_TOKEN": "enrol-" + PASSWORD}

    out = printed(ControlPlaneSettings.from_args, ["--config", config], environ, capsys)

    assert PASSWORD not in out and "k" * 43 not in out
    assert '# database_url = "***"  # env, a secret' in out
    assert '# enrollment_token = "***"  # env, a secret' in out
    assert f'credential_key_file = "{key}"  # file' in out
    assert 'oidc_jwks = "https://u:***@idp/jwks"  # file' in out


@pytest.mark.parametrize("process", ["controlplane", "agent"])
def test_print_config_reads_back_as_a_config_file_giving_the_same_settings(
    process: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if process == "controlplane":
        load: object = ControlPlaneSettings.from_args
        environ = {"ASTRABOX_DATABASE_URL": DATABASE_URL, "ASTRABOX_LEASE_TTL": "21.5"}
        argv = ["--config", write(tmp_path, 'listen = "0.0.0.0:9000"\nsweep_batch = 50\n'), "--idle-stop-after", "0"]
    else:
        load = AgentSettings.from_args
        environ = {"ASTRABOX_RELAY_WINDOW": "1024", "ASTRABOX_AGENT_STATE_DIR": str(tmp_path / "state")}
        argv = ["--config", write(tmp_path, 'driver = "docker"\nwarm_engines = false\nrelay_redial_longest = 3.5\n')]
    original = load(argv, environ)  # type: ignore[operator]

    out = printed(load, argv, environ, capsys)
    secrets_only = {name: value for name, value in environ.items() if name == "ASTRABOX_DATABASE_URL"}
    again = load(["--config", write(tmp_path, out, "printed.toml")], secrets_only)  # type: ignore[operator]

    assert again == original
    assert printed(load, ["--config", str(tmp_path / "printed.toml")], secrets_only, capsys).count("# file") == len(
        [line for line in out.splitlines() if not line.startswith("#")]
    )


def test_every_setting_of_both_processes_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    out = printed(AgentSettings.from_args, [], {}, capsys)
    for name in ("relay_batch_size", "relay_window", "warm_pool_retry_first", "reconcile_retry", "api_key",
                 "health_interval", "driver_probe_interval", "driver_probe_timeout", "sandbox_create_timeout",
                 "engine_start_timeout", "layer_sweep_interval"):  # fmt: skip
        assert f"{name} = " in out, name
    out = printed(ControlPlaneSettings.from_args, [], {}, capsys)  # no database URL needed to print
    for name in ("lease_ttl", "heartbeat_interval", "credentials_ttl", "command_lease_ttl", "sweep_batch",
                 "workspace_reply_timeout", "workspace_delivery_timeout", "replica_connect_timeout", "oidc_leeway",
                 "oidc_jwks_refresh"):  # fmt: skip
        assert f"{name} = " in out, name
    assert "# database_url = (not set)  # default, a secret" in out


@pytest.mark.parametrize("process", ["controlplane", "agent"])
def test_astrabox_config_names_the_file_when_no_config_flag_is_given(
    process: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if process == "controlplane":
        load: object = ControlPlaneSettings.from_args
        base, prog = {"ASTRABOX_DATABASE_URL": DATABASE_URL}, "astrabox controlplane"
        key, read = "sweep_batch", lambda settings: settings.sweep_batch
    else:
        load, base, prog = AgentSettings.from_args, {}, "astrabox agent"
        key, read = "relay_window", lambda settings: settings.relay_window
    from_env = write(tmp_path, f"{key} = 7\n", "from-env.toml")
    from_flag = write(tmp_path, f"{key} = 9\n", "from-flag.toml")
    environ = {**base, "ASTRABOX_CONFIG": from_env}

    assert read(load([], environ)) == 7  # type: ignore[operator]
    assert read(load(["--config", from_flag], environ)) == 9  # type: ignore[operator]
    assert read(load(["--config", ""], environ)) == read(load([], base))  # type: ignore[operator]
    assert f"{key} = 7  # file" in printed(load, [], environ, capsys)

    # The same refusals as --config's, naming the file the variable gave.
    typo = write(tmp_path, f"{key}s = 7\n", "typo.toml")
    missing = str(tmp_path / "missing.toml")
    for path, error in (
        (typo, f"{prog}: error: unknown setting {key}s in {typo}; did you mean {key}?"),
        (missing, f"{prog}: error: cannot read the config file {missing}: No such file"),
    ):
        with pytest.raises(SystemExit) as exited:
            load([], {**base, "ASTRABOX_CONFIG": path})  # type: ignore[operator]
        assert exited.value.code == 2
        assert error in capsys.readouterr().err
