"""An environment's package entries, checked again on the agent before any reaches a package manager.

The control plane validates them too; the agent does not rely on it: each entry is a name with an
optional pin and nothing else, never starts with '-', and is passed after `--`, so no entry can be
read as an option, a URL or a path."""

from __future__ import annotations

import re
from dataclasses import dataclass

from astrabox.environments.v1 import environment_pb2 as env_pb

MAX_ENTRIES = 256
_OPERATOR = r"(?:===|==|>=|<=|~=|!=|<|>)"
_PATTERNS = {
    "apt": re.compile(r"[a-z0-9][a-z0-9+.-]{0,127}(?:=[A-Za-z0-9.+:~-]{1,64})?"),
    "pip": re.compile(
        rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}(?:\[[A-Za-z0-9._-]+(?:,[A-Za-z0-9._-]+)*\])?"
        rf"(?:{_OPERATOR}[A-Za-z0-9.*+!]{{1,64}}(?:,{_OPERATOR}[A-Za-z0-9.*+!]{{1,64}})*)?"
    ),
    "npm": re.compile(r"(?:@[a-z0-9][a-z0-9._-]{0,63}/)?[a-z0-9][a-z0-9._-]{0,127}(?:@[A-Za-z0-9.^~<>=*+-]{1,64})?"),
}


class PackageError(ValueError):
    """A package entry the agent refuses to hand to a package manager."""


@dataclass(frozen=True, slots=True)
class Packages:
    """Checked entries, per manager."""

    apt: tuple[str, ...] = ()
    pip: tuple[str, ...] = ()
    npm: tuple[str, ...] = ()

    @classmethod
    def from_proto(cls, packages: env_pb.Packages) -> Packages:
        return cls(
            apt=_checked("apt", packages.apt), pip=_checked("pip", packages.pip), npm=_checked("npm", packages.npm)
        )

    def __bool__(self) -> bool:
        return bool(self.apt or self.pip or self.npm)


def _checked(manager: str, entries: object) -> tuple[str, ...]:
    items = tuple(str(entry) for entry in entries)  # type: ignore[attr-defined]
    if len(items) > MAX_ENTRIES:
        raise PackageError(f"at most {MAX_ENTRIES} {manager} packages, got {len(items)}")
    for entry in items:
        if not _PATTERNS[manager].fullmatch(entry):
            raise PackageError(f"{manager} package {entry[:80]!r} is not a package name with an optional version")
    return items
