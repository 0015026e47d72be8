"""A session's tool grants: calls that run without asking a human.

The control plane sends the session's whole set (StartRuntime, SetToolGrants;
the newest replaces the one before). When the engine asks to use a tool (the
permission mode or the agent's `ask` policy sends the call to the tool gate),
a grant in force whose tool is the call's and whose pattern matches the
call's main input lets it run at once; no interaction is opened. A grant
never reaches a call the agent's policy denies (the PreToolUse hook refuses
it before the gate is asked) nor a question (AskUserQuestion).

The pattern is a glob over the tool's main input, as the kernel's proto
documents (ToolGrantScope.input_pattern): `*` matches any run of characters
(`/` too), `?` one character, everything else itself.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from astrabox.runner.v1 import runner_service_pb2 as pb

# Tools whose main input is one field of their input.
_MAIN_FIELD = {
    "Bash": "command",
    "Read": "file_path",
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
    "WebFetch": "url",
    "Glob": "pattern",
    "Grep": "pattern",
}
# Main fields that are paths: matched in normal form, so `/workspace/../etc/x` is `/etc/x`.
_PATHS = frozenset({"file_path", "notebook_path"})
# Questions are answered by a human each time; a grant never answers one.
_NEVER_GRANTED = frozenset({"AskUserQuestion"})


def main_input(tool_name: str, tool_input: Mapping[str, Any]) -> str:
    """What a grant's pattern is matched against: the tool's main field (a path in normal form), or
    its whole input as compact JSON with sorted keys."""
    field = _MAIN_FIELD.get(tool_name)
    if field is not None and isinstance(tool_input.get(field), str):
        value = str(tool_input[field])
        return posixpath.normpath(value) if field in _PATHS else value
    return json.dumps(tool_input, sort_keys=True, separators=(",", ":"), default=str)


def _compile(pattern: str) -> re.Pattern[str]:
    parts = [".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern]
    return re.compile("".join(parts), re.DOTALL)


@dataclass(frozen=True, slots=True)
class ToolGrant:
    grant_id: str
    tool_name: str
    input_pattern: str
    expires_at: datetime | None

    @classmethod
    def from_proto(cls, grant: pb.ToolGrant) -> ToolGrant:
        expires = grant.expire_time.ToDatetime(tzinfo=UTC) if grant.HasField("expire_time") else None
        return cls(grant.grant_id, grant.tool_name, grant.input_pattern, expires)

    def to_json(self) -> dict[str, Any]:
        return {
            "grant_id": self.grant_id,
            "tool_name": self.tool_name,
            "input_pattern": self.input_pattern,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> ToolGrant:
        expires = value.get("expires_at")
        return cls(
            str(value["grant_id"]),
            str(value["tool_name"]),
            str(value.get("input_pattern", "")),
            datetime.fromisoformat(expires) if expires else None,
        )

    def matches(self, tool_name: str, tool_input: Mapping[str, Any], now: datetime) -> bool:
        if tool_name != self.tool_name or tool_name in _NEVER_GRANTED:
            return False
        if self.expires_at is not None and now >= self.expires_at:
            return False
        return (
            not self.input_pattern
            or _compile(self.input_pattern).fullmatch(main_input(tool_name, tool_input)) is not None
        )


class ToolGrants:
    """The set in force for one session; replaced whole."""

    def __init__(self, grants: Iterable[ToolGrant] = ()) -> None:
        self._grants = tuple(grants)

    @classmethod
    def from_command(cls, blob: bytes) -> ToolGrants:
        """From a serialized SetToolGrants, as the agent's state keeps the session's set."""
        return cls(ToolGrant.from_proto(g) for g in pb.SetToolGrants.FromString(blob).grants)

    def replace(self, grants: Iterable[ToolGrant]) -> None:
        self._grants = tuple(grants)

    def __iter__(self) -> Any:
        return iter(self._grants)

    def matching(self, tool_name: str, tool_input: Mapping[str, Any], now: datetime | None = None) -> ToolGrant | None:
        """The first grant that lets this call run without asking, if any."""
        moment = now or datetime.now(UTC)
        return next((g for g in self._grants if g.matches(tool_name, tool_input, moment)), None)
