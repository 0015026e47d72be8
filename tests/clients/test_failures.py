"""What a failed `astrabox` command prints: one line saying what failed, also when the failure comes
out of a task group beside the cancellations it caused; never a traceback unless asked for."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from astrabox.errors import AstraBoxError
from astrabox.failures import TRACEBACK_ENV, causes, describe

ASTRABOX = str(Path(sys.executable).with_name("astrabox"))


async def _fail_in_a_task_group(error: BaseException) -> None:
    async def fail() -> None:
        await asyncio.sleep(0)
        raise error

    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(asyncio.sleep(3600))  # cancelled by the failure
        tasks.create_task(fail())


async def test_a_failure_inside_a_task_group_is_said_in_its_own_words() -> None:
    refused = AstraBoxError(grpc.StatusCode.FAILED_PRECONDITION, "session s-1 is FAILED", reason="UNEXPECTED_STATE")
    with pytest.raises(BaseExceptionGroup) as raised:
        await _fail_in_a_task_group(refused)

    assert causes(raised.value) == [refused]
    assert (
        describe(causes(raised.value), (AstraBoxError,))
        == "FAILED_PRECONDITION UNEXPECTED_STATE: session s-1 is FAILED"
    )


async def test_an_unexpected_error_is_named_with_its_type_and_how_to_see_where_it_came_from() -> None:
    with pytest.raises(BaseExceptionGroup) as raised:
        await _fail_in_a_task_group(KeyError("agent"))

    line = describe(causes(BaseExceptionGroup("outer", [raised.value, ValueError("second")])))

    assert line == f"KeyError: 'agent' (unexpected; {TRACEBACK_ENV}=1 shows where) (and 1 more failure)"
    assert describe([TimeoutError()]) == "timed out"
    assert describe([PermissionError(13, "Permission denied", "/data")]) == "[Errno 13] Permission denied: '/data'"


def test_a_command_that_fails_ends_in_one_line_on_stderr() -> None:
    env = {k: v for k, v in os.environ.items() if k != TRACEBACK_ENV}
    result = subprocess.run(
        [ASTRABOX, "run", "--target", "127.0.0.1:1", "--timeout", "5", "hello"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )

    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("astrabox: UNAVAILABLE: ")
