"""A process's settings declared once, on the fields of its frozen dataclass, and read one way.

Each field that the command line and the environment set says so in its metadata, with `option`
(its flag and older flags, its environment variable and older ones, its parser, its help) or with
`secret` (an `astrabox.secret_settings.SecretOption`):

    @dataclass(frozen=True, slots=True)
    class Settings:
        listen: str = field(default="127.0.0.1:7233", metadata=option(
            "--listen", env="ASTRABOX_LISTEN", help="address to serve on (env %(env)s, default %(default)s)"))
        token: str = field(default="", repr=False, metadata=secret(TOKEN))
        secrets_on_command_line: tuple[SecretOption, ...] = ()

    settings = from_args(Settings, argv, environ, prog="astrabox x", description="...")

`parser` builds the argparse parser from the declarations (its `--help` is the reference for every
setting); `load` parses and reads them, `from_args` returns the dataclass. A value is taken from its
flag, else from its environment variable (the first of the names given that is set, even to ""),
else from the config file `--config FILE` (`serverkit.config_file`: TOML, keys the field names),
else from the default. A variable's or the file's value is parsed by the flag's parser, so a bad
value fails as a bad flag does: argparse's usage error, exit status 2, naming the variable or the
file and key it came from. A secret is read by its SecretOption (flag, file flag, variable, the
variable's `_FILE`; SecretSettingError when it is given twice or its file cannot be read), else
from the file named by the config file's `<name>_file`; the secrets given as flags rather than by
environment or file fill a field named `secrets_on_command_line`, when the dataclass has one, for
the process to warn about. Fields without metadata keep their defaults, or take what `overrides`
gives. `--print-config` prints every setting's effective value and source as a config file,
secrets masked, and exits 0, as `--help` does.

Help texts may say `%(env)s` for the setting's environment variable and `%(default)s` for what
applies when no flag is given (the variable's text, else the default).

Not pydantic-settings (which pip installs here), though it reads TOML files too: its command line cannot keep these processes'
interface as it is. Each field's variable and flag names come from one alias or one prefix, so a
flag with an older name (`--docker-cpus`) and a variable with another (`ASTRABOX_DOCKER_CPUS`)
cannot both be declared; secrets from files come from a directory of files named after fields, not
from `--<name>-file` and `$<VAR>_FILE`, with no warning for a secret given as a flag; a bad value
fails with a pydantic ValidationError rather than argparse's usage error; and `--help` is its own
(type metavars, "(default: ...)" after each line), not the help these processes print. What is
here is the few lines of argparse that do exactly what they did, declared once per setting, and
the config file's errors name the file, the key and the closest known key.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from astrabox.secret_settings import SecretOption
from serverkit import config_file
from serverkit.config_file import SECRET_FILE_SUFFIX, ConfigFile, ConfigFileError, Shown

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "CONFIG_ENV",
    "Loaded",
    "Option",
    "Secret",
    "add_arguments",
    "from_args",
    "load",
    "not_negative_int",
    "not_negative_seconds",
    "option",
    "parser",
    "positive_int",
    "positive_seconds",
    "same_as",
    "secret",
    "tuned",
]

S = TypeVar("S", bound="DataclassInstance")

# The variable naming the config file of both server processes when `--config` is not given.
CONFIG_ENV = "ASTRABOX_CONFIG"
_KEY = "serverkit.settings"
_SECRETS_FIELD = "secrets_on_command_line"
_CONFIG_FLAG = "--config"
# What an option's attribute holds when its flag was not given.
_UNSET: Any = object()
_NO_DEFAULT: Any = dataclasses.MISSING
# What turns a switch off when its variable says so; anything else turns it on.
_OFF = ("0", "false", "no", "off")


@dataclass(frozen=True, slots=True)
class Option:
    """A setting given by a flag or an environment variable; see `option`."""

    flags: tuple[str, ...]
    env: tuple[str, ...]
    help: str
    default: Any = _NO_DEFAULT
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    convert: Callable[[Any], Any] | None = None
    switch: bool = False


@dataclass(frozen=True, slots=True)
class Secret:
    """A setting given as a secret; see `secret`."""

    option: SecretOption
    note: str = ""


def option(
    *flags: str,
    env: str | tuple[str, ...] = (),
    help: str,
    default: Any = _NO_DEFAULT,
    type: Callable[[str], Any] | None = None,
    choices: tuple[str, ...] | None = None,
    convert: Callable[[Any], Any] | None = None,
    switch: bool = False,
) -> dict[str, Option]:
    """A field's metadata: set by `flags` (the first its name, the others older names still taken) or
    by the variables `env` (likewise), parsed by `type` and limited to `choices` as argparse does.
    `default` is what the command line shows and parses when neither is given (else the field's
    default); `convert` turns the parsed value into the field's (seconds into a timedelta, say).
    A `switch` is a bool with a `--no-` flag, off when its variable is one of 0, false, no, off."""
    names = (env,) if isinstance(env, str) else env
    return {_KEY: Option(flags, names, help, default, type, choices, convert, switch)}


def tuned(
    flag: str,
    default: float,
    what: str,
    *,
    type: Callable[[str], Any] = float,
    convert: Callable[[Any], Any] | None = None,
) -> Any:
    """A field for a number an operator tunes (a timeout, a batch size, a backoff): `flag`, its
    variable ASTRABOX_<FLAG>, `what` it is for help, `default` parsed by `type`; `convert` turns the
    number into the field's value (seconds into a timedelta, say)."""
    metadata = option(
        flag,
        env="ASTRABOX_" + flag.removeprefix("--").replace("-", "_").upper(),
        type=type,
        default=default,
        convert=convert,
        help=f"{what} (env %(env)s, default %(default)s)",
    )
    return dataclasses.field(default=convert(default) if convert else default, metadata=metadata)


def metrics_listen() -> Any:
    """The field both processes serve Prometheus metrics by (serverkit.metrics_http): host:port,
    http://host:port/metrics; empty (the default): none."""
    return dataclasses.field(
        default="",
        metadata=option(
            "--metrics-listen",
            env="ASTRABOX_METRICS_LISTEN",
            help="host:port to serve Prometheus metrics on, at /metrics (env %(env)s, default none: off)",
        ),
    )


def otlp_endpoint() -> Any:
    """The field both processes export traces by (serverkit.tracing): an OTLP/gRPC collector;
    empty (the default): none."""
    return dataclasses.field(
        default="",
        metadata=option(
            "--otlp-endpoint",
            env=("ASTRABOX_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"),
            help="export traces over OTLP/gRPC to this collector, e.g. http://127.0.0.1:4317 (env %(env)s or "
            "OTEL_EXPORTER_OTLP_ENDPOINT; needs astrabox-server[otlp]; default none: off)",
        ),
    )


def same_as(settings_type: type[DataclassInstance], name: str, note: str = "") -> Any:
    """A field declared as `settings_type`'s field `name` is: the same flag, variable, default,
    parser and help (`note` added to the help), for a process that hands the setting on to another
    process's settings, as `astrabox up` hands its agent's capacity to `AgentSettings`."""
    declared = next(field for field in dataclasses.fields(settings_type) if field.name == name)
    option = declared.metadata[_KEY]
    if not isinstance(option, Option):
        raise TypeError(f"{settings_type.__name__}.{name} is not an option")
    metadata = {_KEY: dataclasses.replace(option, help=option.help + note) if note else option}
    if declared.default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=declared.default_factory, metadata=metadata)
    return dataclasses.field(default=declared.default, metadata=metadata)


def secret(secret_option: SecretOption, note: str = "") -> dict[str, Secret]:
    """A field's metadata: the secret `secret_option`; `note` ends its flag's help."""
    return {_KEY: Secret(secret_option, note)}


def positive_int(text: str) -> int:
    """A flag's parser: a whole number above 0."""
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def not_negative_int(text: str) -> int:
    """A flag's parser: a whole number, 0 or more."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text!r}")
    return value


def not_negative_seconds(text: str) -> float:
    """A flag's parser: seconds, 0 or more and at most a day."""
    value = float(text)
    if not 0 <= value <= 86400:
        raise argparse.ArgumentTypeError(f"must be 0 or more and at most 86400 seconds, got {text!r}")
    return value


def positive_seconds(text: str) -> float:
    """A flag's parser: seconds, more than 0 and at most a day."""
    value = float(text)
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 86400 seconds, got {text!r}")
    return value


@dataclass(frozen=True, slots=True)
class Loaded:
    """A process's settings as read: the values by field name, and the parsed command line."""

    values: dict[str, Any]
    args: argparse.Namespace
    config: ConfigFile | None = None


def parser(
    settings_type: type[S],
    environ: Mapping[str, str] | None = None,
    *,
    prog: str,
    description: str,
    config: ConfigFile | None = None,
    config_env: str | None = None,
) -> argparse.ArgumentParser:
    """The command line of `settings_type`, its defaults taken from `environ` (default os.environ),
    then from `config`, the config file; `config_env` names the variable `--config` defaults to."""
    result = argparse.ArgumentParser(prog=prog, description=description)
    from_env = f" (env {config_env}; '' for none)" if config_env else ""
    result.add_argument(
        _CONFIG_FLAG,
        metavar="FILE",
        help=f"read settings from this TOML file{from_env}, one `name = value` per setting (names as "
        "--print-config writes them); environment variables and flags override it",
    )
    result.add_argument(
        "--print-config",
        action="store_true",
        help="print the effective settings, each with its source (default, file, env, flag) and secrets "
        "masked, as a config file, and exit",
    )
    add_arguments(settings_type, result, environ, config)
    return result


def add_arguments(
    settings_type: type[S],
    to: argparse.ArgumentParser,
    environ: Mapping[str, str] | None = None,
    config: ConfigFile | None = None,
) -> None:
    """Adds the flags of `settings_type`'s settings to `to`, in the order of its fields."""
    env = os.environ if environ is None else environ
    for field in dataclasses.fields(settings_type):
        declared = field.metadata.get(_KEY)
        if isinstance(declared, Secret):
            declared.option.add_to(to, note=declared.note)
        elif isinstance(declared, Option):
            _add_option(to, field, declared, env, config)


def load(
    settings_type: type[S],
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    prog: str,
    description: str,
    config_env: str | None = None,
) -> Loaded:
    """`settings_type`'s settings from the command line `argv` (default sys.argv), `environ` (default
    os.environ) and the config file `--config` names (else the variable `config_env`, when given):
    a flag over its variable over the file over the default. Exits as argparse does (status 2, the message naming the flag, variable or file) on a bad
    value or config file; with `--print-config`, prints the settings and exits 0. SecretSettingError
    as SecretOption.read."""
    env = os.environ if environ is None else environ
    early = argparse.ArgumentParser(prog=prog, add_help=False)
    early.add_argument(_CONFIG_FLAG)
    config_path = early.parse_known_args(argv)[0].config
    if config_path is None and config_env:
        config_path = env.get(config_env)
    config = None
    if config_path:
        try:
            config = config_file.load(config_path, *_file_keys(settings_type))
        except ConfigFileError as error:
            parser(settings_type, env, prog=prog, description=description, config_env=config_env).error(str(error))
    command_line = parser(settings_type, env, prog=prog, description=description, config=config, config_env=config_env)
    fields = dataclasses.fields(settings_type)
    # Each option's attribute stays _UNSET unless its flag is given: argparse leaves set attributes be.
    args = command_line.parse_args(
        argv, argparse.Namespace(**{f.name: _UNSET for f in fields if isinstance(f.metadata.get(_KEY), Option)})
    )
    values: dict[str, Any] = {}
    shown: list[Shown] = []
    given_as_flags: list[SecretOption] = []
    for field in fields:
        declared = field.metadata.get(_KEY)
        if isinstance(declared, Secret):
            values[field.name], source = _secret(field.name, declared.option, args, env, config)
            if source == "file" and config is not None:
                shown.append(
                    Shown(field.name + SECRET_FILE_SUFFIX, config.values[field.name + SECRET_FILE_SUFFIX], source)
                )
            else:
                shown.append(Shown(field.name, values[field.name], source, secret=True))
            if declared.option.on_command_line(args):
                given_as_flags.append(declared.option)
        elif isinstance(declared, Option):
            value, source = _option(command_line, field, declared, args, env, config)
            shown.append(Shown(field.name, value, source))
            values[field.name] = declared.convert(value) if declared.convert and value is not None else value
    if any(field.name == _SECRETS_FIELD for field in fields):
        values[_SECRETS_FIELD] = tuple(given_as_flags)
    if args.print_config:
        print(config_file.render(prog, shown), end="", flush=True)
        raise SystemExit(0)
    return Loaded(values, args, config)


def from_args(
    settings_type: type[S],
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    prog: str,
    description: str,
    config_env: str | None = None,
    **overrides: Any,
) -> S:
    """`settings_type` as `load` reads it, then `overrides`."""
    loaded = load(settings_type, argv, environ, prog=prog, description=description, config_env=config_env)
    return settings_type(**{**loaded.values, **overrides})


def _file_keys(settings_type: type[S]) -> tuple[list[str], list[str]]:
    """The keys a config file may hold (options, and `<secret>_file`), and the secrets it may not."""
    known, secrets = [], []
    for field in dataclasses.fields(settings_type):
        declared = field.metadata.get(_KEY)
        if isinstance(declared, Option):
            known.append(field.name)
        elif isinstance(declared, Secret):
            known.append(field.name + SECRET_FILE_SUFFIX)
            secrets.append(field.name)
    return known, secrets


def _secret(
    name: str, declared: SecretOption, args: argparse.Namespace, env: Mapping[str, str], config: ConfigFile | None
) -> tuple[str, str]:
    value = declared.read(args, env)
    source = declared.given_in(args, env)
    if source:
        return value, source
    key = name + SECRET_FILE_SUFFIX
    if config is not None and key in config.values:
        return declared.read_file(config.where(key), str(config.values[key])), "file"
    return value, "default"


def _option(
    command_line: argparse.ArgumentParser,
    field: dataclasses.Field[Any],
    declared: Option,
    args: argparse.Namespace,
    env: Mapping[str, str],
    config: ConfigFile | None,
) -> tuple[Any, str]:
    """The setting's value as given, before `convert`, and where it came from."""
    given = getattr(args, field.name)
    if given is not _UNSET:
        return given, "flag"
    name = next((name for name in declared.env if name in env), None)
    if name is not None:
        if declared.switch:
            return env[name].strip().lower() not in _OFF, "env"
        return _parsed(command_line, declared, env[name], f"environment variable {name}"), "env"
    if config is not None and field.name in config.values:
        value, where = config.values[field.name], config.where(field.name)
        if declared.switch != isinstance(value, bool):
            wanted = "true or false" if declared.switch else "a number or a string, not true or false"
            command_line.error(f"{where} must be {wanted}, got {config_file.toml_value(value)}")
        return (value if declared.switch else _parsed(command_line, declared, str(value), where)), "file"
    default = _default(field, declared)
    if isinstance(default, str) and declared.type is not None:
        default = _parsed(command_line, declared, default, f"the default of {field.name}")
    return default, "default"


def _parsed(command_line: argparse.ArgumentParser, declared: Option, text: str, where: str) -> Any:
    """`text` parsed as the flag would be; argparse's usage error naming `where` if it cannot be."""
    try:
        value = declared.type(text) if declared.type is not None else text
    except argparse.ArgumentTypeError as error:
        command_line.error(f"{where}: {error}")
    except (TypeError, ValueError):
        command_line.error(f"{where}: invalid {getattr(declared.type, '__name__', '')} value: {text!r}")
    if declared.choices is not None and value not in declared.choices:
        command_line.error(f"{where}: invalid choice: {value!r} (choose from {', '.join(declared.choices)})")
    return value


def _add_option(
    to: argparse.ArgumentParser,
    field: dataclasses.Field[Any],
    declared: Option,
    env: Mapping[str, str],
    config: ConfigFile | None,
) -> None:
    # The default shown in help is what applies without the flag: the variable, the file, the default.
    default = _default(field, declared)
    if config is not None and field.name in config.values:
        default = config.values[field.name]
    text = next((env[name] for name in declared.env if name in env), None)
    if text is not None:
        default = text.strip().lower() not in _OFF if declared.switch else text
    help_text = declared.help.replace("%(env)s", declared.env[0]) if declared.env else declared.help
    arguments: dict[str, Any] = {"dest": field.name, "default": default, "help": help_text}
    if declared.switch:
        arguments["action"] = argparse.BooleanOptionalAction
    if declared.type is not None:
        arguments["type"] = declared.type
    if declared.choices is not None:
        arguments["choices"] = declared.choices
    to.add_argument(*declared.flags, **arguments)


def _default(field: dataclasses.Field[Any], declared: Option) -> Any:
    if declared.default is not _NO_DEFAULT:
        return declared.default
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None
