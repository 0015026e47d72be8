"""astrabox.testing.LocalStack: a whole stack in a child process that serves when entered and leaves
nothing behind (process, directory, mounted workspace) when left, or says why it did not start."""

from __future__ import annotations

import tempfile
from pathlib import Path

import grpc
import pytest

from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from astrabox.testing import LocalStack, LocalStackError

pytestmark = pytest.mark.e2e


def processes_naming(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in cmdline.read_bytes().decode(errors="replace"):
                found.append(cmdline.parent.name)
        except OSError:
            continue  # gone meanwhile
    return found


def mounts_under(directory: Path) -> list[str]:
    return [
        line.split(" ")[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split(" ")[4].startswith(str(directory))
    ]


async def test_the_stack_serves_inside_and_leaves_nothing_behind() -> None:
    async with LocalStack() as stack:
        address, data_dir = stack.address, stack.data_dir
        assert address.startswith("127.0.0.1:") and not address.endswith(":0")
        session = await stack.client.start_session(ready_timeout=120)
        await session.write_file("kept.txt", "here")
        assert await session.read_file("kept.txt") == b"here"
        assert processes_naming(str(data_dir)), "the stack runs no process naming its directory"
        assert "AstraBox is up on" in stack.log_path.read_text()

    assert not data_dir.exists()
    assert processes_naming(str(data_dir)) == []
    assert mounts_under(data_dir) == []
    with pytest.raises(RuntimeError):
        stack.client  # noqa: B018 - the property refuses once stopped
    async with AstraBoxClient.connect(address, timeout=5) as client:
        with pytest.raises(AstraBoxError) as gone:
            await client.get_session(session.id)
    assert gone.value.code == grpc.StatusCode.UNAVAILABLE


async def test_a_stack_that_cannot_start_says_why_and_leaves_nothing_behind() -> None:
    # Nothing listens on port 1: `astrabox up` fails to reach this database and exits.
    stack = LocalStack(env={"ASTRABOX_DATABASE_URL": "postgresql://astrabox@127.0.0.1:1/nothing"})
    scratch = set(Path(tempfile.gettempdir()).glob("astrabox-localstack-*"))
    with pytest.raises(LocalStackError) as failed:
        async with stack:
            raise AssertionError("the stack served without its database")
    assert "exited with status 1 before it served" in str(failed.value)
    assert "cannot connect to the database" in str(failed.value)
    assert set(Path(tempfile.gettempdir()).glob("astrabox-localstack-*")) <= scratch
