"""A workspace disk limit the filesystem enforces, on both drivers: writing past it fails inside the
sandbox with ENOSPC, an upload that would not fit is refused before anything is unpacked, the files
survive a stop and a re-open, and destroying the sandbox unmounts and removes its image."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.sandboxes.base import Sandbox, SandboxDriver
from dataplane_agent.sandboxes.disk import IMAGE, WorkspaceDisk
from tests.dataplane_agent.test_hostile_archives import SPEC, archive, gzip_bomb, member, sandbox_of, service
from tests.dataplane_agent.test_workspace import error_reason

DISK = WorkspaceDisk(size_mb=32)
@pytest.fixture(params=["local", "docker"])
async def limited(request: pytest.FixtureRequest, sandbox_root: Path, bwrap: str) -> AsyncIterator[tuple[SandboxDriver, Sandbox]]:
    if why := DISK.unavailable():
        pytest.skip(f"workspace images cannot be mounted here: {why}")
    async with sandbox_of(request.param, sandbox_root, bwrap, disk=DISK) as made:
        yield made


async def test_a_full_workspace_refuses_writes_and_uploads_and_is_unmounted_with_its_sandbox(limited) -> None:
    driver, sandbox = limited
    assert os.path.ismount(sandbox.workspace)
    assert os.lstat(sandbox.workspace).st_uid != 0 or os.geteuid() != 0
    client = service(driver, sandbox)

    listing = (await client.call(list_directory=pb.ListDirectory(path="")))[-1].listing
    assert [e.name for e in listing.entries] == []  # no lost+found

    filled = await client.call(exec_command=pb.ExecCommand(command="head -c 64M /dev/zero > big; echo exit=$?"))
    out = b"".join(r.stdout + r.stderr for r in filled)
    assert b"No space left on device" in out and b"exit=1" in out, out
    assert os.stat(sandbox.workspace / "big").st_size <= 32 * 1024 * 1024
    await client.call(exec_command=pb.ExecCommand(command="rm big && echo kept > kept.txt"))

    refused = (await client.upload("", gzip_bomb(48 * 1024 * 1024), chunk=1024 * 1024))[-1]
    assert error_reason(refused) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "WORKSPACE_FULL"), refused.error.message
    assert sorted(os.listdir(sandbox.workspace)) == ["kept.txt"]
    fits = (await client.upload("", archive(member("small", data=b"x" * 1000))))[-1]
    assert fits.WhichOneof("body") == "written"

    await driver.stop(sandbox)
    again = await driver.create(SPEC)
    assert os.path.ismount(again.workspace) and (again.workspace / "kept.txt").read_text() == "kept\n"

    directory = sandbox.workspace.parent
    assert (directory / IMAGE).exists()
    await driver.destroy(again)
    assert not os.path.ismount(again.workspace) and not directory.exists()
