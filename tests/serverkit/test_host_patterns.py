"""Host patterns (serverkit.host_patterns): what an environment's network policy and credential
bindings match, including the spellings an attacker would try to slip past them."""

from __future__ import annotations

import pytest

from serverkit.host_patterns import HostPatternError, parse


@pytest.mark.parametrize(
    ("pattern", "host", "port", "expected"),
    [
        ("example.com", "example.com", 443, True),
        ("example.com", "EXAMPLE.com.", 80, True),
        ("example.com", "api.example.com", 443, False),
        ("example.com", "example.com.evil.net", 443, False),
        ("example.com", "evilexample.com", 443, False),
        ("example.com:443", "example.com", 80, False),
        ("example.com:443", "example.com", 443, True),
        ("*.example.com", "api.example.com", 443, True),
        ("*.example.com", "a.b.example.com", 1, True),
        ("*.example.com", "example.com", 443, False),
        ("*.example.com", "badexample.com", 443, False),
        ("127.0.0.1:8080", "127.0.0.1", 8080, True),
        ("127.0.0.1:8080", "127.0.0.1", 8081, False),
        ("127.0.0.1", "localhost", 80, False),
        ("localhost", "127.0.0.1", 80, False),
        ("[::1]:80", "[::1]", 80, True),
        ("[::1]:80", "0:0:0:0:0:0:0:1", 80, True),
        ("[::1]", "::ffff:127.0.0.1", 80, False),
        ("example.com", "exa mple.com", 443, False),
        ("example.com", "example.com\x00.evil", 443, False),
    ],
)
def test_a_pattern_matches_exactly_what_it_names(pattern: str, host: str, port: int, expected: bool) -> None:
    assert parse(pattern).matches(host, port) is expected


@pytest.mark.parametrize(
    "pattern",
    [
        "",
        "*",
        "*.com",
        "ex*ample.com",
        "example.com:0",
        "example.com:65536",
        "example.com:http",
        "::1",
        "[::1",
        "*.10.0.0.1",
        "a" * 300,
        "-bad.com",
        "exa mple.com",
        "[::1]x",
        "http://example.com",
    ],
)
def test_what_is_no_pattern_is_refused_with_a_reason(pattern: str) -> None:
    with pytest.raises(HostPatternError) as caught:
        parse(pattern)
    assert str(caught.value)
    assert len(str(caught.value)) < 200


def test_a_pattern_prints_as_it_parses() -> None:
    for text in ("example.com", "example.com:443", "*.example.com:8443", "10.1.2.3", "[2001:db8::1]:443"):
        assert str(parse(text)) == text
