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
setting); `from_args` parses and returns the dataclass. A value is taken from its flag, else from
its environment variable (the first of the names given that is set, even to ""), else from the
default. The environment's text is checked by the flag's parser, when the flag is not given, so a
bad variable and a bad flag fail alike: argparse's usage error, exit status 2. A secret is read by
its SecretOption (flag, file flag, variable, the variable's `_FILE`; SecretSettingError when it is
given twice or its file cannot be read); the secrets given as flags rather than by environment or
file fill a field named `secrets_on_command_line`, when the dataclass has one, for the process to
warn about. Fields without metadata keep their defaults, or take what `overrides` gives.

Help texts may say `%(env)s` for the setting's environment variable and `%(default)s` for what
applies when no flag is given (the variable's text, else the default).

Not pydantic-settings (which pip installs here): its command line cannot keep these processes'
interface as it is. Each field's variable and flag names come from one alias or one prefix, so a
flag with an older name (`--docker-cpus`) and a variable with another (`ASTRABOX_DOCKER_CPUS`)
cannot both be declared; secrets from files come from a directory of files named after fields, not
from `--<name>-file` and `$<VAR>_FILE`, with no warning for a secret given as a flag; a bad value
fails with a pydantic ValidationError rather than argparse's usage error; and `--help` is its own
(type metavars, "(default: ...)" after each line), not the help these processes print. What is
here is the few lines of argparse that do exactly what they did, declared once per setting.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from astrabox.secret_settings import SecretOption

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["Option", "Secret", "add_arguments", "from_args", "option", "parser", "read", "secret"]

S = TypeVar("S", bound="DataclassInstance")

_KEY = "serverkit.settings"
_SECRETS_FIELD = "secrets_on_command_line"
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


def secret(secret_option: SecretOption, note: str = "") -> dict[str, Secret]:
    """A field's metadata: the secret `secret_option`; `note` ends its flag's help."""
    return {_KEY: Secret(secret_option, note)}


def parser(
    settings_type: type[S], environ: Mapping[str, str] | None = None, *, prog: str, description: str
) -> argparse.ArgumentParser:
    """The command line of `settings_type`, its defaults taken from `environ` (default os.environ)."""
    result = argparse.ArgumentParser(prog=prog, description=description)
    add_arguments(settings_type, result, environ)
    return result


def add_arguments(
    settings_type: type[S], to: argparse.ArgumentParser, environ: Mapping[str, str] | None = None
) -> None:
    """Adds the flags of `settings_type`'s settings to `to`, in the order of its fields."""
    env = os.environ if environ is None else environ
    for field in dataclasses.fields(settings_type):
        declared = field.metadata.get(_KEY)
        if isinstance(declared, Secret):
            declared.option.add_to(to, note=declared.note)
        elif isinstance(declared, Option):
            _add_option(to, field, declared, env)


def read(settings_type: type[S], args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The values of `settings_type`'s settings in `args` (parsed by its parser), by field name, its
    secrets read from `args` or `environ` (default os.environ). SecretSettingError as SecretOption.read."""
    values: dict[str, Any] = {}
    given_as_flags: list[SecretOption] = []
    fields = dataclasses.fields(settings_type)
    for field in fields:
        declared = field.metadata.get(_KEY)
        if isinstance(declared, Secret):
            values[field.name] = declared.option.read(args, environ)
            if declared.option.on_command_line(args):
                given_as_flags.append(declared.option)
        elif isinstance(declared, Option):
            value = getattr(args, field.name)
            values[field.name] = declared.convert(value) if declared.convert else value
    if any(field.name == _SECRETS_FIELD for field in fields):
        values[_SECRETS_FIELD] = tuple(given_as_flags)
    return values


def from_args(
    settings_type: type[S],
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    prog: str,
    description: str,
    **overrides: Any,
) -> S:
    """`settings_type` from the command line `argv` (default sys.argv) and `environ` (default
    os.environ), then `overrides`. Exits as argparse does on a bad flag or value; SecretSettingError
    as SecretOption.read."""
    args = parser(settings_type, environ, prog=prog, description=description).parse_args(argv)
    return settings_type(**{**read(settings_type, args, environ), **overrides})


def _add_option(
    to: argparse.ArgumentParser, field: dataclasses.Field[Any], declared: Option, env: Mapping[str, str]
) -> None:
    default = _default(field, declared)
    text = next((env[name] for name in declared.env if name in env), None)
    if text is not None:
        # A switch's variable is read here; any other's text is parsed by argparse, as a flag's is.
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
