"""The processes' log set-up (serverkit.logs): a log file of JSON lines, its warnings and errors
echoed readably where a person watches (what `astrabox up` and `demo` do), secrets masked in both."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator

import pytest
import structlog

from astrabox.secret_settings import remember
from serverkit import logs


@pytest.fixture
def restored() -> Iterator[None]:
    saved = structlog.get_config()
    try:
        yield
    finally:
        structlog.configure(**saved)


def test_warnings_and_errors_are_echoed_readably_and_every_line_is_logged_as_json(restored: None) -> None:
    secret = f"token-{uuid.uuid4().hex}"
    remember(secret)
    file, terminal = io.StringIO(), io.StringIO()
    logs.configure("json", "info", stream=file, echo=terminal)
    log = structlog.get_logger("test")

    log.info("agent_started", driver="local")
    log.warning("sandbox_limits_unavailable", limits=["cpu", "memory"], token=secret)
    log.error("agent_failed", error="no bubblewrap")
    log.debug("not_logged")

    logged = [json.loads(line) for line in file.getvalue().splitlines()]
    assert [entry["event"] for entry in logged] == ["agent_started", "sandbox_limits_unavailable", "agent_failed"]
    assert all("timestamp" in entry for entry in logged)
    echoed = terminal.getvalue().splitlines()
    assert echoed == [
        "[warning] sandbox_limits_unavailable limits=['cpu', 'memory'] token=***",
        "[error] agent_failed error='no bubblewrap'",
    ]
    assert secret not in file.getvalue() + terminal.getvalue()


def test_without_an_echo_only_the_log_stream_is_written(restored: None, capsys: pytest.CaptureFixture[str]) -> None:
    file = io.StringIO()
    logs.configure("json", "info", stream=file)
    structlog.get_logger("test").warning("quiet")
    assert json.loads(file.getvalue())["event"] == "quiet"
    assert capsys.readouterr() == ("", "")
