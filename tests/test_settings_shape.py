"""One settings shape (serverkit.settings): each setting declared once on its dataclass field, read
from a flag over its environment variable over its default, secrets through SecretOption."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from astrabox.secret_settings import SecretOption, SecretSettingError
from astrabox_server.stack import UpSettings, agent_metrics_listen
from controlplane.settings import ControlPlaneSettings
from dataplane_agent.settings import AgentSettings
from serverkit import settings
from serverkit.settings import Option, Secret, option, secret

TOKEN = SecretOption("token", "DEMO_TOKEN", "the demo token")


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


@dataclass(frozen=True, slots=True)
class Demo:
    name: str = field(default="anon", metadata=option("--name", env="DEMO_NAME", help="a name (env %(env)s)"))
    count: int = field(
        default=3,
        metadata=option(
            "--count", "--old-count", env=("DEMO_COUNT", "DEMO_OLD_COUNT"), type=_positive, help="(default %(default)s)"
        ),
    )
    wait: timedelta = field(
        default=timedelta(seconds=5),
        metadata=option(
            "--wait", env="DEMO_WAIT", type=float, default=5.0, convert=lambda s: timedelta(seconds=s), help=""
        ),
    )
    eager: bool = field(default=True, metadata=option("--eager", env="DEMO_EAGER", switch=True, help="eager"))
    token: str = field(default="", repr=False, metadata=secret(TOKEN))
    not_a_flag: str = "kept"
    secrets_on_command_line: tuple[SecretOption, ...] = ()


def demo(argv: Sequence[str] = (), environ: Mapping[str, str] | None = None, **overrides: Any) -> Demo:
    return settings.from_args(Demo, list(argv), environ or {}, prog="demo", description="a demo", **overrides)


def test_a_flag_beats_its_variable_which_beats_the_default() -> None:
    assert demo().name == "anon"
    assert demo(environ={"DEMO_NAME": "from-env"}).name == "from-env"
    assert demo(["--name", "from-flag"], {"DEMO_NAME": "from-env"}).name == "from-flag"
    assert demo(environ={"DEMO_NAME": ""}).name == ""  # set, even empty, is given
    assert demo(["--name", "flag"], not_a_flag="override").not_a_flag == "override"


def test_older_flag_and_variable_names_still_work_the_new_variable_first() -> None:
    assert demo(["--old-count", "7"]).count == 7
    assert demo(environ={"DEMO_OLD_COUNT": "8"}).count == 8
    assert demo(environ={"DEMO_COUNT": "9", "DEMO_OLD_COUNT": "8"}).count == 9


def test_values_are_parsed_and_converted_to_the_fields_types() -> None:
    settings = demo(["--count", "4"], {"DEMO_WAIT": "1.5"})
    assert (settings.count, settings.wait) == (4, timedelta(seconds=1.5))
    assert demo().wait == timedelta(seconds=5)
    assert [demo(environ={"DEMO_EAGER": text}).eager for text in ("0", " Off ", "no", "false", "1", "yes")] == [
        False,
        False,
        False,
        False,
        True,
        True,
    ]
    assert demo(["--eager"], {"DEMO_EAGER": "off"}).eager is True
    assert demo(["--no-eager"]).eager is False


def test_a_bad_value_from_a_flag_or_a_variable_is_a_usage_error_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, environ in ((["--count", "0"], {}), ([], {"DEMO_COUNT": "0"})):
        with pytest.raises(SystemExit) as exited:
            demo(argv, environ)
        assert exited.value.code == 2
        source = "argument --count/--old-count" if argv else "environment variable DEMO_COUNT"
        assert f"demo: error: {source}: must be a positive number, got '0'" in capsys.readouterr().err
    assert demo(["--count", "2"], {"DEMO_COUNT": "nonsense"}).count == 2  # the flag wins; the variable is not read


def test_a_secret_comes_from_a_file_and_one_given_as_a_flag_is_reported(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-file\n")
    by_file_flag = demo(["--token-file", str(tmp_path / "token")])
    by_file_variable = demo(environ={"DEMO_TOKEN_FILE": str(tmp_path / "token")})
    by_flag = demo(["--token", "on-the-line"])

    assert (by_file_flag.token, by_file_variable.token, by_flag.token) == ("from-file", "from-file", "on-the-line")
    assert by_file_flag.secrets_on_command_line == by_file_variable.secrets_on_command_line == ()
    assert by_flag.secrets_on_command_line == (TOKEN,)
    assert "from-file" not in repr(by_file_flag)
    with pytest.raises(SecretSettingError, match="the demo token is given by both --token and --token-file"):
        demo(["--token", "x", "--token-file", str(tmp_path / "token")])
    with pytest.raises(SecretSettingError, match=f"cannot read the demo token from DEMO_TOKEN_FILE {tmp_path}/none"):
        demo(environ={"DEMO_TOKEN_FILE": str(tmp_path / "none")})


def test_help_names_each_variable_and_shows_the_default_that_applies(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        demo(["--help"], {"DEMO_COUNT": "12"})
    shown = " ".join(capsys.readouterr().out.split())
    assert "a name (env DEMO_NAME)" in shown and "(default 12)" in shown
    assert "--eager, --no-eager" in shown and "--token-file PATH" in shown


@pytest.mark.parametrize("settings_type", [ControlPlaneSettings, AgentSettings])
def test_every_declared_setting_is_in_help(settings_type: type[ControlPlaneSettings | AgentSettings]) -> None:
    """`--help` is the reference: every flag, older flag and variable a process reads is listed."""
    shown = " ".join(settings_type.parser({}).format_help().split())
    for declared_field in dataclasses.fields(settings_type):
        declared = declared_field.metadata.get("serverkit.settings")
        if isinstance(declared, Option):
            assert all(flag in shown for flag in declared.flags), declared_field.name
            assert f"env {declared.env[0]}" in shown, declared_field.name
        elif isinstance(declared, Secret):
            assert f"{declared.option.flag} VALUE" in shown and declared.option.file_env in shown


def test_the_processes_read_their_settings_the_same_way(tmp_path: Path) -> None:
    (tmp_path / "url").write_text("postgresql://u:pw@db/x\n")
    environ = {"ASTRABOX_DATABASE_URL_FILE": str(tmp_path / "url"), "ASTRABOX_LISTEN": "127.0.0.1:1"}

    controlplane = ControlPlaneSettings.from_args(["--idle-stop-after", "0"], environ)
    up = UpSettings.from_args(["--data-dir", str(tmp_path)], environ)
    agent = AgentSettings.from_args([], {"ASTRABOX_DOCKER_CPUS": "0.5"}, agent_id="local")

    assert (controlplane.database_url, controlplane.listen, controlplane.idle_stop_after) == (
        "postgresql://u:pw@db/x",
        "127.0.0.1:1",
        timedelta(0),
    )
    assert (up.database_url, up.listen, up.data_dir) == ("postgresql://u:pw@db/x", "127.0.0.1:7233", tmp_path)
    assert (agent.sandbox_cpus, agent.agent_id) == (0.5, "local")


def test_up_takes_the_halves_settings_by_their_own_flags_variables_and_config_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`astrabox up` hands metrics, idle stop, capacity and the allowed networks to the halves: the
    same flag, variable, default and help as theirs, and its config file takes their keys."""
    environ = {"ASTRABOX_AGENT_CAPACITY": "3", "ASTRABOX_IDLE_STOP_AFTER": "0"}
    (tmp_path / "up.toml").write_text('metrics_listen = "127.0.0.1:9464"\negress_allowed_networks = "10.0.0.0/8"\n')

    up = UpSettings.from_args(
        ["--config", str(tmp_path / "up.toml"), "--mcp-allowed-networks", "127.0.0.1/32"], environ
    )

    assert (up.capacity, up.idle_stop_after, up.metrics_listen) == (3, timedelta(0), "127.0.0.1:9464")
    assert (up.egress_allowed_networks, up.mcp_allowed_networks) == ("10.0.0.0/8", "127.0.0.1/32")
    defaults = UpSettings.from_args([], {})
    assert (defaults.capacity, defaults.idle_stop_after) == (AgentSettings().capacity, timedelta(seconds=900))
    with pytest.raises(SystemExit):
        UpSettings.from_args(["--help"], {})
    shown = " ".join(capsys.readouterr().out.split())
    for flag, variable in (
        ("--metrics-listen", "ASTRABOX_METRICS_LISTEN"),
        ("--idle-stop-after", "ASTRABOX_IDLE_STOP_AFTER"),
        ("--capacity", "ASTRABOX_AGENT_CAPACITY"),
        ("--egress-allowed-networks", "ASTRABOX_AGENT_EGRESS_ALLOWED_NETWORKS"),
        ("--mcp-allowed-networks", "ASTRABOX_AGENT_MCP_ALLOWED_NETWORKS"),
    ):
        assert flag in shown and f"env {variable}" in shown, flag


def test_ups_agent_serves_metrics_beside_its_control_plane() -> None:
    assert agent_metrics_listen("127.0.0.1:9464") == "127.0.0.1:9465"  # as deploy/prometheus has them
    assert agent_metrics_listen("[::1]:0") == "[::1]:0"  # a free port of its own
    assert agent_metrics_listen("") == ""
